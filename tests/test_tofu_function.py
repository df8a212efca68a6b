"""Tests for tf_tofu.function: zoo training steps, partitioned, train like the original.

On 8 logical CPU devices with soft placement off, for the tiny zoo models
(MLP, WResNet, LSTM, GPT-style; plain-TF flavour with SGD and Adam), k in
{2, 3, 4, 8} and the planners of ``matrix()``:

* three training steps give the losses and variables of the unpartitioned
  step.  Tolerance: float32 rounding (1e-5 of the largest magnitude), or more
  where the reduction order explains it - measured, per model, as the
  difference between the original step and the original step run on the
  same batches with their examples in another order (the same math, summed
  in another order).  The first loss, before any update, must match to
  float32 rounding or its own (forward-only) reorder noise.  For WResNet with Adam the floor is
  large (about 0.3 of a batch-norm shift): batch norm makes some gradients
  mathematically zero and Adam turns their rounding noise into full steps of
  either sign, so there the first loss and the byte counts are the sharp checks;
* the bytes counted in the partitioned GraphDef equal the plan's prediction
  exactly, in both comm forms;
* every variable shard has its layout block's shape and lives on its device,
  and no device holds more than its share of weights and slots.

``matrix()``: every planner at every k for SGD on MLP, LSTM and GPT; for
WResNet (the slowest to rewrite and run) and for Adam, tofu at every k and
every baseline at one k.  ``TF_TOFU_FULL_MATRIX=1`` runs every planner at
every k for every model and optimizer (192 cases, about 20 minutes here).
The Keras 3 flavour, placement (from the run's partition graphs) and the
API's bookkeeping are tested on fewer cases.
"""

import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(__file__))
import cpu_devices  # noqa: E402  (splits the CPU before TensorFlow starts)

from absl.testing import absltest, parameterized  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402

import tf_tofu  # noqa: E402
from tf_tofu import models, tiling  # noqa: E402
from tf_tofu.opdefs.strategy import Cut  # noqa: E402
from tf_tofu.ops import count_transfer_bytes  # noqa: E402
from tf_tofu.rewrite import partition_graph_def  # noqa: E402
from tf_tofu.search import baselines  # noqa: E402

KS = (2, 3, 4, 8)
MODELS = ("mlp", "wresnet", "lstm", "gpt")
STEPS = 3
RTOL = 1e-5


def setUpModule():
  cpu_devices.require()


def _handle(v):
  return v.handle if hasattr(v, "handle") else v


class Zoo:
  """A tiny zoo step with its live variables, inputs and the unpartitioned reference."""

  def __init__(self, key, flavor, optimizer):
    self.step = models.tiny(key, flavor=flavor, optimizer=optimizer)
    self.inputs = [self.step.example_inputs(seed=i) for i in range(STEPS)]
    probe = tf_tofu.function(self.step.fn, devices=1)
    graph, _ = probe.traced(*self.inputs[0])
    # By handle: Keras 3 variable names repeat across layers ("bias").
    self.live = {v.handle: (graph.live_handles[v.handle], v.dtype) for v in graph.variables}
    self.initial = self.values()
    self.losses, self.final = self.run_original(self.inputs)
    permuted = []
    for i, xs in enumerate(self.inputs):
      order = np.random.default_rng(100 + i).permutation(xs[0].shape[0])
      permuted.append(tuple(x[order] for x in xs))
    losses, final = self.run_original(permuted)
    # The noise floor: how far the same steps, summed in another order, land.
    self.noise = max([_err(losses, self.losses)] +
                     [_err(final[n], self.final[n]) for n in final])
    self.noise_first = _err(losses[:1], self.losses[:1])  # the forward pass alone
    self.restore()

  def values(self):
    return {n: tf.raw_ops.ReadVariableOp(resource=_handle(v), dtype=dt).numpy()
            for n, (v, dt) in self.live.items()}

  def restore(self):
    for n, (v, dt) in self.live.items():
      tf.raw_ops.AssignVariableOp(resource=_handle(v), value=tf.constant(self.initial[n], dt))

  def run_original(self, inputs):
    self.restore()
    losses = [float(self.step.fn(*xs)) for xs in inputs]
    return np.array(losses), self.values()


