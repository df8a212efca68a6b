"""Tests for tf_tofu.graph.ingest: control-flow refusal, inlining, shape folding, static shapes."""

from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from tensorflow.core.framework import graph_pb2

from tests import cpu_devices
import tf_tofu
from tf_tofu import models
from tf_tofu.graph import ingest as ingest_tf
from tf_tofu.graph.ingest import IngestError, Resource
from tf_tofu.verify import equivalence

SHAPE_ARITHMETIC = {"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs", "Prod",
                    "FloorDiv", "Fill"}


def _graph(build):
  graph = tf.Graph()
  with graph.as_default():
    build()
  return graph.as_graph_def()


class NamesTest(absltest.TestCase):

  def test_tensor_and_node_names(self):
    self.assertEqual(ingest_tf.node_of("^a/b"), "a/b")
    self.assertEqual(ingest_tf.node_of("a/b:3"), "a/b")
    self.assertEqual(ingest_tf.node_of("a/b"), "a/b")
    self.assertEqual(ingest_tf.tensor_name("a"), "a:0")
    self.assertEqual(ingest_tf.tensor_name("a:2"), "a:2")


class ControlFlowTest(absltest.TestCase):

  def test_control_flow_in_a_library_function_is_named(self):
    @tf.function
    def looped(x):
      return tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + 1.0), [0, x])[1]

    gd = looped.get_concrete_function(tf.TensorSpec([3])).graph.as_graph_def()
    with self.assertRaisesRegex(IngestError, r"op 'while' \(\w*While\) in function "
                                r"'while_body_\w*'|op 'while' \(\w*While\) in the graph"):
      ingest_tf.check_control_flow(gd)

  def test_v1_switch_is_refused(self):
    gd = graph_pb2.GraphDef()
    gd.node.add(name="p", op="Placeholder").attr["dtype"].type = tf.bool.as_datatype_enum
    gd.node.add(name="sw", op="Switch", input=["p", "p"])
    with self.assertRaisesRegex(IngestError, r"op 'sw' \(Switch\) in the graph is a conditional"):
      ingest_tf.check_control_flow(gd)

  def test_straight_line_graph_passes(self):
    ingest_tf.check_control_flow(_graph(lambda: tf.nn.relu(tf.constant([1.0]))))


class InliningTest(absltest.TestCase):

  def test_api_implements_is_stripped_and_calls_inlined(self):
    @tf.function(experimental_attributes={"api_implements": "my_relu"})
    def my_relu(x):
      return tf.nn.relu(x)

    @tf.function
    def outer(x):
      return my_relu(x) * 2.0

    cf = outer.get_concrete_function(tf.TensorSpec([4], tf.float32))
    gd = cf.graph.as_graph_def()
    self.assertTrue(any(f.attr["api_implements"].s for f in gd.library.function))
    stripped = ingest_tf.strip_api_implements(gd)
    self.assertFalse(any("api_implements" in f.attr for f in stripped.library.function))
    self.assertTrue(any("api_implements" in f.attr for f in gd.library.function))  # a copy
    g = tf_tofu.trace(cf)
    types = {op.op_type for op in g.ops.values()}
    self.assertIn("Relu", types)
    self.assertFalse(types & ingest_tf.CALL_OPS)


