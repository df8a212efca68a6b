"""Tests for tf_tofu.graph.links: regions, roles, and each variable's gradient by dominators."""

import functools

import tensorflow as tf
from absl.testing import absltest, parameterized
from tensorflow.core.framework import graph_pb2

import tf_tofu
from tf_tofu import models
from tf_tofu.graph import links as grad_links
from tf_tofu.graph import TofuGraph


@functools.lru_cache(maxsize=None)
def _traced(key, flavor="tf", optimizer="sgd"):
  step = models.tiny(key, flavor=flavor, optimizer=optimizer)
  return step, tf_tofu.trace(step.fn, *step.input_signature)


def _trainable(g):
  return {v.name: v for v in g.variables if v.trainable}


def scramble(gd):
  """The same graph with every node renamed n0, n1, ... (no scope hints left)."""
  names = {n.name: f"n{i}" for i, n in enumerate(gd.node)}
  out = graph_pb2.GraphDef()
  out.CopyFrom(gd)
  for n in out.node:
    n.name = names[n.name]
    for k, inp in enumerate(n.input):
      ctrl = inp.startswith("^")
      node, _, idx = (inp[1:] if ctrl else inp).partition(":")
      n.input[k] = ("^" if ctrl else "") + names[node] + (":" + idx if idx else "")
  return out, names


class VariableGradientTest(absltest.TestCase):

  def test_mlp_gradients_stop_before_the_learning_rate(self):
    _, g = _traced("mlp")
    for name, v in _trainable(g).items():
      grad = g.op_of(v.gradient)
      self.assertEqual(grad.op_type, "BiasAddGrad" if name.endswith("bias") else "MatMul", name)
      (update,) = v.updates
      self.assertEqual(g.ops[update].op_type, "AssignSubVariableOp")
      scaled = g.op_of(g.ops[update].inputs[1])
      self.assertEqual(scaled.op_type, "Mul")  # lr * g: the optimizer's, not the gradient
      self.assertEqual(scaled.role, "update")
      self.assertIn(v.gradient, scaled.inputs)

  def test_keras_gradients_are_the_tape_outputs_not_identity_n(self):
    _, g = _traced("mlp", "keras", "adam")
    for v in _trainable(g).values():
      self.assertNotEqual(g.op_of(v.gradient).op_type, "IdentityN")
      self.assertEqual(g.op_of(v.gradient).role, "backward")
      self.assertTrue(v.gradient.startswith("gradient_tape/"), v.gradient)
    identity_n = [op for op in g.ops.values() if op.op_type == "IdentityN"]
    self.assertTrue(identity_n)
    self.assertTrue(all(op.role == "update" for op in identity_n))

  def test_fused_adam_reads_the_gradient(self):
    _, g = _traced("mlp", "tf", "adam")
    for v in _trainable(g).values():
      (update,) = v.updates
      op = g.ops[update]
      self.assertEqual(op.op_type, "ResourceApplyAdam")
      self.assertEqual(op.inputs[9], v.gradient)  # the 'grad' input

  def test_weight_used_every_step_accumulates(self):
    step, g = _traced("lstm")
    for l in range(step.config["layers"]):
      v = _trainable(g)[f"lstm_{l}/kernel"]
      add_n = g.op_of(v.gradient)
      self.assertEqual(add_n.op_type, "AddN")
      self.assertLen(add_n.inputs, step.config["steps"])
      self.assertEqual(v.accumulation, (add_n.name,))
      for t in add_n.inputs:
        self.assertEqual(g.op_of(t).op_type, "MatMul")

  def test_sparse_gradient_has_its_indices(self):
    step, g = _traced("lstm")
    emb = _trainable(g)["embedding"]
    self.assertEqual(g.tensors[emb.gradient].shape,
                     (step.config["batch"] * step.config["steps"], step.config["hidden"]))
    self.assertIsNotNone(emb.gradient_indices)
    self.assertEqual(g.tensors[emb.gradient_indices].dtype, "int32")
    self.assertEqual(g.op_of(emb.gradient_indices).role, "backward")
    (update,) = emb.updates
    self.assertEqual(g.ops[update].op_type, "ResourceScatterSub")

  def test_tied_embedding_sums_its_two_uses(self):
    _, g = _traced("gpt")
    tok = _trainable(g)["tok_embedding"]
    self.assertEqual(g.tensors[tok.gradient].shape, tok.shape)
    self.assertIsNone(tok.gradient_indices)
    add_n = g.op_of(tok.gradient)
    self.assertEqual(add_n.op_type, "AddN")
    self.assertIn(add_n.name, tok.accumulation)
    kinds = {g.op_of(t).op_type for t in add_n.inputs}
    self.assertIn("UnsortedSegmentSum", kinds)  # the gather's IndexedSlices, densified

  def test_slots_and_moving_averages_have_no_gradient(self):
    _, g = _traced("wresnet")
    for v in g.variables:
      if "moving" in v.name:
        self.assertFalse(v.trainable)
        self.assertIsNone(v.gradient)
        (update,) = v.updates
        self.assertEqual(g.ops[update].op_type, "AssignVariableOp")
        self.assertEqual(g.ops[update].role, "update")
        self.assertTrue(v.reads)


