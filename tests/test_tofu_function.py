"""Tests for tf_tofu.function: zoo training steps, partitioned, train like the original.

On 8 logical CPU devices with soft placement off, for the tiny zoo models
(MLP, WResNet, LSTM, GPT-style; plain TF and Keras 3; SGD and Adam):

* in float64, three partitioned training steps give the losses and every
  variable (weights, optimizer slots, counters) of the unpartitioned step
  within the fixed tolerance of ``tf_tofu.verify.equivalence`` (max |error|
  <= 1e-9 * max |reference| + 1e-9 per tensor; no run-time noise estimate);
* in float32, one SGD step per model family is a smoke test at the stated
  bound ``FLOAT32_RTOL``/``FLOAT32_ATOL`` (float32 rounding, one step);
* the bytes counted in the partitioned GraphDef equal the plan's prediction
  exactly, in both comm forms;
* every variable shard has its layout block's shape and lives on its device,
  and no device holds more than its share of weights and slots.

``cases()``: each plain-TF model runs every planner once (WResNet, the
slowest, three of them), the k cycling over {2, 3, 4, 8} and the optimizer
and comm form alternating, so every planner meets three models and every
model every k and both optimizers.  ``TF_TOFU_FULL_MATRIX=1``
runs every planner at every k for every model and optimizer (192 cases).
"""

import os

import numpy as np
import tensorflow as tf

from tests import cpu_devices  # splits the CPU before TensorFlow starts

from absl.testing import absltest, parameterized  # noqa: E402

import tf_tofu  # noqa: E402
from tf_tofu import models  # noqa: E402
from tf_tofu.layout import tiling  # noqa: E402
from tf_tofu.core.states import Cut  # noqa: E402
from tf_tofu.ops import count_transfer_bytes  # noqa: E402
from tf_tofu.rewrite import partition_graph_def  # noqa: E402
from tf_tofu.search import planners  # noqa: E402
from tf_tofu.verify import equivalence  # noqa: E402

KS = (2, 3, 4, 8)
MODELS = ("mlp", "wresnet", "lstm", "gpt")
STEPS = 3
WRESNET_PLANNERS = ("datapar", "spartan", "tofu")


def setUpModule():
  cpu_devices.require()


class Zoo:
  """A tiny zoo step, its inputs and the unpartitioned reference run."""

  def __init__(self, key, flavor, optimizer, dtype="float64", steps=STEPS):
    self.step = models.tiny(key, flavor=flavor, optimizer=optimizer, dtype=dtype)
    self.inputs = [self.step.example_inputs(seed=i) for i in range(steps)]
    self.reference = equivalence.Reference(self.step.fn, self.inputs)


