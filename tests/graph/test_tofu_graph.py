"""Tests for tf_tofu.graph.tofu_graph: trace, from_graph_def, from_saved_model and the TofuGraph they make."""

import collections
import os
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from google.protobuf import text_format

import tf_tofu
from tf_tofu import models
from tf_tofu.graph import IngestError, Op, Tensor, TofuGraph, Variable
from tf_tofu.opdefs import registry

_CACHE = {}


def _mlp(optimizer="sgd", flavor="tf"):
  key = (optimizer, flavor)
  if key not in _CACHE:
    step = models.tiny("mlp", flavor=flavor, optimizer=optimizer)
    _CACHE[key] = (step, tf_tofu.trace(step.fn, *step.input_signature))
  return _CACHE[key]


def _run_both(step, g, seed=1):
  """Runs the original step and the ingested graph from the same state; returns both results."""
  variables = list(step.variables) + list(step.optimizer_variables)
  start = [v.numpy() for v in variables]
  inputs = step.example_inputs(seed)
  loss_a = float(step.fn(*inputs))
  after_a = [v.numpy() for v in variables]
  for v, s in zip(variables, start):
    v.assign(s)
  loss_b = float(g.as_function()(*[tf.constant(x) for x in inputs])[0])
  after_b = [v.numpy() for v in variables]
  return (loss_a, after_a), (loss_b, after_b), start


