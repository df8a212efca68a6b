"""Tests for tf_tofu.models.wresnet: depths, widths, shapes, shortcuts, batch norm, float64."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tf_tofu import models
from tf_tofu.models import wresnet

TINY = dict(depth=50, blocks=(1, 1, 1, 1), width=1, base=(4, 8, 16, 16, 32), batch=2, image=32,
            classes=5)
FLAVORS = (("tf", "tf"), ("keras", "keras"))


def _shapes(step):
  return {v.name.split(":")[0]: tuple(v.shape.as_list()) for v in step.variables}


def _sizes(step):
  return sum(int(np.prod(v.shape)) for v in step.variables)


class WresnetBuildTest(parameterized.TestCase):

  @parameterized.parameters((50, (3, 4, 6, 3)), (101, (3, 4, 23, 3)), (152, (3, 8, 36, 3)))
  def test_wresnet_depths(self, depth, blocks):
    self.assertEqual(wresnet.block_counts(depth), blocks)
    # Bottleneck ResNet depth = 3 convs per block + stem conv + head.
    self.assertEqual(3 * sum(blocks) + 2, depth)

  def test_wresnet_filters_scale_with_width(self):
    step = models.build("wresnet", depth=50, blocks=(1, 1, 1, 1), width=3, base=(4, 8, 16, 16, 32),
                        image=32, classes=5, batch=2)
    kernels = {v.name.split(":")[0]: tuple(v.shape.as_list()) for v in step.variables
               if "kernel" in v.name}
    self.assertEqual(kernels["stem/kernel"], (7, 7, 3, 12))
    self.assertEqual(kernels["stage4/block1/c/kernel"], (1, 1, 24, 96))

  def test_unmaterialized_build_allocates_no_weights(self):
    step = models.paper("wresnet152")
    self.assertIsNotNone(step.graph)
    self.assertGreater(step.weight_bytes(), 10 * 2**30)  # tens of GiB if it were real
    with step.context():
      self.assertFalse(tf.executing_eagerly())
      self.assertEqual(step.variables[0].handle.graph, step.graph)
    kernel = [v for v in step.variables if v.name.startswith("stage4/block3/c/kernel")][0]
    self.assertEqual(tuple(kernel.shape.as_list()), (1, 1, 5120, 20480))

  def test_tiny_tf_shapes(self):
    shapes = _shapes(wresnet.build(**TINY))
    # stem 7x7/2 to base[0]; stage 1 (4 -> 8, inner 2) needs a projection shortcut
    self.assertEqual(shapes["stem/kernel"], (7, 7, 3, 4))
    self.assertEqual(shapes["stem/bn/gamma"], (4,))
    self.assertEqual(shapes["stage1/block1/a/kernel"], (1, 1, 4, 2))
    self.assertEqual(shapes["stage1/block1/b/kernel"], (3, 3, 2, 2))
    self.assertEqual(shapes["stage1/block1/c/kernel"], (1, 1, 2, 8))
    self.assertEqual(shapes["stage1/block1/shortcut/kernel"], (1, 1, 4, 8))
    self.assertEqual(shapes["stage3/block1/shortcut/kernel"], (1, 1, 16, 16))  # stride 2
    self.assertEqual(shapes["stage4/block1/c/bn/beta"], (32,))
    self.assertEqual(shapes["head/kernel"], (32, 5))
    self.assertEqual(shapes["head/bias"], (5,))
    self.assertNotIn("stem/bn/moving_mean", shapes)  # not trainable

  @parameterized.named_parameters(*FLAVORS)
  def test_tiny_parameter_count(self, flavor):
    step = wresnet.build(**TINY, flavor=flavor)
    # per conv: k*k*cin*cout kernel + gamma + beta (no conv bias); every tiny block projects
    stem = 7 * 7 * 3 * 4 + 2 * 4                                          # 596
    stage1 = (4 * 2 + 4) + (9 * 2 * 2 + 4) + (2 * 8 + 16) + (4 * 8 + 16)   # 132
    stage2 = (8 * 4 + 8) + (9 * 4 * 4 + 8) + (4 * 16 + 32) + (8 * 16 + 32)  # 448
    stage3 = (16 * 4 + 8) + (9 * 4 * 4 + 8) + (4 * 16 + 32) + (16 * 16 + 32)  # 608
    stage4 = (16 * 8 + 16) + (9 * 8 * 8 + 16) + (8 * 32 + 64) + (16 * 32 + 64)  # 1632
    head = 32 * 5 + 5
    self.assertEqual(stem + stage1 + stage2 + stage3 + stage4 + head, 3581)
    self.assertEqual(_sizes(step), 3581)
    self.assertLen(step.variables, 3 + 4 * 4 * 3 + 2)

  def test_shortcut_only_where_the_shape_changes(self):
    # stage 1 keeps 8 channels at stride 1: no projection; stages 2-4 stride 2: projections
    step = wresnet.build(depth=50, blocks=(2, 1, 1, 1), base=(8, 8, 16, 16, 32), batch=1,
                         image=16, classes=3)
    shortcuts = sorted(n.split("/shortcut")[0] for n in _shapes(step) if "shortcut/kernel" in n)
    self.assertEqual(shortcuts, ["stage2/block1", "stage3/block1", "stage4/block1"])
    self.assertLen(step.variables, 3 + 5 * 3 * 3 + 3 * 3 + 2)

  def test_signature_ranges_and_config(self):
    step = wresnet.build(**TINY, channels=1)
    images, labels = step.input_signature
    self.assertEqual((images.shape.as_list(), images.dtype), ([2, 32, 32, 1], tf.float32))
    self.assertEqual((labels.shape.as_list(), labels.dtype), ([2], tf.int32))
    self.assertEqual(step.input_ranges, ((0.0, 1.0), (0, 5)))
    self.assertEqual(step.config["blocks"], (1, 1, 1, 1))
    self.assertEqual(step.config["base"], (4, 8, 16, 16, 32))
    self.assertEqual(_shapes(step)["stem/kernel"], (7, 7, 1, 4))

  def test_paper_wresnet50_sizes(self):
    step = models.paper("wresnet50")
    shapes = _shapes(step)
    # stem + 16 blocks of 3 conv-bn + 4 projection shortcuts + dense head
    self.assertLen(step.variables, 3 + 16 * 3 * 3 + 4 * 3 + 2)
    self.assertEqual(shapes["stem/kernel"], (7, 7, 3, 640))
    self.assertEqual(shapes["stage1/block1/a/kernel"], (1, 1, 640, 640))
    self.assertEqual(shapes["stage2/block4/b/kernel"], (3, 3, 1280, 1280))
    self.assertEqual(shapes["head/kernel"], (20480, 1000))
    self.assertTrue(all(v.handle.graph is step.graph for v in step.variables))

  @parameterized.named_parameters(*FLAVORS)
  def test_float64_builds_float64(self, flavor):
    step = wresnet.build(**TINY, flavor=flavor, optimizer="adam", dtype="float64")
    self.assertTrue(step.name.endswith(f"/{flavor}/adam/float64"))
    self.assertEqual({v.dtype for v in step.variables}, {tf.float64})
    slots = [v for v in step.optimizer_variables if v.shape.rank]
    self.assertLen(slots, 2 * len(step.variables))
    self.assertEqual({v.dtype for v in slots}, {tf.float64})
    self.assertEqual(step.input_signature[0].dtype, tf.float64)
    self.assertEqual(step.weight_bytes(), 8 * 3581)

  @parameterized.named_parameters(("float32", "float32", True), ("float64", "float64", False))
  def test_fused_batch_norm_only_in_float32(self, dtype, fused):
    step = wresnet.build(**TINY, dtype=dtype)
    types = [op.type for op in step.fn.get_concrete_function().graph.get_operations()]
    # stem + 4 blocks of (a, b, c, shortcut): 17 batch norms
    self.assertEqual(types.count("FusedBatchNormV3"), 17 if fused else 0)

  @parameterized.named_parameters(("float32", "float32"), ("float64", "float64"))
  def test_batch_norm_moving_mean_follows_the_batch(self, dtype):
    step = wresnet.build(**TINY, dtype=dtype)
    state = {v.name.split(":")[0]: v for v in step.fn.get_concrete_function().variables}
    self.assertLen(state, 53 + 2 * 17)  # trainables + moving mean and variance per batch norm
    kernel = state["stem/kernel"].numpy().astype(np.float64)
    images, labels = step.example_inputs(seed=6)
    conv = tf.nn.conv2d(images.astype(np.float64), kernel, [1, 2, 2, 1], "SAME").numpy()
    step.fn(images, labels)
    # moving_mean <- 0.99 * 0 + 0.01 * batch mean of the stem convolution
    np.testing.assert_allclose(state["stem/bn/moving_mean"].numpy(),
                               0.01 * conv.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-9)

  def test_bad_sizes_are_refused(self):
    with self.assertRaisesRegex(ValueError, "depth must be one of"):
      models.build("wresnet", depth=34)
    with self.assertRaisesRegex(ValueError,
                                r"depth must be one of \[50, 101, 152\], got 18"):
      wresnet.block_counts(18)
    with self.assertRaisesRegex(ValueError, "base needs 5 filter counts and blocks 4 stages"):
      wresnet.build(base=(4, 8, 16, 32), blocks=(1, 1, 1, 1), image=32, batch=1)
    with self.assertRaisesRegex(ValueError, "base needs 5 filter counts and blocks 4 stages"):
      wresnet.build(base=(4, 8, 16, 16, 32), blocks=(1, 1, 1), image=32, batch=1)
    with self.assertRaisesRegex(ValueError,
                                r"stage filters \[6, 16, 16, 32\] must be multiples of 4"):
      wresnet.build(base=(4, 6, 16, 16, 32), blocks=(1, 1, 1, 1), image=32, batch=1)
    with self.assertRaisesRegex(ValueError, "unknown flavor 'pytorch'"):
      wresnet.build(**TINY, flavor="pytorch")
    with self.assertRaisesRegex(ValueError, "unknown dtype 'float16'"):
      wresnet.build(**TINY, dtype="float16")


if __name__ == "__main__":
  absltest.main()