class ZooCase(parameterized.TestCase):
  zoos: dict = {}

  @classmethod
  def zoo(cls, key, flavor, optimizer, dtype="float64", steps=STEPS) -> Zoo:
    k = (key, flavor, optimizer, dtype, steps)
    if k not in cls.zoos:
      cls.zoos[k] = Zoo(key, flavor, optimizer, dtype, steps)
    return cls.zoos[k]

  def check_training(self, zoo: Zoo, f, what: str, **tolerance):
    """The partitioned step's outputs and variables equal the reference's (float64 bound
    unless ``tolerance`` states another)."""
    bad = zoo.reference.compare(f, **tolerance)
    self.assertEqual([str(m) for m in bad], [], what)

  def check_shards(self, f, xs, what: str):
    """Every shard has its block's shape, on its device; no device holds more than its
    share: per variable, a block of ceil(size / cuts) along every dim the layout cuts."""
    p, plan = f.partitioned(*xs), f.plan(*xs)
    _, sgraph = f.traced(*xs)
    shards = f.shard_variables
    held = np.zeros(len(p.devices), np.int64)
    share = 0
    for h, v in p.variables.items():
      layout = plan.layouts[h]
      blocks = tiling.held_regions(v.shape, layout, plan.factors)
      cuts = [int(np.prod([n for st, n in zip(layout, plan.factors)
                           if isinstance(st, Cut) and st.dim == d])) for d in range(len(v.shape))]
      bound = [-(-size // c) for size, c in zip(v.shape, cuts)]
      itemsize = sgraph.tensors[h].itemsize
      share += int(np.prod(bound)) * itemsize
      for s in v.shards:
        var = shards[f"{s.placeholder}:0"]
        self.assertEqual(tuple(var.shape.as_list()), s.box.shape, f"{what}: {v.name} shard")
        self.assertEqual(s.box, blocks[s.device], f"{what}: {v.name} shard {s.device}")
        self.assertTrue(all(a <= b for a, b in zip(s.box.shape, bound)),
                        f"{what}: {v.name} shard {s.box} is larger than a block {bound}")
        self.assertEqual(tf.DeviceSpec.from_string(var.device).device_index,
                         tf.DeviceSpec.from_string(p.devices[s.device]).device_index)
        held[s.device] += s.box.volume * itemsize
    self.assertLessEqual(int(held.max()), share, f"{what}: a device holds more than its share")

  def check_bytes(self, f, xs, what: str, comms=("plain", "collective")):
    """The bytes crossing devices in the partitioned GraphDef, counted per ``comms`` form,
    equal the plan's prediction exactly."""
    _, sgraph = f.traced(*xs)
    plan = f.plan(*xs)
    for comm in comms:
      p = (f.partitioned(*xs) if comm == f.comm else
           partition_graph_def(sgraph, plan, f.describer, comm=comm))
      self.assertEqual(count_transfer_bytes(p.graph_def), plan.total_bytes, f"{what} {comm}")


def cases(key: str) -> list[tuple[int, str, str, str]]:
  """The (k, planner, optimizer, comm) cases of a plain-TF model; see the module docstring."""
  names = sorted(planners.PLANNERS)
  if os.environ.get("TF_TOFU_FULL_MATRIX") == "1":
    return [(k, pl, opt, ("plain", "collective")[i % 2])
            for i, (k, pl, opt) in enumerate((k, pl, opt) for opt in models.OPTIMIZERS
                                              for k in KS for pl in names)]
  m = MODELS.index(key)
  if key == "wresnet":  # the slowest to rewrite and run: three planners (the others run
    names = [pl for pl in names if pl in WRESNET_PLANNERS]  # on the three other models)
  return [(KS[(m + i) % len(KS)], pl, models.OPTIMIZERS[(m + i) % 2],
           ("plain", "collective")[(m + i // 2) % 2]) for i, pl in enumerate(names)]


class TrainingTest(ZooCase):
  """Plain-TF zoo models in float64: every planner, every k, both optimizers."""

  def setUp(self):
    super().setUp()
    # Grappler only re-optimises what runs; the matrix is checked without it (its numbers
    # are TensorFlow's kernels either way) to stay fast.  Keras and API tests keep it.
    saved = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    self.addCleanup(tf.config.optimizer.set_experimental_options,
                    {"disable_meta_optimizer": saved})

  @parameterized.parameters(*MODELS)
  def test_planners_and_ks(self, key):
    seen = set()
    for k, planner, optimizer, comm in cases(key):
      zoo = self.zoo(key, "tf", optimizer)
      what = f"{key}/{optimizer} k={k} {planner} {comm}"
      with self.subTest(k=k, planner=planner, optimizer=optimizer):
        f = tf_tofu.function(zoo.step.fn, devices=k, planner=planner, comm=comm)
        xs = zoo.inputs[0]
        plan = f.plan(*xs)
        key_ = (k, optimizer, comm, tuple(sorted(plan.layouts.items())),
                tuple(sorted(plan.strategies.items())))
        if key_ in seen:
          continue  # another planner's identical plan, already run
        seen.add(key_)
        self.check_bytes(f, xs, what)
        self.check_training(zoo, f, what)
        self.check_shards(f, xs, what)


class KerasTest(ZooCase):
  """Keras 3 zoo models in float64, tofu at k = 4; the comm form alternates, so each
  model trains with both forms across its two optimizers, and its bytes are counted in
  the form it runs (TrainingTest counts both forms of every plan it runs)."""

  @parameterized.parameters(*[(key, opt, ("plain", "collective")[(m + i) % 2])
                              for m, key in enumerate(MODELS)
                              for i, opt in enumerate(models.OPTIMIZERS)])
  def test_tofu_at_4(self, key, optimizer, comm):
    zoo = self.zoo(key, "keras", optimizer)
    f = tf_tofu.function(zoo.step.fn, devices=4, comm=comm)
    what = f"keras {key}/{optimizer} {comm}"
    self.check_bytes(f, zoo.inputs[0], what, comms=(comm,))
    self.check_training(zoo, f, what)
    self.check_shards(f, zoo.inputs[0], what)


class Float32SmokeTest(ZooCase):
  """One float32 SGD step per model family, at the stated float32 bound."""

  @parameterized.parameters(*MODELS)
  def test_one_step(self, key):
    zoo = self.zoo(key, "tf", "sgd", dtype="float32", steps=1)
    f = tf_tofu.function(zoo.step.fn, devices=4)
    self.check_training(zoo, f, f"float32 {key}", rtol=equivalence.FLOAT32_RTOL,
                        atol=equivalence.FLOAT32_ATOL)


class FunctionApiTest(ZooCase):

  def test_sync_then_continue_training(self):
    zoo = self.zoo("mlp", "tf", "adam")
    f = tf_tofu.function(zoo.step.fn, devices=4)
    zoo.reference.restore()
    first = float(f(*zoo.inputs[0]))
    untouched = zoo.reference.values()
    for n in untouched:  # the user's variables wait for sync_variables
      np.testing.assert_array_equal(untouched[n], zoo.reference.initial[n])
    f.sync_variables()
    after_one = zoo.reference.values()
    rest = [float(f(*xs)) for xs in zoo.inputs[1:]]
    f.sync_variables()
    zoo.reference.restore()
    np.testing.assert_allclose([first] + rest, np.ravel(zoo.reference.losses),
                               rtol=equivalence.RTOL)
    self.assertFalse(all(np.array_equal(after_one[n], zoo.reference.initial[n]) for n in after_one))

  def test_load_variables_restarts_from_the_users_values(self):
    zoo = self.zoo("mlp", "tf", "adam")
    f = tf_tofu.function(zoo.step.fn, devices=3)
    zoo.reference.restore()
    first = float(f(*zoo.inputs[0]))
    again_without_load = float(f(*zoo.inputs[0]))  # the shards trained on
    f.load_variables()                              # back to the user's (initial) values
    again = float(f(*zoo.inputs[0]))
    zoo.reference.restore()
    self.assertEqual(again, first)
    self.assertNotEqual(again_without_load, first)

  def test_decorator_and_a_second_signature(self):
    zoo = self.zoo("mlp", "tf", "sgd")
    fn = zoo.step.fn.python_function  # the zoo's tf.function fixes one input signature
    f = tf_tofu.function(devices=2)(fn)
    self.assertIsInstance(f, tf_tofu.Function)
    zoo.reference.restore()
    x, y = zoo.inputs[0]
    first = float(f(x, y))
    # Half the batch: another signature, another plan; its shards load the synced values.
    half = float(f(x[:2], y[:2]))
    self.assertLen(f._entries, 2)
    f.sync_variables()
    zoo.reference.restore()
    ref = tf.function(fn)
    want_first = float(ref(x, y))
    want_half = float(ref(x[:2], y[:2]))
    zoo.reference.restore()
    np.testing.assert_allclose([first, half], [want_first, want_half], rtol=equivalence.RTOL)

  def test_partitioned_graph_def_has_shapes_and_devices(self):
    zoo = self.zoo("lstm", "tf", "sgd")
    f = tf_tofu.function(zoo.step.fn, devices=3)
    gd = f.partitioned_graph_def(*zoo.inputs[0])
    p = f.partitioned(*zoo.inputs[0])
    for n in gd.node:
      self.assertIn(n.device, p.devices, n.name)
      self.assertIn("_output_shapes", n.attr, n.name)
      for s in n.attr["_output_shapes"].list.shape:
        self.assertFalse(s.unknown_rank, n.name)
        self.assertTrue(all(d.size >= 0 for d in s.dim), n.name)
    self.assertEqual(count_transfer_bytes(gd), f.plan(*zoo.inputs[0]).total_bytes)

  def test_plan_reports_memory(self):
    zoo = self.zoo("gpt", "tf", "sgd")
    f = tf_tofu.function(zoo.step.fn, devices=4)
    estimate = f.memory(*zoo.inputs[0])
    self.assertEqual(len(estimate["per_device"]), 4)
    self.assertGreater(estimate["single_device"], estimate["ideal"])
    self.assertIn("peak memory per device", f.plan(*zoo.inputs[0]).report(memory=estimate))

  def test_unknown_planner_and_missing_devices(self):
    zoo = self.zoo("mlp", "tf", "sgd")
    with self.assertRaisesRegex(ValueError, "unknown planner 'magic'"):
      tf_tofu.function(zoo.step.fn, devices=2, planner="magic")
    with self.assertRaisesRegex(ValueError, "does not exist"):
      tf_tofu.function(zoo.step.fn, devices=["/GPU:7"])
    with self.assertRaisesRegex(ValueError, "split the CPU"):
      tf_tofu.function(zoo.step.fn, devices=64)
    with self.assertRaisesRegex(tf_tofu.TofuError, "unknown search option.*'max_tabel'"):
      tf_tofu.function(zoo.step.fn, devices=2, max_tabel=4)

  def test_search_options_reach_the_plan(self):
    zoo = self.zoo("mlp", "tf", "sgd")
    f = tf_tofu.function(zoo.step.fn, devices=2, max_table=4)
    self.assertFalse(f.plan(*zoo.inputs[0]).proven_optimal)


class ScatterTest(ZooCase):
  """Sparse SGD on an embedding: ResourceScatterSub on row and column shards."""

  @parameterized.product(state=("cut(0)", "cut(1)"), k=(2, 3, 4))
  def test_embedding_shards(self, state, k):
    zoo = self.zoo("lstm", "tf", "sgd")
    probe = tf_tofu.function(zoo.step.fn, devices=1)
    graph, sgraph = probe.traced(*zoo.inputs[0])
    scatter = [op for op in sgraph.ops if op.op_type == "ResourceScatterSub"]
    self.assertLen(scatter, 1)
    handle = scatter[0].inputs[0]
    f = tf_tofu.function(zoo.step.fn, devices=k, constraints={handle: state})
    what = f"embedding {state} k={k}"
    layout = f.plan(*zoo.inputs[0]).layouts[handle]
    self.assertTrue(all(str(st) == state for st in layout), layout)
    self.check_bytes(f, zoo.inputs[0], what)
    self.check_training(zoo, f, what)
    self.check_shards(f, zoo.inputs[0], what)


class PlacementTest(ZooCase):
  """The run's partition graphs hold every node where the rewrite put it."""

  @parameterized.parameters("plain", "collective")
  def test_every_node_runs_where_placed(self, comm):
    zoo = self.zoo("lstm", "tf", "adam")
    f = tf_tofu.function(zoo.step.fn, devices=4, comm=comm)
    xs = zoo.inputs[0]
    p = f.partitioned(*xs)
    zoo.reference.restore()
    try:
      with cpu_devices.run_metadata() as collected:
        f(*xs)
    finally:
      zoo.reference.restore()
    md = collected[0]
    placed = {}
    for fg in md.function_graphs:
      for pg in fg.partition_graphs:
        for n in pg.node:
          placed[n.name] = n.device
    ours = {n.name: n.device for n in p.graph_def.node}
    found = {n: placed["import/" + n] for n in ours if "import/" + n in placed}
    self.assertEqual(sorted(set(ours) - set(found)), [])
    for n, dev in found.items():
      a, b = tf.DeviceSpec.from_string(dev), tf.DeviceSpec.from_string(ours[n])
      self.assertEqual((a.device_type, a.device_index), (b.device_type, b.device_index), n)


if __name__ == "__main__":
  absltest.main()