class TraceTest(absltest.TestCase):

  def test_value_types(self):
    _, g = _mlp()
    self.assertIsInstance(g, TofuGraph)
    self.assertTrue(all(isinstance(op, Op) for op in g.ops.values()))
    self.assertTrue(all(isinstance(t, Tensor) for t in g.tensors.values()))
    self.assertTrue(all(isinstance(v, Variable) for v in g.variables))
    op = next(iter(g.ops.values()))
    with self.assertRaises(Exception):
      op.name = "x"  # frozen

  def test_ops_are_topological_and_tensors_consistent(self):
    _, g = _mlp()
    seen = set()
    for op in g.ops.values():
      for t in op.inputs:
        self.assertIn(g.tensors[t].producer, seen, f"{op.name} reads {t} before it is made")
      for c in op.control_inputs:
        self.assertIn(c, seen)
      seen.add(op.name)
      for k, t in enumerate(op.outputs):
        self.assertEqual(g.tensors[t].producer, op.name)
        self.assertEqual(g.tensors[t].index, k)
        self.assertEqual(t, f"{op.name}:{k}")
    for t in g.tensors.values():
      for consumer, pos in t.consumers:
        self.assertEqual(g.ops[consumer].inputs[pos], t.name)
      self.assertIs(g.op_of(t.name), g.ops[t.producer])

  def test_feeds_fetches_and_static_shapes(self):
    step, g = _mlp()
    self.assertEqual(g.feeds, ("x:0", "y:0"))
    self.assertEqual(g.tensors["x:0"].shape, (4, 6))
    self.assertEqual(g.tensors["y:0"].dtype, "int32")
    self.assertLen(g.fetches, 1)
    self.assertEqual(g.tensors[g.fetches[0]].shape, ())
    self.assertEqual(g.loss, g.fetches)
    for v in g.variables:
      self.assertEqual(g.tensors[v.handle].dtype, "resource")
      self.assertEqual(g.ops[g.tensors[v.handle].producer].role, "variable")
    for op in g.ops.values():
      if op.op_type == "Const":
        self.assertIsNotNone(g.tensors[op.outputs[0]].value)
        self.assertEqual(g.tensors[op.outputs[0]].value.shape, g.tensors[op.outputs[0]].shape)

  def test_control_outputs_are_the_updates(self):
    _, g = _mlp()
    updates = {u for v in g.variables for u in v.updates}
    self.assertTrue(updates)
    self.assertTrue(updates <= set(g.control_outputs))

  def test_every_op_is_described_or_opaque_per_the_registry(self):
    _, g = _mlp("adam", "keras")
    for op in g.ops.values():
      if registry.lookup(op.op_type) is None:
        self.assertIsNone(op.semantics)
        self.assertEqual(op.opaque_reason, f"no description for {op.op_type}")
      else:
        self.assertTrue((op.semantics is None) != (op.opaque_reason is None), op.name)
      if op.semantics is not None:
        for k, out in enumerate(op.semantics.outputs):
          self.assertEqual(out.shape, g.tensors[op.outputs[k]].shape, op.name)

  def test_equal_ops_share_one_description_each_with_its_own_context(self):
    # Two Reshapes of one context key (their shape input a constant: a meta input) and
    # a third of another: the description runs once per key, every op keeps its name.
    def step(x):
      return (tf.reshape(x + 1.0, [6, 4]) + tf.reshape(x * 2.0, [6, 4]),
              tf.reshape(x, [4, 6]))

    calls = []
    describe = registry.lookup("Reshape")

    def counted(ctx):
      calls.append(ctx.op_type)
      return describe(ctx)

    with absltest.mock.patch.dict(registry._REGISTRY, {"Reshape": counted}):
      g = tf_tofu.trace(step, tf.TensorSpec([2, 3, 4]))
    reshapes = sorted((op for op in g.ops.values() if op.op_type == "Reshape"),
                      key=lambda op: op.name)
    self.assertLen(reshapes, 3)
    self.assertEqual(calls.count("Reshape"), 2)
    for op in reshapes:
      self.assertEqual(op.semantics.op.name, op.name)
      self.assertEqual(op.semantics.meta_inputs, frozenset({1}))
    keys = [registry.context_key(op.semantics.op) for op in reshapes]
    shared = [op for op, k in zip(reshapes, keys) if keys.count(k) == 2]
    self.assertLen(shared, 2)
    self.assertIs(shared[0].semantics.outputs, shared[1].semantics.outputs)
    self.assertEqual(float(g.as_function()(tf.ones([2, 3, 4]))[0][0, 0]), 4.0)

  def test_variables(self):
    step, g = _mlp("adam")
    trainable = {v.name: v for v in g.variables if v.trainable}
    self.assertCountEqual(trainable, [v.name.split(":")[0] for v in step.variables])
    slots = [v for v in g.variables if not v.trainable]
    self.assertLen(slots, 2 + 2 * len(step.variables))  # beta powers, m and v per weight
    kernel = trainable["dense_0/kernel"]
    self.assertEqual(kernel.shape, (6, 8))
    self.assertEqual(g.ops[g.tensors[kernel.gradient].producer].op_type, "MatMul")
    self.assertEqual([g.ops[u].op_type for u in kernel.updates], ["ResourceApplyAdam"])
    self.assertIs(g.variable("dense_0/kernel"), kernel)
    self.assertIsInstance(g.live_handles[kernel.handle], tf.Variable)

  def test_graph_runs_like_the_step(self):
    for optimizer, flavor in (("adam", "tf"), ("sgd", "keras")):
      step, g = _mlp(optimizer, flavor)
      (la, va), (lb, vb), start = _run_both(step, g)
      self.assertAlmostEqual(la, lb, places=6)
      for a, b, s in zip(va, vb, start):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
      self.assertTrue(any(not np.array_equal(a, s) for a, s in zip(va, start)))

  def test_to_networkx_and_summary(self):
    _, g = _mlp()
    nx_graph = g.to_networkx()
    self.assertEqual(nx_graph.number_of_nodes(), len(g.ops))
    data_edges = {(g.tensors[t].producer, op.name) for op in g.ops.values() for t in op.inputs}
    self.assertTrue(data_edges <= set(nx_graph.edges))
    self.assertEqual(nx_graph.nodes["x"]["role"], "input")
    text = g.summary()
    self.assertIn(f"{len(g.ops)} ops", text)
    self.assertIn("6/6 trainable variables linked", text)
    self.assertIn("0 unattached", text)

  def test_trace_accepts_callables_values_and_concrete_functions(self):
    w = tf.Variable(tf.ones([3, 2]))

    def step(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.relu(x @ w))
      w.assign_sub(0.5 * tape.gradient(loss, w))
      return loss

    g1 = tf_tofu.trace(step, np.ones([5, 3], np.float32))
    cf = tf.function(step).get_concrete_function(tf.TensorSpec([5, 3]))
    g2 = tf_tofu.trace(cf)
    for g in (g1, g2):
      self.assertEqual(g.tensors[g.feeds[0]].shape, (5, 3))
      (v,) = g.variables
      self.assertTrue(v.trainable)
      self.assertEqual(g.tensors[v.gradient].shape, (3, 2))
    with self.assertRaisesRegex(IngestError, "already traced"):
      tf_tofu.trace(cf, tf.TensorSpec([5, 3]))

  def test_captured_eager_constants_become_consts(self):
    c = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    w = tf.Variable(tf.ones([3, 2]))

    def step(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum((x + c) @ w)
      w.assign_sub(0.1 * tape.gradient(loss, w))
      return loss

    g = tf_tofu.trace(step, tf.TensorSpec([2, 3]))
    self.assertEqual(g.feeds, ("x:0",))
    consts = [g.tensors[op.outputs[0]].value for op in g.ops.values() if op.op_type == "Const"]
    self.assertTrue(any(v.shape == (2, 3) and (v == np.arange(6).reshape(2, 3)).all()
                        for v in consts))
    self.assertEqual(float(g.as_function()(tf.ones([2, 3]))[0]), 42.0)

  def test_nested_functions_are_inlined(self):
    w = tf.Variable(tf.ones([4, 3]))

    @tf.function
    def inner(a, b):
      return tf.nn.relu(a @ b)

    @tf.function
    def outer(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(inner(x, w))
      w.assign_sub(0.1 * tape.gradient(loss, w))
      return loss

    g = tf_tofu.trace(outer, tf.TensorSpec([2, 4]))
    types = {op.op_type for op in g.ops.values()}
    self.assertFalse(types & {"PartitionedCall", "StatefulPartitionedCall"})
    self.assertIn("ReluGrad", types)
    self.assertEqual(g.unattached, ())
    (v,) = g.variables
    self.assertEqual(g.tensors[v.gradient].shape, (4, 3))
    relu_grad = [op for op in g.ops.values() if op.op_type == "ReluGrad"][0]
    self.assertEqual(g.ops[g.forward_op_of[relu_grad.name]].op_type, "Relu")


class ErrorTest(absltest.TestCase):

  def test_while_loop_is_refused(self):
    w = tf.Variable(tf.ones([4, 3]))

    @tf.function
    def loopy(x):
      return tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0), [0, x @ w])[1]

    with self.assertRaisesRegex(IngestError, r"op 'while' \((Stateless)?While\).*unroll the loop"):
      tf_tofu.trace(loopy, tf.TensorSpec([2, 4]))

  def test_cond_is_refused(self):
    @tf.function
    def branchy(x):
      return tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: -x)

    with self.assertRaisesRegex(IngestError, r"op 'cond' \((Stateless)?If\).*tf.where"):
      tf_tofu.trace(branchy, tf.TensorSpec([2, 4]))

  def test_unknown_dims_are_refused_naming_the_tensor(self):
    w = tf.Variable(tf.ones([4, 3]))
    with self.assertRaisesRegex(IngestError, r"tensor 'x:0' .* shape \(\?, 4\).*TensorSpec"):
      tf_tofu.trace(lambda x: tf.reduce_sum(x @ w), tf.TensorSpec([None, 4], name="x"))

  def test_graph_def_file_that_does_not_parse(self):
    path = os.path.join(tempfile.mkdtemp(), "broken.pb")
    with open(path, "wb") as f:
      f.write(b"\x08\x96\x01 this is not a graph def \xff\xfe")
    with self.assertRaisesRegex(IngestError, "broken.pb' is not a GraphDef"):
      TofuGraph.from_graph_def(path, ["x:0"], ["y:0"])
    with self.assertRaisesRegex(IngestError, "cannot read GraphDef file"):
      TofuGraph.from_graph_def(path + ".missing", ["x:0"], ["y:0"])

  def test_fetches_and_feeds_that_do_not_exist(self):
    _, g = _mlp()
    with self.assertRaisesRegex(IngestError, "fetch 'Identiti:0' is not in the GraphDef; did you "
                                "mean 'Identity'"):
      TofuGraph.from_graph_def(g.graph_def, g.feeds, ["Identiti:0"])
    with self.assertRaisesRegex(IngestError, "feed 'z:0' is not in the GraphDef"):
      TofuGraph.from_graph_def(g.graph_def, ["z:0"], g.fetches)
    with self.assertRaisesRegex(IngestError, "control output 'nope' is not in the GraphDef"):
      TofuGraph.from_graph_def(g.graph_def, g.feeds, g.fetches, control_outputs=["nope"])

  def test_variable_without_shape_in_graph_def(self):
    _, g = _mlp()
    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(g.graph_def)
    for node in gd.node:
      for key in ("_handle_shapes", "_handle_dtypes"):
        if key in node.attr:
          del node.attr[key]
    with self.assertRaisesRegex(IngestError, "has no known shape; pass variable_shapes="):
      TofuGraph.from_graph_def(gd, g.feeds, g.fetches)