def _err(a, b) -> float:
  """Largest difference relative to the reference's largest magnitude, or to 1e-3 for a
  tensor near zero (an attention key bias has a zero gradient: rounding noise is all it
  gets)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if not b.size:
    return 0.0
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-3))


class ZooCase(parameterized.TestCase):
  zoos: dict = {}

  @classmethod
  def zoo(cls, key, flavor, optimizer) -> Zoo:
    if (key, flavor, optimizer) not in cls.zoos:
      cls.zoos[(key, flavor, optimizer)] = Zoo(key, flavor, optimizer)
    return cls.zoos[(key, flavor, optimizer)]

  def check_training(self, zoo: Zoo, f, what: str):
    """Runs three partitioned steps from the initial values; compares with the original.

    The first loss (no update yet) must match to float32 rounding (or the
    forward pass's own reorder noise: batch norm over two examples amplifies
    it); the later losses and the variables to the model's noise floor.
    """
    zoo.restore()
    losses = np.array([float(f(*xs)) for xs in zoo.inputs])
    f.sync_variables()
    got = zoo.values()
    zoo.restore()
    self.assertLessEqual(_err(losses[:1], zoo.losses[:1]), max(RTOL, 100 * zoo.noise_first),
                         f"{what}: first loss {losses[0]} != {zoo.losses[0]}")
    tol = max(RTOL, 20 * zoo.noise)
    self.assertLessEqual(_err(losses, zoo.losses), tol, f"{what}: losses {losses} != {zoo.losses}")
    for name, want in zoo.final.items():
      self.assertLessEqual(_err(got[name], want), tol,
                           f"{what}: variable {name} differs after {STEPS} steps")

  def check_shards(self, f, xs, what: str):
    """Every shard has its block's shape, on its device; no device holds more than its
    share: per variable, a block of ceil(size / cuts) along every dim the layout cuts."""
    p, plan = f.partitioned(*xs), f.plan(*xs, estimate_memory=False)
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

  def check_bytes(self, f, xs, what: str):
    _, sgraph = f.traced(*xs)
    plan = f.plan(*xs, estimate_memory=False)
    for comm in ("plain", "collective"):
      p = (f.partitioned(*xs) if comm == f.comm else
           partition_graph_def(sgraph, plan, f.describer, comm=comm))
      self.assertEqual(count_transfer_bytes(p.graph_def), plan.total_bytes, f"{what} {comm}")


def matrix(key: str, optimizer: str) -> list[tuple[int, str]]:
  """The (k, planner) cases of a model; see the module docstring."""
  planners = sorted(baselines.PLANNERS)
  if os.environ.get("TF_TOFU_FULL_MATRIX") == "1" or (optimizer == "sgd" and key != "wresnet"):
    return [(k, pl) for k in KS for pl in planners]
  one_k = 4 if optimizer == "sgd" else 3
  return [(k, "tofu") for k in KS] + [(one_k, pl) for pl in planners if pl != "tofu"]


class TrainingTest(ZooCase):
  """The acceptance matrix: plain-TF zoo models, SGD and Adam, every k and planner."""

  def setUp(self):
    super().setUp()
    # Grappler only re-optimises what runs; the matrix is checked without it (its numbers
    # are TensorFlow's kernels either way) to stay fast.  Keras and API tests keep it.
    saved = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    self.addCleanup(tf.config.optimizer.set_experimental_options,
                    {"disable_meta_optimizer": saved})

  @parameterized.product(key=MODELS, optimizer=models.OPTIMIZERS)
  def test_planners_and_ks(self, key, optimizer):
    zoo = self.zoo(key, "tf", optimizer)
    seen = set()
    for i, (k, planner) in enumerate(matrix(key, optimizer)):
      comm = ("plain", "collective")[i % 2]  # both forms run; bytes are checked in both
      what = f"{key}/{optimizer} k={k} {planner} {comm}"
      with self.subTest(k=k, planner=planner):
        f = tf_tofu.function(zoo.step.fn, devices=k, planner=planner, comm=comm)
        xs = zoo.inputs[0]
        plan = f.plan(*xs, estimate_memory=False)
        key_ = (k, comm, tuple(sorted(plan.layouts.items())), tuple(sorted(plan.strategies.items())))
        if key_ in seen:
          continue  # another planner's identical plan, already run
        seen.add(key_)
        self.check_bytes(f, xs, what)
        self.check_training(zoo, f, what)
        self.check_shards(f, xs, what)


class KerasTest(ZooCase):

  @parameterized.product(key=MODELS, optimizer=models.OPTIMIZERS)
  def test_tofu_at_4(self, key, optimizer):
    zoo = self.zoo(key, "keras", optimizer)
    f = tf_tofu.function(zoo.step.fn, devices=4)
    what = f"keras {key}/{optimizer}"
    self.check_bytes(f, zoo.inputs[0], what)
    self.check_training(zoo, f, what)
    self.check_shards(f, zoo.inputs[0], what)


class FunctionApiTest(ZooCase):

  def test_sync_then_continue_training(self):
    zoo = self.zoo("mlp", "tf", "adam")
    f = tf_tofu.function(zoo.step.fn, devices=4)
    zoo.restore()
    first = float(f(*zoo.inputs[0]))
    untouched = zoo.values()
    for n in untouched:  # the user's variables wait for sync_variables
      np.testing.assert_array_equal(untouched[n], zoo.initial[n])
    f.sync_variables()
    after_one = zoo.values()
    rest = [float(f(*xs)) for xs in zoo.inputs[1:]]
    f.sync_variables()
    zoo.restore()
    np.testing.assert_allclose([first] + rest, zoo.losses, rtol=1e-5)
    self.assertFalse(all(np.array_equal(after_one[n], zoo.initial[n]) for n in after_one))

  def test_decorator_and_a_second_signature(self):
    zoo = self.zoo("mlp", "tf", "sgd")
    fn = zoo.step.fn.python_function  # the zoo's tf.function fixes one input signature
    f = tf_tofu.function(devices=2)(fn)
    self.assertIsInstance(f, tf_tofu.Function)
    zoo.restore()
    x, y = zoo.inputs[0]
    first = float(f(x, y))
    # Half the batch: another signature, another plan; its shards load the synced values.
    half = float(f(x[:2], y[:2]))
    self.assertLen(f._entries, 2)
    f.sync_variables()
    zoo.restore()
    ref = tf.function(fn)
    want_first = float(ref(x, y))
    want_half = float(ref(x[:2], y[:2]))
    zoo.restore()
    np.testing.assert_allclose([first, half], [want_first, want_half], rtol=1e-5)

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
    plan = tf_tofu.function(zoo.step.fn, devices=4).plan(*zoo.inputs[0])
    self.assertEqual(len(plan.memory["per_device"]), 4)
    self.assertGreater(plan.memory["single_device"], plan.memory["ideal"])
    self.assertIn("peak memory per device", plan.report())

  def test_unknown_planner_and_missing_devices(self):
    zoo = self.zoo("mlp", "tf", "sgd")
    with self.assertRaisesRegex(ValueError, "unknown planner 'magic'"):
      tf_tofu.function(zoo.step.fn, devices=2, planner="magic")
    with self.assertRaisesRegex(ValueError, "does not exist"):
      tf_tofu.function(zoo.step.fn, devices=["/GPU:7"])
    with self.assertRaisesRegex(ValueError, "split the CPU"):
      tf_tofu.function(zoo.step.fn, devices=64)


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
    layout = f.plan(*zoo.inputs[0], estimate_memory=False).layouts[handle]
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
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    ctx = context.context()
    zoo.restore()
    try:
      ctx.enable_run_metadata()
      ctx.enable_graph_collection()
      f(*xs)
      md = ctx.export_run_metadata()
    finally:
      ctx.disable_graph_collection()
      ctx.disable_run_metadata()
      tf.config.optimizer.set_experimental_options(
          {"disable_meta_optimizer": saved.get("disable_meta_optimizer", False)})
      zoo.restore()
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
