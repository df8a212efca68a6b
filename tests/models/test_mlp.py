"""Tests for tf_tofu.models.mlp: shapes, the documented forward, float64, huge sizes, refusals."""

import resource

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tf_tofu.models import mlp

TINY = dict(depth=2, width=8, batch=4, in_dim=6, classes=5)
FLAVORS = (("tf", "tf"), ("keras", "keras"))


def _shapes(step):
  return [tuple(v.shape.as_list()) for v in step.variables]


def _params(in_dim, width, depth, classes):
  """in_dim*W + W, then (depth - 1) * (W*W + W), then W*classes + classes."""
  return in_dim * width + width + (depth - 1) * (width * width + width) + width * classes + classes


class MlpBuildTest(parameterized.TestCase):

  def test_tf_variables_in_build_order(self):
    step = mlp.build(**TINY)
    self.assertEqual([v.name for v in step.variables],
                     ["dense_0/kernel:0", "dense_0/bias:0", "dense_1/kernel:0", "dense_1/bias:0",
                      "dense_2/kernel:0", "dense_2/bias:0"])
    self.assertEqual(_shapes(step), [(6, 8), (8,), (8, 8), (8,), (8, 5), (5,)])
    self.assertTrue(all(v.trainable for v in step.variables))
    np.testing.assert_array_equal(step.variables[1].numpy(), np.zeros(8))

  def test_keras_variables_in_build_order(self):
    step = mlp.build(**TINY, flavor="keras")
    self.assertEqual(_shapes(step), [(6, 8), (8,), (8, 8), (8,), (8, 5), (5,)])
    self.assertTrue(all(isinstance(v, tf.Variable) for v in step.variables))

  @parameterized.named_parameters(*FLAVORS)
  def test_parameter_count(self, flavor):
    step = mlp.build(depth=3, width=5, batch=2, in_dim=7, classes=2, flavor=flavor)
    self.assertEqual(_params(7, 5, 3, 2), 112)  # 7*5+5 + 2*(5*5+5) + 5*2+2
    self.assertEqual(sum(int(np.prod(s)) for s in _shapes(step)), 112)
    self.assertLen(step.variables, 2 * (3 + 1))

  def test_in_dim_defaults_to_width(self):
    step = mlp.build(depth=1, width=3, batch=2, classes=4)
    self.assertEqual(step.config, dict(depth=1, width=3, batch=2, in_dim=3, classes=4))
    self.assertEqual(step.input_signature[0].shape.as_list(), [2, 3])
    self.assertEqual(_shapes(step), [(3, 3), (3,), (3, 4), (4,)])

  def test_signature_ranges_and_name(self):
    step = mlp.build(**TINY, optimizer="adam")
    x, y = step.input_signature
    self.assertEqual((x.shape.as_list(), x.dtype, x.name), ([4, 6], tf.float32, "x"))
    self.assertEqual((y.shape.as_list(), y.dtype, y.name), ([4], tf.int32, "y"))
    self.assertEqual(step.input_ranges, ((-1.0, 1.0), (0, 5)))
    self.assertEqual(step.name, "mlp(depth=2,width=8,batch=4,in_dim=6,classes=5)/tf/adam")
    self.assertLen(step.optimizer_variables, 2 + 2 * 6)

  @parameterized.named_parameters(*FLAVORS)
  def test_loss_is_the_documented_forward(self, flavor):
    step = mlp.build(**TINY, flavor=flavor, dtype="float64")
    ws = [v.numpy() for v in step.variables]
    x, y = step.example_inputs(seed=5)
    h = x.astype(np.float64)
    for l in range(3):
      h = h @ ws[2 * l] + ws[2 * l + 1]
      if l < 2:
        h = np.maximum(h, 0.0)
    logp = h - np.log(np.exp(h).sum(axis=1, keepdims=True))
    want = -logp[np.arange(4), y].mean()
    loss = step.fn(x, y)
    self.assertEqual(loss.dtype, tf.float64)
    self.assertAlmostEqual(float(loss), want, places=12)

  @parameterized.named_parameters(*FLAVORS)
  def test_float64_builds_float64(self, flavor):
    step = mlp.build(**TINY, flavor=flavor, optimizer="adam", dtype="float64")
    self.assertTrue(step.name.endswith(f"/{flavor}/adam/float64"))
    self.assertEqual({v.dtype for v in step.variables}, {tf.float64})
    slots = [v for v in step.optimizer_variables if v.shape.rank]
    self.assertLen(slots, 2 * 6)
    self.assertEqual({v.dtype for v in slots}, {tf.float64})
    self.assertEqual([s.dtype for s in step.input_signature], [tf.float64, tf.int32])
    self.assertEqual(step.weight_bytes(), 173 * 8)

  def test_float64_starts_from_the_float32_weights(self):
    w32 = mlp.build(**TINY).variables
    w64 = mlp.build(**TINY, dtype="float64").variables
    for a, b in zip(w32, w64):
      np.testing.assert_array_equal(b.numpy(), a.numpy().astype(np.float64))

  @parameterized.named_parameters(*FLAVORS)
  def test_huge_unmaterialized_build_allocates_nothing(self, flavor):
    w = 2**16
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    step = mlp.build(depth=2, width=w, batch=8, in_dim=w, classes=1000, flavor=flavor,
                     materialize=False)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    self.assertEqual(step.weight_bytes(), 4 * _params(w, w, 2, 1000))
    self.assertEqual(step.weight_bytes(), 4 * (2 * (2**32 + 2**16) + 2**16 * 1000 + 1000))
    self.assertLess(grown, 2**29)  # 32 GiB of weights if they were real
    self.assertTrue(tf.executing_eagerly())
    self.assertTrue(all(v.handle.graph is step.graph for v in step.variables))
    self.assertEqual(_shapes(step)[2], (w, w))

  def test_bad_arguments_are_refused(self):
    with self.assertRaisesRegex(ValueError, "unknown flavor 'jax'; choose one of tf, keras"):
      mlp.build(**TINY, flavor="jax")
    with self.assertRaisesRegex(ValueError, "unknown dtype 'float16'"):
      mlp.build(**TINY, dtype="float16")
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'lamb'"):
      mlp.build(**TINY, optimizer="lamb")


if __name__ == "__main__":
  absltest.main()
