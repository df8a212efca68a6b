"""Tests for tf_tofu.layout.memory: the plan's peak memory, before any rewrite.

Tolerance: none.  The model walks the nodes the plain rewrite emits, in its
order, with every buffer sized from boxes (``|box| x itemsize``), and applies
the same liveness (``peak_memory``) as the GraphDef estimate
(``tf_tofu.rewrite.memory``), which sizes the same buffers by TensorFlow's
shape inference.  So the two schedules coincide step for step (op type,
device, output bytes; checked here) and the per-device peaks and persistent
bytes must be equal, not merely close.
"""

import functools
import os
from unittest import mock

import tensorflow as tf
from absl.testing import absltest, parameterized

from tests import search_testlib
from tf_tofu import api, models
from tf_tofu.core import devices as devices_lib
from tf_tofu.core import plan as plans
from tf_tofu.core.states import REP, Cut
from tf_tofu.graph import view
from tf_tofu.layout import liveness, memory
from tf_tofu.layout.liveness import peak_memory
from tf_tofu.opdefs.registry import Describer
from tf_tofu.ops.shapes import StaticShapes
from tf_tofu.rewrite import partition_graph_def
from tf_tofu.rewrite import memory as rewrite_memory

FAMILIES = ("mlp", "wresnet", "lstm", "gpt", "gpt_untied")


@functools.lru_cache(maxsize=None)
def _traced(family: str, flavor: str, optimizer: str):
  step = models.tiny(family, flavor=flavor, optimizer=optimizer, materialize=False)
  with step.context():
    graph = api.as_graph(step.fn, step.input_signature)
  describer = Describer()
  return graph, view.from_tofu_graph(graph, describer), describer


def _rewrite_schedule(partitioned, shapes=None):
  """The GraphDef estimate's schedule, without the nodes that hold no bytes and that the
  model leaves out (resource placeholders of variable shards, the step's NoOp)."""
  steps, persistent = rewrite_memory.graph_def_schedule(partitioned.graph_def, shapes)
  handles = {n.name for n in partitioned.graph_def.node
             if n.op == "Placeholder" and n.attr["dtype"].type == tf.resource.as_datatype_enum}
  return [s for s in steps if s.name not in handles and s.op_type != "NoOp"], persistent


def check_agrees(test, graph, sg, plan, describer):
  """The model's schedule is the rewrite's, step for step, and the peaks are equal."""
  steps, persistent = memory.plan_schedule(sg, plan.factors, plan.layouts, plan.strategies,
                                          describer, plan.devices)
  got = peak_memory(steps, persistent)  # memory.plan_peak, from the schedule checked below
  p = partition_graph_def(sg, plan, describer, fetches=list(getattr(graph, "fetches", ["relu:0"])))
  shapes = StaticShapes(p.graph_def)  # TensorFlow's shape inference, once for both
  want = rewrite_memory.partitioned_peak(p, shapes)
  ref, _ = _rewrite_schedule(p, shapes)
  test.assertEqual([(s.op_type, s.device, s.output_bytes) for s in steps],
                   [(s.op_type, s.device, s.output_bytes) for s in ref])
  test.assertEqual(got.peak, want.peak)
  test.assertEqual(got.persistent, want.persistent)
  # schedule_peak counts the same schedule as it is made, without listing it.
  test.assertEqual(memory.schedule_peak(sg, plan.factors, plan.layouts, plan.strategies,
                                        describer, plan.devices), got)


FULL = os.environ.get("TF_TOFU_FULL_MATRIX") == "1"


def _zoo_cases():
  """Every family and flavour at k = 4 and the tf flavour at k = 2 and 8, with SGD and Adam
  (TF_TOFU_FULL_MATRIX=1; all 60 cases agree step for step); otherwise one optimizer per
  case, alternating, which keeps every family, flavour and k."""
  cases = [(f, flavor, 4) for f in FAMILIES for flavor in ("tf", "keras")]
  cases += [(f, "tf", k) for f in FAMILIES for k in (2, 8)]
  opts = ("sgd", "adam")
  if FULL:
    return [(*c, o) for c in cases for o in opts]
  return [(*c, opts[i % 2]) for i, c in enumerate(cases)]


