"""Tests for tf_tofu.rewrite.export: a partitioned step saved as a SavedModel loads back and trains.

A hand-written two-layer training step (float64, 7 rows over 3 devices, a
weight of 4 rows cut 3 ways) is partitioned onto ``/CPU:2, /CPU:1, /CPU:0``
(so the plan's device 0 is not the default device), saved with
``export.save`` into a temporary directory and loaded with
``tf.saved_model.load``.  Its one signature takes the feeds whole and returns
the fetches whole: under the step's own signature key and output names when
given (``train``; ``loss``, ``y``), else ``serving_default`` and
``signature_name`` keys; two calls compute what two calls of the
unpartitioned step compute (``TOL``) and leave the shards (named after their
variables) holding the trained variables; the saved step slices the feeds
and assembles the fetches on the devices the plan names, and loaded with
``export.LOAD_OPTIONS`` the shards are on those devices.
"""

import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized
from tensorflow.core.protobuf import saved_model_pb2

from tests import cpu_devices
import tf_tofu  # noqa: E402
from tf_tofu.rewrite import execute, export  # noqa: E402

TOL = dict(rtol=1e-12, atol=1e-12)
DEVICES = ("/CPU:2", "/CPU:1", "/CPU:0")
COMMS = ("plain", "collective")
# plain: saved under the step's own key and output names; collective: the defaults.
KEYS = {"plain": "train", "collective": "serving_default"}
OUTPUT_NAMES = {"plain": ("loss", "y"), "collective": None}


def setUpModule():
  cpu_devices.require()


def device_id(name):
  spec = tf.DeviceSpec.from_string(name)
  return (spec.device_type, spec.device_index)


def _two_layer_step():
  w1 = tf.Variable(np.linspace(-1.0, 1.0, 20).reshape(4, 5), name="w1")
  b1 = tf.Variable(np.linspace(0.5, -0.5, 5), name="b1")
  w2 = tf.Variable(np.linspace(0.3, -0.7, 15).reshape(5, 3), name="w2")
  variables = (w1, b1, w2)

  @tf.function(autograph=False)
  def step(x):
    with tf.GradientTape() as tape:
      y = tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2)
      loss = tf.reduce_sum(y * y)
    for v, g in zip(variables, tape.gradient(loss, variables)):
      v.assign_sub(0.01 * g)
    return loss, y

  return step, variables


class ExportTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    step, variables = _two_layer_step()
    graph = tf_tofu.trace(step, tf.TensorSpec((7, 4), tf.float64))
    w1 = next(v.handle for v in graph.variables if v.name == "w1")
    cls.values = {h: np.array(v) for h, v in graph.variable_values().items()}
    cls.fetches = list(graph.fetches)
    cls.partitioned, cls.paths = {}, {}
    for comm in COMMS:
      job = tf_tofu.partition(graph, devices=list(DEVICES), comm=comm,
                              constraints={"x:0": "cut(0)", w1: "cut(0)"})
      cls.partitioned[comm] = job.partitioned
      cls.paths[comm] = tempfile.mkdtemp(prefix=f"tofu_export_{comm}_")
      cls.addClassCleanup(shutil.rmtree, cls.paths[comm], ignore_errors=True)
      export.save(job.partitioned, cls.values, cls.paths[comm], cls.fetches,
                  signature_key=KEYS[comm], output_names=OUTPUT_NAMES[comm])
    # The reference: the unpartitioned step, twice, on the original variables.
    rng = np.random.default_rng(0)
    cls.xs = [rng.standard_normal((7, 4)) for _ in range(2)]
    cls.want = [[t.numpy() for t in step(tf.constant(x))] for x in cls.xs]
    cls.trained = {v.name.split(":")[0]: v.numpy() for v in variables}

  def load(self, comm="plain"):
    return tf.saved_model.load(self.paths[comm])

  def output_names(self, comm):
    return OUTPUT_NAMES[comm] or [export.signature_name(t) for t in self.fetches]

  def by_placeholder(self, p, loaded):
    return {f"{s.placeholder}:0": loaded.shards[v.name][i]
            for v in p.variables.values() for i, s in enumerate(v.shards)}

  def test_signature_name(self):
    self.assertEqual(export.signature_name("x:0"), "x")
    self.assertEqual(export.signature_name("dense/out:1"), "dense_out_1")
    self.assertEqual(export.signature_name("x:10"), "x_10")
    self.assertEqual(export.signature_name("model/dense/MatMul:0"), "model_dense_MatMul")

  @parameterized.named_parameters((comm, comm) for comm in COMMS)
  def test_one_signature_over_whole_feeds_and_fetches(self, comm):
    p = self.partitioned[comm]
    self.assertEqual(list(p.feeds), ["x:0"])
    self.assertEqual(sorted(len(p.fetches[t]) for t in self.fetches), [1, 3])  # loss, y by rows
    sig_map = self.load(comm).signatures
    self.assertEqual(list(sig_map), [KEYS[comm]])
    sig = sig_map[KEYS[comm]]
    self.assertEqual(sig.structured_input_signature,
                     ((), {"x": tf.TensorSpec((7, 4), tf.float64, name="x")}))
    self.assertEqual({k: (tuple(s.shape), s.dtype) for k, s in sig.structured_outputs.items()},
                     {n: (tuple(p.shapes[t]), tf.float64)
                      for n, t in zip(self.output_names(comm), self.fetches)})

  def test_output_names_must_match_the_fetches(self):
    p = self.partitioned["plain"]
    for names in (("loss",), ("a", "a")):
      with self.assertRaisesRegex(ValueError, "distinct names, one per fetch"):
        export.PartitionedModule(p, self.values, self.fetches, names)

  @parameterized.named_parameters((comm, comm) for comm in COMMS)
  def test_loaded_step_trains_like_the_unpartitioned_step(self, comm):
    p = self.partitioned[comm]
    if comm == "collective":
      self.assertGreater(p.collective_conversions, 0)
    loaded = self.load(comm)
    sig = loaded.signatures[KEYS[comm]]
    for i, (x, want) in enumerate(zip(self.xs, self.want)):
      got = sig(x=tf.constant(x))
      self.assertLen(got, len(self.fetches))
      for name, value in zip(self.output_names(comm), want):
        np.testing.assert_allclose(got[name].numpy(), value, **TOL, err_msg=f"call {i}, {name}")
    trained = execute.assemble_variables(p, self.by_placeholder(p, loaded))
    self.assertLen(trained, 3)
    for h, v in p.variables.items():
      np.testing.assert_allclose(trained[h], self.trained[v.name], **TOL, err_msg=v.name)

  def test_one_variable_per_shard_holding_its_box(self):
    p = self.partitioned["plain"]
    loaded = self.load()
    self.assertEqual(sorted(loaded.shards), ["b1", "w1", "w2"])  # named after the variables
    for v in p.variables.values():
      self.assertEqual([var.name for var in loaded.shards[v.name]],
                       [f"{v.name}/tofu_shard_{s.device}:0" for s in v.shards])
    shards = {f"{s.placeholder}:0": (h, s) for h, v in p.variables.items() for s in v.shards}
    self.assertLen(shards, 3 * len(DEVICES))
    w1 = next(v for v in p.variables.values() if v.name == "w1")
    self.assertEqual([s.box.shape for s in w1.shards], [(2, 5), (1, 5), (1, 5)])
    by_placeholder = self.by_placeholder(p, loaded)
    for key, (h, s) in shards.items():
      var = by_placeholder[key]
      self.assertIsInstance(var, tf.Variable)
      np.testing.assert_array_equal(var.numpy(), self.values[h][s.box.slices()], err_msg=key)

  def test_shards_load_on_the_devices_the_plan_names(self):
    # TensorFlow re-applies saved variable devices only with LOAD_OPTIONS and soft placement on;
    # a plain load puts every shard on the default device (same values).
    p = self.partitioned["plain"]
    tf.config.set_soft_device_placement(True)
    try:
      loaded = tf.saved_model.load(self.paths["plain"], options=export.LOAD_OPTIONS)
    finally:
      tf.config.set_soft_device_placement(False)
    for v in p.variables.values():
      for i, s in enumerate(v.shards):
        self.assertEqual(device_id(loaded.shards[v.name][i].device),
                         device_id(p.devices[s.device]), f"{v.name} shard {i}")
    self.assertEqual({device_id(var.device) for shards in self.load().shards.values()
                      for var in shards}, {("CPU", 0)})

  def test_feeds_sliced_and_fetches_assembled_on_the_plan_devices(self):
    # Read off the saved functions (with soft placement off a node runs where it says).
    p = self.partitioned["plain"]
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(self.paths["plain"], "saved_model.pb"), "rb") as f:
      saved.ParseFromString(f.read())
    # The signature's own nodes: the partitioned GraphDef is imported under "import/".
    (step,) = [fn for fn in saved.meta_graphs[0].graph_def.library.function
               if any(n.op == "Slice" and not n.name.startswith("import/") for n in fn.node_def)]
    nodes = {n.name: n for n in step.node_def}

    def const(ref):
      return tf.make_ndarray(nodes[ref.split(":")[0]].attr["value"].tensor).tolist()

    slices = sorted((device_id(n.device), n.input[0], const(n.input[1]), const(n.input[2]))
                    for n in nodes.values() if n.op == "Slice")
    self.assertEqual(slices, sorted((device_id(p.devices[s.device]), "x",
                                     [iv.lo for iv in s.box.intervals], list(s.box.shape))
                                    for s in p.feeds["x:0"]))
    (split,) = [t for t in self.fetches if len(p.fetches[t]) > 1]
    first = p.fetches[split][0].device
    self.assertEqual(device_id(p.devices[first]), ("CPU", 2))
    self.assertEqual([device_id(n.device) for n in nodes.values() if n.op == "ConcatV2"],
                     [device_id(p.devices[first])])

if __name__ == "__main__":
  absltest.main()
