"""Tests for tf_tofu.verify.random_steps: random steps go through the whole pipeline.

The fast profile: hypothesis draws ``FAST_EXAMPLES`` random float64 training
steps (derandomized, so every run checks the same ones) and each must pass
``check`` (numerics equal to the unpartitioned run at the fixed float64
bound, counted bytes == predicted, every node on a plan device).  The long
campaign is ``tofu fuzz``.
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
from hypothesis import HealthCheck, given, settings

from tests import cpu_devices
import tf_tofu  # noqa: E402
from tf_tofu.verify import random_steps as rs  # noqa: E402

FAST_EXAMPLES = 16
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def setUpModule():
  cpu_devices.require()


def _spec(**kw):
  base = dict(input="dense", batch=3, dims=(5,), blocks=(rs.Block("matmul", size=7),
                                                          rs.Block("bias_relu")),
              classes=3, loss="sparse_xent", optimizer="adam", k=4, planner="tofu",
              comm="plain", seed=1)
  base.update(kw)
  return rs.StepSpec(**base)


class FastProfileTest(absltest.TestCase):

  @settings(max_examples=FAST_EXAMPLES, deadline=None, derandomize=True, database=None,
            suppress_health_check=list(HealthCheck))
  @given(rs.step_specs())
  def test_random_steps_partition_exactly(self, spec):
    self.assertEqual(rs.check(spec), [], spec.to_json())


class HandPickedTest(absltest.TestCase):
  """Cases the generator reaches rarely: odd sizes at large k, every input kind."""

  def test_dims_smaller_than_k_and_not_dividing_it(self):
    for spec in (_spec(batch=2, dims=(3,), k=8, planner="datapar", comm="collective"),
                 _spec(input="image", batch=3, dims=(7, 6, 3), k=6, optimizer="momentum",
                       blocks=(rs.Block("conv", size=5, kernel=3, stride=2),
                               rs.Block("depthwise", kernel=3, padding="VALID"),
                               rs.Block("max_pool", kernel=2, stride=2),
                               rs.Block("batch_norm"))),
                 _spec(input="tokens", batch=2, dims=(3, 5, 7), k=5, planner="spartan",
                       loss="xent", blocks=(rs.Block("attention"), rs.Block("layer_norm3"),
                                            rs.Block("ffn3", size=3)))):
      self.assertTrue(rs._valid(spec))
      self.assertEqual(rs.check(spec), [], spec.to_json())

  def test_never_worse_plans_that_the_improvement_pass_moved(self):
    """Found by the generator: a baseline's plan the pass then improves (dims 7 < k = 8),
    and Tofu's own plan improved (k = 4); both run exactly and count what they predict."""
    cases = ((_spec(input="tokens", batch=1, dims=(7, 7, 2), k=8, comm="collective",
                    loss="mse", optimizer="momentum", classes=2, seed=59637,
                    blocks=(rs.Block("attention", 7, 1, 1, "VALID"),) * 2),
              "on megatron's plan"),
             (_spec(input="image", batch=5, dims=(4, 5, 6), k=4, comm="collective",
                    optimizer="momentum", classes=4, seed=36599,
                    blocks=(rs.Block("avg_pool", 5, 3, 1, "SAME"),
                            rs.Block("image_residual", 7, 3, 2, "VALID"),
                            rs.Block("depthwise", 9, 3, 2, "VALID"),
                            rs.Block("depthwise", 8, 1, 1, "SAME"))),
              "on tofu's plan"))
    for spec, whose in cases:
      spec = dataclasses.replace(spec, never_worse=True)
      self.assertTrue(rs._valid(spec))
      fn, inputs, _ = rs.build_step(spec)
      plan = tf_tofu.function(fn, devices=spec.k, never_worse=True).plan(*inputs[0])
      self.assertTrue(any(n.startswith("exact improvement pass") and whose in n
                          for n in plan.notes), plan.notes)
      self.assertEqual(rs.check(spec), [], spec.to_json())

  def test_needs_priced_once_on_the_attention_step(self):
    """A random attention step at k = 2 (docs/method.md section 8) priced once: one exact
    level whose objective is the predicted bytes, and the plan runs exactly."""
    spec = _spec(input="tokens", batch=1, dims=(7, 7, 2), k=2, loss="mse", classes=2,
                 seed=1, blocks=(rs.Block("attention", 1, 1, 1, "VALID"),), needs_once=True)
    fn, inputs, _ = rs.build_step(spec)
    plan = tf_tofu.function(fn, devices=2, needs_once=True).plan(*inputs[0])
    self.assertEqual([lvl["needs"] for lvl in plan.level_search], ["once"])
    self.assertEqual(plan.objective, plan.total_bytes)
    self.assertEqual(rs.check(spec), [], spec.to_json())

  def test_an_objective_off_the_exact_bytes_is_reported(self):
    import tf_tofu.search.onecut as onecut
    real = onecut.finish_level

    def off_by_one(*args, **kwargs):
      import dataclasses as dc
      res = real(*args, **kwargs)
      return dc.replace(res, objective=res.objective + 1)

    onecut.finish_level = off_by_one
    try:
      failures = rs.check(_spec(k=2, needs_once=True))
    finally:
      onecut.finish_level = real
    self.assertLen(failures, 1)
    self.assertRegex(failures[0], r"^objective: one level priced once, objective [\d,]+ B "
                                  r"!= predicted [\d,]+ B")
    self.assertEqual(rs.failure_kind(failures), "objective")

  def test_a_wrong_byte_count_is_reported(self):
    real = tf_tofu.count_transfer_bytes
    import tf_tofu.ops.counting as counting
    counting.count_transfer_bytes = lambda gd: real(gd) + 1
    try:
      failures = rs.check(_spec())
    finally:
      counting.count_transfer_bytes = real
    self.assertLen(failures, 1)
    self.assertRegex(failures[0], r"^bytes: counted \d+ != predicted \d+")

  def test_a_pipeline_error_is_a_failure_with_its_type(self):
    failures = rs.check(_spec(k=99))  # more devices than the process has
    self.assertLen(failures, 1)
    self.assertTrue(failures[0].startswith("error: TofuError: devices=99"), failures)
    self.assertEqual(rs.failure_kind(failures), "error: TofuError")