class AgreesWithTheRewriteTest(parameterized.TestCase):

  @parameterized.parameters(*_zoo_cases())
  def test_tiny_zoo(self, family, flavor, k, optimizer):
    graph, sg, describer = _traced(family, flavor, optimizer)
    check_agrees(self, graph, sg, api.plan_view(sg, k, describer=describer, memory=False),
                 describer)

  @parameterized.parameters("datapar", "megatron", "allrow", "spartan", "equalchop")
  def test_baseline_plans(self, planner):
    graph, sg, describer = _traced("gpt", "tf", "adam")
    check_agrees(self, graph, sg, api.plan_view(sg, 4, planner, describer=describer, memory=False),
                 describer)

  def test_replicated_storage(self):
    graph, sg, describer = _traced("wresnet", "tf", "sgd")
    plan = api.plan_view(sg, 4, describer=describer, allow_rep_storage=True, memory=False)
    check_agrees(self, graph, sg, plan, describer)


def _matmul_relu():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, (8, 6), name="x")
    w = tf.compat.v1.placeholder(tf.float32, (6, 4), name="w")
    tf.raw_ops.Relu(features=tf.raw_ops.MatMul(a=x, b=w, name="mm"), name="relu")
  fake = search_testlib.graph_from_tf(g)
  describer = Describer()
  return fake, view.from_tofu_graph(fake, describer), describer


class KnownAnswerTest(absltest.TestCase):
  """relu(x @ w), x (8, 6), w (6, 4), float32, on 2 devices, every buffer counted by hand."""

  def _plan(self, sg, layouts, strategies):
    return plans.Plan(planner="hand", devices=devices_lib.resolve(2), factors=(2,),
                      layouts=layouts, strategies=strategies, total_bytes=0,
                      level_bytes=(0,), op_bytes={}, conversions=(), choices={}, op_groups={},
                      objective=0.0, proven_optimal=False, notes=(),
                      graph_signature=plans.graph_signature(sg))

  def test_batch_partition(self):
    # Each device: x rows (4x6 = 96 B), w whole (96 B), mm rows (64 B), relu rows (64 B);
    # x and w die after mm: peak at mm = 96 + 96 + 64; nothing moves, nothing persists.
    fake, sg, describer = _matmul_relu()
    plan = self._plan(sg, {"x:0": (Cut(0),), "w:0": (REP,), "mm:0": (Cut(0),),
                           "relu:0": (Cut(0),)}, {"mm": ("i",), "relu": ("i0",)})
    est = memory.plan_peak(sg, plan, describer)
    self.assertEqual(sorted(est.peak.values()), [256, 256])
    self.assertEqual(sorted(est.persistent.values()), [0, 0])
    check_agrees(self, fake, sg, plan, describer)

  def test_partial_sums_are_reduced_into_rows(self):
    # Cut k: device d holds x[:, 3d:3d+3] (96 B), w[3d:3d+3] (48 B) and a partial mm (8x4,
    # 128 B); device d sums rows 4d:4d+4 (64 B): its own slice (64), the addend received
    # (64) and the AddN (64).  Schedule: x0 x1 w0 w1 mm0 mm1, then for d0: own slice, d1
    # sends, AddN; for d1: own slice, d0 sends, AddN; then relu.  d0 still holds mm0 (it
    # sends from it later): 128 + 3 x 64 = 320.  d1 frees mm1 before its AddN: its peak is
    # at mm1, 96 + 48 + 128 = 272.  Persistent: the Slice begin/size vectors, pooled per
    # device: [0, 0], [4, 0], [4, 4] (8 B each).
    fake, sg, describer = _matmul_relu()
    plan = self._plan(sg, {"x:0": (Cut(1),), "w:0": (Cut(0),), "mm:0": (Cut(0),),
                           "relu:0": (Cut(0),)}, {"mm": ("k",), "relu": ("i0",)})
    est = memory.plan_peak(sg, plan, describer)
    d0, d1 = plan.devices
    self.assertEqual(est.persistent, {d0: 24, d1: 24})
    self.assertEqual(est.peak, {d0: 24 + 320, d1: 24 + 272})
    check_agrees(self, fake, sg, plan, describer)

  def test_missing_layout_or_strategy_is_refused(self):
    _, sg, describer = _matmul_relu()
    layouts = {"x:0": (Cut(0),), "w:0": (REP,), "mm:0": (Cut(0),), "relu:0": (Cut(0),)}
    with self.assertRaisesRegex(plans.PlanError, "no strategy for op 'relu'"):
      memory.plan_schedule(sg, (2,), layouts, {"mm": ("i",)}, describer)
    with self.assertRaisesRegex(plans.PlanError, "no layout for tensor 'relu:0'"):
      memory.plan_schedule(sg, (2,), {t: v for t, v in layouts.items() if t != "relu:0"},
                           {"mm": ("i",), "relu": ("i0",)}, describer)
    with self.assertRaisesRegex(plans.PlanError, "3 device names"):
      memory.plan_schedule(sg, (2,), layouts, {"mm": ("i",), "relu": ("i0",)}, describer,
                           ("a", "b", "c"))