class GraphDefTest(absltest.TestCase):

  def test_round_trip_through_graph_def_bytes_and_files(self):
    _, g = _mlp("adam")
    tmp = tempfile.mkdtemp()
    binary, text = os.path.join(tmp, "g.pb"), os.path.join(tmp, "g.pbtxt")
    with open(binary, "wb") as f:
      f.write(g.graph_def.SerializeToString())
    with open(text, "w") as f:
      f.write(text_format.MessageToString(g.graph_def))
    for source in (g.graph_def.SerializeToString(), binary, text):
      h = TofuGraph.from_graph_def(source, g.feeds, g.fetches, g.control_outputs)
      self.assertEqual(list(h.ops), list(g.ops))
      self.assertEqual(h.forward_op_of, g.forward_op_of)
      self.assertEqual(h.gradient_of, g.gradient_of)
      self.assertEqual(sorted((v.handle, v.shape, v.gradient) for v in h.variables),
                       sorted((v.handle, v.shape, v.gradient) for v in g.variables))
      self.assertEqual(h.live_handles, {})

  def test_feed_shapes_fix_unknown_dims(self):
    graph = tf.Graph()
    with graph.as_default():
      x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
      tf.reduce_sum(tf.nn.relu(x), name="out")
    with self.assertRaisesRegex(IngestError, r"tensor 'x:0' .*\(\?, 3\).*feeds=\{name: shape\}"):
      TofuGraph.from_graph_def(graph.as_graph_def(), ["x"], ["out"])
    g = TofuGraph.from_graph_def(graph.as_graph_def(), {"x": [7, 3]}, ["out"])
    self.assertEqual(g.tensors["x:0"].shape, (7, 3))
    self.assertEqual(g.tensors["out:0"].shape, ())

  def test_tf1_graph_with_var_handles_and_tf_gradients(self):
    graph = tf.Graph()
    with graph.as_default():
      x = tf.compat.v1.placeholder(tf.float32, [4, 3], name="x")
      y = tf.compat.v1.placeholder(tf.int32, [4], name="y")
      w = tf.compat.v1.get_variable("w", [3, 5], use_resource=True)
      b = tf.compat.v1.get_variable("b", [5], use_resource=True,
                                    initializer=tf.zeros_initializer())
      logits = tf.matmul(tf.nn.relu(x), w) + b
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                           logits=logits),
                            name="loss")
      tf.compat.v1.train.AdamOptimizer(0.1).minimize(loss, name="train")
    g = TofuGraph.from_graph_def(graph.as_graph_def(), ["x", "y"], ["loss"],
                                 control_outputs=["train"])
    by_name = {v.name: v for v in g.variables}
    self.assertEqual(by_name["w"].shape, (3, 5))
    self.assertTrue(by_name["w"].trainable and by_name["b"].trainable)
    self.assertFalse(by_name["w/Adam"].trainable)
    self.assertEqual(g.tensors[by_name["w"].gradient].shape, (3, 5))
    self.assertEqual(g.ops[by_name["b"].updates[0]].op_type, "ResourceApplyAdam")
    self.assertEqual(g.unattached, ())
    self.assertEqual(g.forward_op_of["gradients/MatMul_grad/MatMul_1"], "MatMul")
    # Without control outputs, the updates computed from the feeds (not the initializers).
    h = TofuGraph.from_graph_def(graph.as_graph_def(), ["x", "y"], ["loss"])
    self.assertCountEqual(h.control_outputs, ["train/update_w/ResourceApplyAdam",
                                              "train/update_b/ResourceApplyAdam"])