class SpecTest(absltest.TestCase):

  def test_json_round_trip(self):
    spec = _spec(input="image", dims=(5, 4, 3), blocks=(rs.Block("conv", 4, 3, 2, "VALID"),))
    self.assertEqual(rs.StepSpec.from_json(spec.to_json()), spec)
    json.loads(spec.to_json())

  def test_a_spec_written_before_never_worse_loads_without_it(self):
    d = json.loads(_spec(never_worse=True).to_json())
    del d["never_worse"]
    self.assertFalse(rs.StepSpec.from_json(json.dumps(d)).never_worse)

  def test_never_worse_and_needs_once_are_drawn_for_tofu_alone(self):
    drawn = []

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(rs.step_specs())
    def collect(spec):
      drawn.append((spec.planner, spec.never_worse, spec.needs_once))

    collect()
    self.assertTrue(all(p == "tofu" for p, nw, once in drawn if nw or once), drawn)
    for option in (1, 2):
      self.assertIn(True, [d[option] for d in drawn if d[0] == "tofu"])
      self.assertIn(False, [d[option] for d in drawn if d[0] == "tofu"])

  def test_valid_rejects_windows_larger_than_the_image(self):
    self.assertFalse(rs._valid(_spec(input="image", dims=(3, 3, 1),
                                     blocks=(rs.Block("max_pool", kernel=3, stride=2,
                                                      padding="VALID"),) * 2)))
    self.assertTrue(rs._valid(_spec(input="image", dims=(3, 3, 1),
                                    blocks=(rs.Block("max_pool", kernel=3, padding="SAME"),))))


class ShrinkTest(absltest.TestCase):

  def test_shrinks_to_the_failing_block_at_the_smallest_request(self):
    def run(spec):  # a pretend bug: softmax blocks fail whatever else is there
      return (["numerics: outputs of step 1"]
              if any(b.kind == "softmax" for b in spec.blocks) else [])
    big = _spec(batch=9, dims=(11,), k=7, planner="spartan", comm="collective",
                optimizer="momentum", loss="mse", classes=6,
                blocks=(rs.Block("matmul", size=9), rs.Block("softmax"), rs.Block("tanh")))
    small = rs.shrink(big, run, budget=200)
    self.assertEqual([b.kind for b in small.blocks], ["softmax"])
    self.assertEqual((small.k, small.planner, small.comm, small.optimizer, small.loss),
                     (2, "tofu", "plain", "sgd", "sparse_xent"))
    self.assertEqual((small.batch, small.dims, small.classes), (1, (1,), 2))

  def test_never_worse_and_needs_once_are_dropped_when_the_failure_stays(self):
    small = rs.shrink(_spec(never_worse=True, needs_once=True),
                      lambda s: ["bytes: counted 1 != predicted 2"], budget=200)
    self.assertFalse(small.never_worse)
    self.assertFalse(small.needs_once)

  def test_a_passing_spec_is_left_alone(self):
    spec = _spec()
    self.assertIs(rs.shrink(spec, lambda s: []), spec)


class ReproductionTest(absltest.TestCase):

  def test_the_script_runs_standalone(self):
    path = os.path.join(tempfile.mkdtemp(), "repro.py")
    with open(path, "w") as f:
      f.write(rs.reproduction_script(_spec(k=3), ["numerics: (as found)"]))
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, path], capture_output=True, text=True, env=env,
                         timeout=300)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertIn("no failure: fixed", out.stdout)


if __name__ == "__main__":
  absltest.main()
