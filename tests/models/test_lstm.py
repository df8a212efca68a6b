"""Tests for tf_tofu.models.lstm: shapes, the documented cell, unrolling, float64, paper sizes."""

import resource

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

import tf_tofu
from tf_tofu import models
from tf_tofu.models import lstm

TINY = dict(layers=2, hidden=4, steps=3, batch=2, vocab=7)
FLAVORS = (("tf", "tf"), ("keras", "keras"))


def _shapes(step):
  return [tuple(v.shape.as_list()) for v in step.variables]


def _params(layers, hidden, vocab):
  """V*H embedding, L * (2H*4H + 4H) cells, H*V + V softmax."""
  return vocab * hidden + layers * (2 * hidden * 4 * hidden + 4 * hidden) + hidden * vocab + vocab


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


class LstmBuildTest(parameterized.TestCase):

  def test_tf_variables_in_build_order(self):
    step = lstm.build(**TINY)
    self.assertEqual([v.name for v in step.variables],
                     ["embedding:0", "lstm_0/kernel:0", "lstm_0/bias:0", "lstm_1/kernel:0",
                      "lstm_1/bias:0", "softmax/kernel:0", "softmax/bias:0"])
    self.assertEqual(_shapes(step), [(7, 4), (8, 16), (16,), (8, 16), (16,), (4, 7), (7,)])

  def test_keras_variables_in_build_order(self):
    step = lstm.build(**TINY, flavor="keras")
    # Embedding, then kernel / recurrent_kernel / bias per LSTM layer, then Dense
    self.assertEqual(_shapes(step), [(7, 4), (4, 16), (4, 16), (16,), (4, 16), (4, 16), (16,),
                                     (4, 7), (7,)])

  @parameterized.named_parameters(*FLAVORS)
  def test_parameter_count(self, flavor):
    step = lstm.build(layers=3, hidden=5, steps=2, batch=1, vocab=6, flavor=flavor)
    self.assertEqual(_params(3, 5, 6), 30 + 3 * (200 + 20) + 30 + 6)
    self.assertEqual(sum(int(np.prod(s)) for s in _shapes(step)), 726)

  def test_signature_ranges_and_name(self):
    step = lstm.build(**TINY)
    ids, targets = step.input_signature
    self.assertEqual((ids.shape.as_list(), ids.dtype, ids.name), ([2, 3], tf.int32, "ids"))
    self.assertEqual((targets.shape.as_list(), targets.dtype, targets.name),
                     ([2, 3], tf.int32, "targets"))
    self.assertEqual(step.input_ranges, ((0, 7), (0, 7)))
    self.assertEqual(step.name, "lstm(layers=2,hidden=4,steps=3,batch=2,vocab=7)/tf/sgd")
    x, y = step.example_inputs(seed=1)
    self.assertTrue((x >= 0).all() and (x < 7).all() and (y >= 0).all() and (y < 7).all())

  @parameterized.named_parameters(*FLAVORS)
  def test_loss_is_the_documented_cell(self, flavor):
    step = lstm.build(**TINY, flavor=flavor, dtype="float64")
    ws = [v.numpy() for v in step.variables]
    emb, (w_out, b_out) = ws[0], ws[-2:]
    if flavor == "tf":
      cells = [(ws[1 + 2 * l], ws[2 + 2 * l]) for l in range(2)]
    else:  # Keras splits the [x, h] kernel into kernel and recurrent_kernel
      cells = [(np.concatenate([ws[1 + 3 * l], ws[2 + 3 * l]]), ws[3 + 3 * l]) for l in range(2)]
    ids, targets = step.example_inputs(seed=4)
    xs = [emb[ids[:, t]] for t in range(3)]
    for w, b in cells:
      h, c, outs = np.zeros((2, 4)), np.zeros((2, 4)), []
      for x in xs:
        i, f, g, o = np.split(np.concatenate([x, h], axis=1) @ w + b, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        outs.append(h)
      xs = outs
    costs = []
    for t, h in enumerate(xs):
      logits = h @ w_out + b_out
      logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
      costs.append(-logp[np.arange(2), targets[:, t]])
    loss = step.fn(ids, targets)
    self.assertEqual(loss.dtype, tf.float64)
    self.assertAlmostEqual(float(loss), np.mean(costs), places=12)

  @parameterized.named_parameters(*FLAVORS)
  def test_unrolled_without_loop_ops(self, flavor):
    step = lstm.build(**TINY, flavor=flavor)
    ops = step.fn.get_concrete_function().graph.get_operations()
    self.assertFalse([op.name for op in ops if "While" in op.type or op.type == "Enter"])
    if flavor == "tf":  # one fused [x, h] matmul per layer and step
      cells = sorted(op.name for op in ops if op.type == "MatMul"
                     and op.name.startswith("lstm_") and op.name.endswith("/MatMul"))
      self.assertEqual(cells, [f"lstm_{l}/t{t}/MatMul" for l in range(2) for t in range(3)])

  def test_lstm_weight_gradient_accumulates_over_steps(self):
    step = models.tiny("lstm", flavor="tf", optimizer="sgd")
    g = tf_tofu.trace(step.fn, *step.input_signature)
    kernel = [v for v in g.variables if v.name == "lstm_0/kernel"][0]
    acc = kernel.accumulation
    self.assertTrue(acc)
    self.assertEqual(g.ops[acc[-1]].op_type, "AddN")
    self.assertLen(g.ops[acc[-1]].inputs, step.config["steps"])

  @parameterized.named_parameters(*FLAVORS)
  def test_float64_builds_float64(self, flavor):
    step = lstm.build(**TINY, flavor=flavor, optimizer="adam", dtype="float64")
    self.assertTrue(step.name.endswith(f"/{flavor}/adam/float64"))
    self.assertEqual({v.dtype for v in step.variables}, {tf.float64})
    slots = [v for v in step.optimizer_variables if v.shape.rank]
    self.assertLen(slots, 2 * len(step.variables))
    self.assertEqual({v.dtype for v in slots}, {tf.float64})
    self.assertEqual([s.dtype for s in step.input_signature], [tf.int32, tf.int32])
    self.assertEqual(step.weight_bytes(), 8 * _params(2, 4, 7))

  def test_paper_lstm_sizes(self):
    step = models.paper("lstm10")
    kernels = [v for v in step.variables if "lstm_" in v.name and "kernel" in v.name]
    self.assertLen(kernels, 10)
    self.assertEqual(tuple(kernels[0].shape.as_list()), (2 * 8192, 4 * 8192))
    self.assertEqual(step.config["steps"], 20)

  @parameterized.named_parameters(*FLAVORS)
  def test_paper_lstm_unmaterialized_allocates_nothing(self, flavor):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    step = models.paper("lstm10", flavor=flavor)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    # 10000*8192 + 10 * (16384*32768 + 32768) + 8192*10000 + 10000 = 5,532,886,800 weights
    self.assertEqual(_params(10, 8192, 10000), 5_532_886_800)
    self.assertEqual(step.weight_bytes(), 4 * 5_532_886_800)
    self.assertLess(grown, 2**29)  # 20.6 GiB if it were real
    self.assertTrue(all(v.handle.graph is step.graph for v in step.variables))
    self.assertLen(step.variables, 1 + (2 if flavor == "tf" else 3) * 10 + 2)

  def test_bad_arguments_are_refused(self):
    with self.assertRaisesRegex(ValueError, "unknown flavor 'torch'; choose one of tf, keras"):
      lstm.build(**TINY, flavor="torch")
    with self.assertRaisesRegex(ValueError, "unknown dtype 'half'"):
      lstm.build(**TINY, dtype="half")
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'adagrad'"):
      lstm.build(**TINY, optimizer="adagrad")


if __name__ == "__main__":
  absltest.main()