class ShapeTest(absltest.TestCase):

  def test_materialize_shapes_replaces_shape_ops_by_constants(self):
    def build():
      a = tf.compat.v1.placeholder(tf.float32, [2, 5], name="a")
      b = tf.compat.v1.placeholder(tf.float32, [3], name="b")
      # raw ops: tf.shape & co. already fold static shapes in Python.
      s = tf.raw_ops.Shape(input=a, name="s")
      n = tf.raw_ops.ShapeN(input=[a, b], name="n")
      tf.identity(s, name="use_s")
      tf.identity(n[1], name="use_n1")
      tf.raw_ops.Size(input=a, name="size")
      tf.raw_ops.Rank(input=b, name="rank")

    gd = _graph(build)
    shapes, _ = ingest_tf.infer_shapes(gd, {})
    self.assertEqual(shapes["n:1"], (1,))
    out, folded = ingest_tf.materialize_shapes(gd, shapes)
    self.assertEqual(folded, 5)  # Shape, ShapeN x2, Size, Rank
    nodes = {n.name: n for n in out.node}
    self.assertEqual(nodes["s"].op, "Const")
    np.testing.assert_array_equal(tf.make_ndarray(nodes["s"].attr["value"].tensor), [2, 5])
    self.assertEqual(int(tf.make_ndarray(nodes["size"].attr["value"].tensor)), 10)
    self.assertEqual(int(tf.make_ndarray(nodes["rank"].attr["value"].tensor)), 1)
    self.assertNotIn("n", nodes)
    self.assertEqual(list(nodes["use_n1"].input), ["n/tofu_shape_1"])
    np.testing.assert_array_equal(
        tf.make_ndarray(nodes["n/tofu_shape_1"].attr["value"].tensor), [3])

  def test_unknown_shapes_stay(self):
    def build():
      a = tf.compat.v1.placeholder(tf.float32, [None, 5], name="a")
      tf.raw_ops.Shape(input=a, name="s")

    gd = _graph(build)
    shapes, _ = ingest_tf.infer_shapes(gd, {})
    self.assertEqual(shapes["a:0"], (None, 5))
    out, folded = ingest_tf.materialize_shapes(gd, shapes)
    self.assertEqual(folded, 0)
    self.assertEqual({n.name: n.op for n in out.node}["s"], "Shape")

  def test_variable_shapes_come_from_the_handles(self):
    def build():
      h = tf.raw_ops.Placeholder(dtype=tf.resource, shape=[], name="h")
      tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32, name="read")

    gd = _graph(build)
    shapes, _ = ingest_tf.infer_shapes(gd, {})
    self.assertIsNone(shapes["read:0"])  # a bare import loses the variable's shape
    res = {"h": Resource(op="h", name="w", shape=(3, 7), dtype="float32", trainable=True)}
    shapes, dtypes = ingest_tf.infer_shapes(gd, res)
    self.assertEqual(shapes["read:0"], (3, 7))
    self.assertEqual((shapes["h:0"], dtypes["h:0"]), ((), "resource"))

  def test_fused_batch_norm_workspace_is_a_scalar(self):
    step = models.tiny("wresnet", flavor="tf")
    g = tf_tofu.trace(step.fn, *step.input_signature)
    bn = [op for op in g.ops.values() if op.op_type == "FusedBatchNormV3"]
    self.assertTrue(bn)
    for op in bn:
      self.assertEqual(g.tensors[op.outputs[5]].shape, ())
    kinds = {op.op_type for op in g.ops.values()}
    self.assertFalse(kinds & SHAPE_ARITHMETIC, kinds & SHAPE_ARITHMETIC)

  def test_keras_train_step_shape_arithmetic_folds_away(self):
    step = models.tiny("gpt", flavor="keras", optimizer="adam")
    cf = step.fn.get_concrete_function(*step.input_signature)
    before = {op.type for op in cf.graph.get_operations()}
    self.assertTrue(before & {"Shape", "BroadcastGradientArgs"}, before)
    g = tf_tofu.trace(cf)
    kinds = {op.op_type for op in g.ops.values()}
    self.assertFalse(kinds & SHAPE_ARITHMETIC, kinds & SHAPE_ARITHMETIC)
    for op in g.ops.values():
      if op.op_type in ("Reshape", "Tile", "Transpose", "Sum", "Mean", "ConcatV2"):
        meta = op.inputs[-1] if op.op_type != "Tile" else op.inputs[1]
        self.assertEqual(g.ops[g.tensors[meta].producer].op_type, "Const", op.name)


class FoldLimitTest(absltest.TestCase):
  """A constant subgraph whose output is larger than FOLD_LIMIT_BYTES stays computed."""

  def setUp(self):
    super().setUp()
    cpu_devices.require()
    limit = mock.patch.object(ingest_tf, "FOLD_LIMIT_BYTES", 4096)
    limit.start()
    self.addCleanup(limit.stop)

  def _masked_step(self):
    w = tf.Variable(np.linspace(-1, 1, 16 * 16).reshape(16, 16), dtype=tf.float64)

    @tf.function(autograph=False)
    def step(x):  # x: (4, 16, 16); a causal mask broadcast to it (8 KiB of float64)
      with tf.GradientTape() as tape:
        mask = tf.linalg.band_part(tf.ones((4, 16, 16), tf.float64), -1, 0, name="causal")
        loss = tf.reduce_sum(tf.nn.relu(tf.einsum("bij,jk->bik", x, w)) * mask)
      w.assign_sub(0.01 * tape.gradient(loss, w))
      return loss
    return step

  def test_large_constants_are_not_folded_and_the_step_is_unchanged(self):
    step = self._masked_step()
    spec = tf.TensorSpec((4, 16, 16), tf.float64)
    g = tf_tofu.trace(step, spec)
    self.assertEqual(g.ops["causal"].op_type, "MatrixBandPart")
    for op in g.ops.values():
      if op.op_type == "Const":  # the small constants still fold
        self.assertLessEqual(max((g.tensors[t].nbytes for t in op.outputs), default=0), 4096,
                             op.name)
    rng = np.random.default_rng(0)
    inputs = [(rng.normal(size=(4, 16, 16)),) for _ in range(2)]
    ref = equivalence.Reference(step, inputs)
    self.assertEqual([str(m) for m in ref.compare(tf_tofu.function(step, devices=2))], [])


class TracingTest(absltest.TestCase):

  def test_concrete_function_refuses_non_callables(self):
    with self.assertRaisesRegex(IngestError, "cannot trace int"):
      ingest_tf.concrete_function(3, ())

  def test_resource_arguments_are_refused(self):
    v = tf.Variable(1.0)

    @tf.function
    def f(h):
      return tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32)

    with self.assertRaisesRegex(IngestError, "is a resource; pass variables by closure"):
      tf_tofu.trace(f, v.handle)


if __name__ == "__main__":
  absltest.main()