class RolesTest(parameterized.TestCase):

  @parameterized.parameters(("mlp", "tf"), ("gpt", "keras"), ("wresnet", "keras"))
  def test_roles_partition_the_step(self, key, flavor):
    _, g = _traced(key, flavor, "adam")
    forward = {op.name for op in g.ops.values() if op.role == "forward"}
    for op in g.ops.values():
      self.assertIn(op.role, grad_links.ROLES)
      if op.role == "forward":
        # the forward computation never reads a gradient or the optimizer
        for t in op.inputs:
          self.assertIn(g.op_of(t).role, ("forward", "const", "input", "variable"), op.name)
      if op.role == "backward":
        self.assertNotIn(op.name, forward)
        self.assertFalse(any(g.tensors[t].dtype == "resource" for t in op.inputs), op.name)
    loss_op = g.op_of(g.fetches[0])
    self.assertEqual(loss_op.role, "forward")

  def test_without_a_loss_fetch_the_gradient_scopes_give_the_forward(self):
    w = tf.Variable(tf.ones([3, 2]))

    @tf.function
    def step(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.relu(x @ w))
      w.assign_sub(0.5 * tape.gradient(loss, w))

    g = tf_tofu.trace(step, tf.TensorSpec([4, 3]))
    self.assertEqual(g.loss, ())
    (v,) = g.variables
    self.assertEqual(g.op_of(v.gradient).op_type, "MatMul")
    self.assertEqual(g.ops[v.reads[0]].role, "forward")
    self.assertEqual(g.unattached, ())


class StructureNotNamesTest(parameterized.TestCase):
  """Renaming every node (no gradient_tape/ scopes left) must not change the links."""

  @parameterized.parameters("mlp", "wresnet", "lstm", "gpt")
  def test_scrambled_names_give_the_same_links(self, key):
    _, g = _traced(key, "tf", "adam")
    gd, names = scramble(g.graph_def)

    def ren(t):
      node, _, idx = t.partition(":")
      return f"{names[node]}:{idx}"

    h = TofuGraph.from_graph_def(gd, [ren(f) for f in g.feeds], [ren(f) for f in g.fetches],
                                 [names[c] for c in g.control_outputs])
    self.assertEqual(h.forward_op_of,
                     {names[b]: names[f] for b, f in g.forward_op_of.items()})
    self.assertEqual(h.gradient_of, {ren(x): ren(d) for x, d in g.gradient_of.items()})
    self.assertEqual({op.name: op.role for op in h.ops.values()},
                     {names[op.name]: op.role for op in g.ops.values()})
    self.assertEqual(
        sorted((v.handle, v.gradient, v.accumulation) for v in h.variables),
        sorted((ren(v.handle), v.gradient and ren(v.gradient),
                tuple(names[a] for a in v.accumulation)) for v in g.variables))


if __name__ == "__main__":
  absltest.main()