class SavedModelTest(absltest.TestCase):

  def test_saved_model_train_signature(self):
    class Trainer(tf.Module):

      def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.random.stateless_normal([6, 4], seed=[1, 2]), name="w")

      @tf.function(input_signature=[tf.TensorSpec([8, 6], tf.float32)])
      def train(self, x):
        with tf.GradientTape() as tape:
          loss = tf.reduce_mean(tf.square(tf.tanh(x @ self.w)))
        self.w.assign_sub(0.1 * tape.gradient(loss, self.w))
        return {"loss": loss}

    path = os.path.join(tempfile.mkdtemp(), "trainer")
    module = Trainer()
    tf.saved_model.save(module, path, signatures={"train": module.train})
    g = TofuGraph.from_saved_model(path, signature="train")
    (v,) = g.variables
    self.assertEqual(v.shape, (6, 4))
    self.assertTrue(v.trainable)
    self.assertEqual(g.tensors[v.gradient].shape, (6, 4))
    self.assertEqual(g.unattached, ())
    self.assertEqual(g.tensors[g.feeds[0]].shape, (8, 6))
    types = collections.Counter(op.op_type for op in g.ops.values())
    self.assertEqual(types["TanhGrad"], 1)
    self.assertFalse({"PartitionedCall", "StatefulPartitionedCall"} & set(types))
    with self.assertRaisesRegex(IngestError, "has no signature 'serve'; it has \\['train'\\]"):
      TofuGraph.from_saved_model(path, signature="serve")
    with self.assertRaisesRegex(IngestError, "cannot load the SavedModel"):
      TofuGraph.from_saved_model(path + "_missing")


if __name__ == "__main__":
  absltest.main()
