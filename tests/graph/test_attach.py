"""Tests for tf_tofu.graph.attach: each gradient op attached to the forward op it differentiates.

The reference is the tape itself: while tracing, every call of a gradient
function is recorded with the ops it creates (``gradient_oracle``), so the
structural attachment is checked against what TF actually did.
"""

import collections
import contextlib
import functools

import tensorflow as tf
from absl.testing import absltest, parameterized
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import backprop
from tensorflow.python.framework import ops as tf_ops

import tf_tofu
from tf_tofu import models
from tf_tofu.graph import attach as grad_attach


@contextlib.contextmanager
def gradient_oracle():
  """Maps the name of every op a gradient function creates to its forward op's name."""
  truth = {}
  original = backprop._gradient_function

  def recording(op_name, attr_tuple, num_inputs, inputs, outputs, out_grads, skip, scope):
    graph = tf_ops.get_default_graph()
    before = set(graph._nodes_by_id)
    result = original(op_name, attr_tuple, num_inputs, inputs, outputs, out_grads, skip, scope)
    outs = [t for t in (outputs or ()) if t is not None]
    if outs:
      forward = outs[0].op.name
    else:  # the gradient does not need the outputs: find the op from its inputs
      ins = [t for t in (inputs or ()) if t is not None]
      cands = [c for c in (ins[0].consumers() if ins else ()) if c.type == op_name
               and [id(x) for x in c.inputs] == [id(x) for x in inputs]]
      if len(cands) != 1:
        return result
      forward = cands[0].name
    for i, op in graph._nodes_by_id.items():
      if i not in before:
        truth[op.name] = forward
    return result

  pywrap_tfe.TFE_Py_RegisterGradientFunction(recording)
  try:
    yield truth
  finally:
    pywrap_tfe.TFE_Py_RegisterGradientFunction(original)


@functools.lru_cache(maxsize=None)
def _with_truth(key, flavor):
  step = models.tiny(key, flavor=flavor, optimizer="sgd")
  with gradient_oracle() as truth:
    cf = step.fn.get_concrete_function(*step.input_signature)
  return tf_tofu.trace(cf), dict(truth)


def _agreement(g, truth):
  """(right, checked): backward ops whose recorded forward op survived flattening."""
  right = checked = 0
  for op in g.ops.values():
    if op.role != "backward" or op.name not in truth or truth[op.name] not in g.ops:
      continue
    checked += 1
    right += g.forward_op_of.get(op.name) == truth[op.name]
  return right, checked


class HintTest(absltest.TestCase):

  def test_hint_scopes(self):
    self.assertEqual(grad_attach.hint_scope("gradient_tape/dense_1/MatMul/MatMul_1"),
                     "dense_1/MatMul")
    self.assertEqual(grad_attach.hint_scope("gradients/add_grad/Reshape"), "add_grad")
    self.assertEqual(grad_attach.hint_scope("a/gradients/b/MatMul_grad/MatMul"),
                     "b/MatMul_grad")
    self.assertIsNone(grad_attach.hint_scope("dense/MatMul"))
    self.assertTrue(grad_attach.hint_matches("gradients/add_grad/Sum", "add"))
    self.assertFalse(grad_attach.hint_matches("gradients/add_grad/Sum", "add_1"))
    self.assertTrue(grad_attach.hint_matches("gradient_tape/dense/ReluGrad", "dense/Relu"))


class KnownAnswerTest(absltest.TestCase):

  def test_mlp(self):
    g, _ = _with_truth("mlp", "tf")
    pairs = collections.Counter((g.ops[b].op_type, g.ops[f].op_type)
                                for b, f in g.forward_op_of.items())
    self.assertEqual(pairs, {("MatMul", "MatMul"): 5, ("BiasAddGrad", "BiasAdd"): 3,
                             ("ReluGrad", "Relu"): 2,
                             ("Mul", "SparseSoftmaxCrossEntropyWithLogits"): 1})
    for b, f in g.forward_op_of.items():
      op = g.ops[b]
      if op.op_type == "ReluGrad":  # ReluGrad(dy, y): the Relu that made y
        self.assertEqual(g.op_of(op.inputs[1]).name, f)
      if op.op_type == "MatMul":  # reads the forward MatMul's other operand
        self.assertTrue(set(op.inputs) & set(g.ops[f].inputs), b)
    # Adjoints: of each hidden activation, the MatMul of the next layer's gradient.
    for l in range(2):
      relu = f"dense_{l}/Relu:0"
      grad = g.op_of(g.gradient_of[relu])
      self.assertEqual(grad.op_type, "MatMul")
      self.assertEqual(g.forward_op_of[grad.name], f"dense_{l + 1}/MatMul")
    logits = "dense_2/BiasAdd:0"
    self.assertEqual(g.forward_op_of[g.op_of(g.gradient_of[logits]).name],
                     "SparseSoftmaxCrossEntropyWithLogits/SparseSoftmaxCrossEntropyWithLogits")

  def test_side_computation_joins_the_op_reading_it(self):
    w = tf.Variable(tf.ones([3, 4]))

    @tf.function
    def step(x):
      with tf.GradientTape() as tape:
        h = x @ w
        loss = tf.reduce_sum(tf.square(h) * tf.sigmoid(h))
      w.assign_sub(0.1 * tape.gradient(loss, w))
      return loss

    with gradient_oracle() as truth:
      cf = step.get_concrete_function(tf.TensorSpec([2, 3]))
    g = tf_tofu.trace(cf)
    self.assertEqual(g.unattached, ())
    right, checked = _agreement(g, truth)
    self.assertEqual(right, checked)
    square = [op for op in g.ops.values() if op.op_type == "Square"][0].name
    self.assertIn(square, g.forward_op_of.values())


class OracleTest(parameterized.TestCase):
  """Agreement with the tape's own record, per zoo model (tiny, SGD)."""

  @parameterized.parameters(("mlp", "tf"), ("mlp", "keras"), ("wresnet", "tf"),
                            ("wresnet", "keras"), ("lstm", "tf"), ("lstm", "keras"))
  def test_exact(self, key, flavor):
    g, truth = _with_truth(key, flavor)
    right, checked = _agreement(g, truth)
    self.assertGreater(checked, 0.6 * len(g.forward_op_of))
    wrong = [(b, g.forward_op_of.get(b), truth[b]) for b in g.forward_op_of
             if b in truth and truth[b] in g.ops and g.forward_op_of[b] != truth[b]]
    self.assertEqual(wrong, [])
    self.assertEqual(g.unattached, ())

  # Transformers: layer norm and GELU written as primitives, and Grappler merging
  # constants across the gradients of neighbouring ops, leave a few ops between
  # two equally plausible forward ops (reported in the module docstring).
  @parameterized.parameters(("gpt", "tf", 0.85), ("gpt", "keras", 0.75))
  def test_mostly(self, key, flavor, at_least):
    g, truth = _with_truth(key, flavor)
    right, checked = _agreement(g, truth)
    self.assertGreater(checked, 0.6 * len(g.forward_op_of))
    self.assertGreaterEqual(right / checked, at_least, f"{right}/{checked}")
    self.assertEqual(g.unattached, ())


if __name__ == "__main__":
  absltest.main()