def _plan_args(family: str, flavor: str, k: int) -> tuple:
  """The arguments of ``memory.plan_schedule`` for tofu's plan of a tiny model (Adam)."""
  _, sg, describer = _traced(family, flavor, "adam")
  plan = api.plan_view(sg, k, describer=describer, memory=False)
  return sg, plan.factors, plan.layouts, plan.strategies, describer, plan.devices


def _counted(owner, method: str, calls: list):
  """Patches ``owner.method`` to append its first argument to ``calls`` and go on."""
  real = getattr(owner, method)
  return mock.patch.object(owner, method, lambda x, *a: calls.append(x) or real(x, *a))


class ReplayTest(parameterized.TestCase):
  """A conversion recorded once and replayed emits the nodes its own emission would."""

  @parameterized.parameters(("gpt", "keras", 4), ("wresnet", "tf", 8), ("lstm", "tf", 2))
  def test_replayed_schedule_is_the_emitted_one(self, family, flavor, k):
    args = _plan_args(family, flavor, k)
    replays = []
    with _counted(memory._Template, "replay", replays):
      replayed = memory.plan_schedule(*args)
    self.assertGreater(len(replays), 10)  # repeated layers reuse their conversions
    with mock.patch.object(memory._Template, "of", lambda *a: None):
      emitted = memory.plan_schedule(*args)  # every conversion emitted afresh
    self.assertEqual(replayed, emitted)  # every step (names, inputs, bytes) and persistent

  @parameterized.parameters(("gpt", "keras", 4), ("wresnet", "tf", 8), ("lstm", "tf", 2),
                            ("mlp", "tf", 6))
  def test_a_replay_run_at_once_counts_what_its_nodes_count(self, family, flavor, k):
    args = _plan_args(family, flavor, k)
    runs = []
    with _counted(liveness.Liveness, "run", runs):
      at_once = memory._model(*args, keep_steps=False).live
    self.assertGreater(len(runs), 5)  # (a conversion that makes no node is not a run)
    with mock.patch.object(memory._Template, "_run", lambda *a: None):
      by_node = memory._model(*args, keep_steps=False).live  # every node added in turn
    # The same tensors and steps, and the same buffers (device, size, born, last).
    self.assertEqual((at_once.first_output, at_once.step_of), (by_node.first_output,
                                                               by_node.step_of))
    self.assertEqual(sorted(zip(at_once.device, at_once.size, at_once.born, at_once.last)),
                     sorted(zip(by_node.device, by_node.size, by_node.born, by_node.last)))


class SingleDeviceTest(absltest.TestCase):

  def test_single_device_peak_of_a_chain(self):
    # x (192 B) and w (96 B) live with mm (128 B) at mm; relu's output dies at once.
    _, sg, describer = _matmul_relu()
    self.assertEqual(memory.single_device_peak(sg, describer), 192 + 96 + 128)

  def test_plan_memory_summary(self):
    graph, sg, describer = _traced("gpt", "tf", "sgd")
    plan = api.plan_view(sg, 4, describer=describer)
    s = memory.plan_memory(sg, plan, describer)
    self.assertEqual(s["worst"], max(s["per_device"].values()))
    self.assertEqual(s["single_device"], memory.single_device_peak(sg, describer))
    self.assertEqual(s["ideal"], s["single_device"] // 4)


if __name__ == "__main__":
  absltest.main()
