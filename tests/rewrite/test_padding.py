"""Tests for tf_tofu.rewrite.padding: depthwise sub-ops pad with Pad, never EXPLICIT.

A Keras step with depthwise convolutions after another layer (so their input
gradient exists), partitioned with spatial and channel cuts, runs with
Grappler on and equals the unpartitioned step: in float64 at the fixed bound,
and in float32 (where Grappler's shape inference of an EXPLICIT-padded
DepthwiseConv2dNative aborted the whole process) at the float32 bound.
"""

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tests import cpu_devices
import tf_tofu  # noqa: E402
from tf_tofu.models.common import seeded_keras_weights  # noqa: E402
from tf_tofu.rewrite import padding  # noqa: E402
from tf_tofu.verify import equivalence  # noqa: E402


def setUpModule():
  cpu_devices.require()


def _keras_depthwise_step(dtype):
  import keras
  with seeded_keras_weights():  # the same weights in every run
    model = keras.Sequential([
        keras.Input((7, 9, 3), batch_size=4, dtype=dtype),
        keras.layers.Conv2D(4, 1, dtype=dtype),
        keras.layers.DepthwiseConv2D(3, padding="same", strides=2, dtype=dtype),
        keras.layers.DepthwiseConv2D((2, 3), padding="valid", depth_multiplier=2, dtype=dtype),
        keras.layers.ReLU(dtype=dtype),
        keras.layers.GlobalAveragePooling2D(dtype=dtype),
        keras.layers.Dense(5, dtype=dtype)])
  opt = keras.optimizers.SGD(0.1)
  opt.build(model.trainable_variables)

  @tf.function(autograph=False)
  def step(x, y):
    with tf.GradientTape() as tape:
      logits = model(x, training=True)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                           logits=logits))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  rng = np.random.default_rng(0)
  inputs = [(rng.normal(size=(4, 7, 9, 3)).astype(dtype),
             rng.integers(0, 5, size=4).astype(np.int32)) for _ in range(2)]
  return step, inputs


class DepthwiseTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cases = {}
    for dtype in ("float64", "float32"):
      step, inputs = _keras_depthwise_step(dtype)
      cls.cases[dtype] = (step, inputs, equivalence.Reference(step, inputs))

  @parameterized.parameters(("tofu", 4, "float64"), ("spartan", 8, "float64"),
                            ("datapar", 8, "float64"), ("allrow", 3, "float64"),
                            ("tofu", 4, "float32"), ("spartan", 8, "float32"))
  def test_partitioned_depthwise_runs_and_matches(self, planner, k, dtype):
    step, inputs, reference = self.cases[dtype]
    f = tf_tofu.function(step, devices=k, planner=planner)
    gd = f.partitioned(*inputs[0]).graph_def
    depthwise = [n for n in gd.node if n.op in padding.DEPTHWISE]
    self.assertNotEmpty(depthwise)
    for n in depthwise:
      self.assertNotEqual(n.attr["padding"].s, b"EXPLICIT", n.name)
    bound = ({} if dtype == "float64" else
             dict(rtol=equivalence.FLOAT32_RTOL, atol=equivalence.FLOAT32_ATOL))
    self.assertEqual([str(m) for m in reference.compare(f, **bound)], [])

  def test_needs_rewrite(self):
    self.assertTrue(padding.needs_rewrite("DepthwiseConv2dNative", {"padding": "EXPLICIT"}))
    self.assertFalse(padding.needs_rewrite("DepthwiseConv2dNative", {"padding": "VALID"}))
    self.assertFalse(padding.needs_rewrite("Conv2D", {"padding": "EXPLICIT"}))


if __name__ == "__main__":
  absltest.main()
