"""Tests for tf_tofu.graph.grouped: depthwise-like grouped convolutions become depthwise ones.

The rewritten graph's values are compared with the grouped kernels themselves:
the forward convolution runs on the CPU, its two gradients only under XLA
(TensorFlow has no CPU kernel for them), so the reference is jit-compiled.
"""

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tests import cpu_devices
from tf_tofu.graph import grouped, ingest
from tf_tofu.models.common import seeded_keras_weights
from tf_tofu.verify import sweep

ATTRS = dict(strides=[1, 2, 2, 1], padding="SAME")


def _graph(x_shape, filter_shape, dy_shape):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float64, x_shape, name="x")
    w = tf.compat.v1.placeholder(tf.float64, filter_shape, name="w")
    dy = tf.compat.v1.placeholder(tf.float64, dy_shape, name="dy")
    tf.raw_ops.Conv2D(input=x, filter=w, name="conv", **ATTRS)
    tf.raw_ops.Conv2DBackpropInput(input_sizes=x_shape, filter=w, out_backprop=dy,
                                   name="grad_input", **ATTRS)
    tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=filter_shape, out_backprop=dy,
                                    name="grad_filter", **ATTRS)
  return graph.as_graph_def()


def _run(graph_def, feeds):
  graph = tf.Graph()
  with graph.as_default():
    tf.graph_util.import_graph_def(graph_def, name="")
  with tf.compat.v1.Session(graph=graph) as sess:
    return sess.run(["conv:0", "grad_input:0", "grad_filter:0"],
                    {f"{k}:0": v for k, v in feeds.items()})


@tf.function(jit_compile=True)
def _reference(x, w, dy):
  return (tf.raw_ops.Conv2D(input=x, filter=w, **ATTRS),
          tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=w, out_backprop=dy,
                                         **ATTRS),
          tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.shape(w), out_backprop=dy,
                                          **ATTRS))


class AsDepthwiseTest(parameterized.TestCase):

  @parameterized.parameters(1, 2)  # filters per input channel
  def test_values_equal_the_grouped_kernels(self, m):
    x_shape, filter_shape, dy_shape = [2, 9, 9, 3], [3, 3, 1, 3 * m], [2, 5, 5, 3 * m]
    gd = _graph(x_shape, filter_shape, dy_shape)
    shapes, _ = ingest.infer_shapes(gd, {})
    rewritten, count = grouped.as_depthwise(gd, shapes)
    self.assertEqual(count, 3)
    ops = {n.name: n.op for n in rewritten.node}
    self.assertEqual((ops["conv"], ops["grad_input"], ops["grad_filter"]),
                     ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "Reshape"))
    rng = np.random.default_rng(m)
    feeds = {"x": rng.normal(size=x_shape), "w": rng.normal(size=filter_shape),
             "dy": rng.normal(size=dy_shape)}
    got = _run(rewritten, feeds)
    want = _reference(*(tf.constant(feeds[k]) for k in ("x", "w", "dy")))
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w.numpy(), rtol=1e-12, atol=1e-12)

  def test_other_convolutions_are_left_alone(self):
    # Two channels per group, and an ordinary convolution: not depthwise.
    for filter_shape in ([3, 3, 2, 4], [3, 3, 4, 4]):
      gd = _graph([2, 9, 9, 4], filter_shape, [2, 5, 5, 4])
      shapes, _ = ingest.infer_shapes(gd, {})
      rewritten, count = grouped.as_depthwise(gd, shapes)
      self.assertEqual(count, 0)
      self.assertEqual(rewritten, gd)


class KerasGroupedConvTest(absltest.TestCase):

  def test_a_keras_depthwise_grouped_conv_trains_partitioned(self):
    # Keras compiles Conv2D(groups=C) with XLA; ingestion inlines the call and rewrites
    # the convolution and its gradients as depthwise ones.
    import keras
    cpu_devices.require(4)
    layers = keras.layers
    with seeded_keras_weights():  # the same weights in every run
      model = keras.Sequential([keras.Input((8, 8, 4)),
                                layers.Conv2D(8, 3, groups=4, padding="same", dtype="float64"),
                                layers.GlobalAveragePooling2D(dtype="float64"),
                                layers.Dense(5, dtype="float64")])
    opt = keras.optimizers.SGD(0.01)
    opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(autograph=False)
    def step(x, y):
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      grads = tape.gradient(loss, model.trainable_variables)
      opt.apply_gradients(zip(grads, model.trainable_variables))
      return loss

    x = np.random.default_rng(0).normal(size=(4, 8, 8, 4))
    y = np.array([0, 1, 2, 3], np.int32)
    row = sweep.check_step("grouped", step, [(x, y), (2 * x, y)], 4)
    self.assertEqual(row.mismatches, ())
    self.assertEqual(row.counted, row.predicted)
    self.assertEqual(row.whole, {})


if __name__ == "__main__":
  absltest.main()
