"""Wide ResNet-50/101/152: ImageNet bottleneck ResNet with every filter count times W.

Stem: 7x7/2 conv of ``base[0] * W`` filters, batch norm, ReLU, 3x3/2 max pool.
Stage s = 1..4: ``blocks[s-1]`` bottleneck blocks with ``base[s] * W`` output
filters (inner width a quarter of that); the first block of stages 2-4 has
stride 2, and a block whose shape changes has a 1x1 projection shortcut:

    y = relu(bn(conv1x1(relu(bn(conv3x3(relu(bn(conv1x1(x))), stride))))) + shortcut(x))

Head: global average pool, dense to ``classes``; loss: mean softmax cross entropy.
Batch norm runs in training mode (batch statistics) and updates its moving
mean and variance.  Images are NHWC.  The float32 plain-TF model uses the fused
batch-norm kernel (``FusedBatchNormV3``); that kernel has no float64 version,
so the float64 model computes the same normalisation unfused
(``tf.nn.moments`` + ``tf.nn.batch_normalization``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import tensorflow as tf

from tf_tofu.models import common

BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
BASE = (64, 256, 512, 1024, 2048)
BN_MOMENTUM = 0.99
BN_EPSILON = 1e-3


def block_counts(depth: int) -> tuple[int, ...]:
  if depth not in BLOCKS:
    raise ValueError(f"Wide ResNet depth must be one of {sorted(BLOCKS)}, got {depth}")
  return BLOCKS[depth]


class _PlainNet:
  """The network with tf.Variable weights, ``tf.nn.conv2d`` and fused batch norm."""

  def __init__(self, filters: Sequence[int], blocks: Sequence[int], classes: int, channels: int,
               dtype: str):
    self.dtype = dtype
    self.trainable: list = []
    self.layers: list = []
    self.stem = self._conv_bn("stem", 7, channels, filters[0], 2)
    in_ch = filters[0]
    for s, n in enumerate(blocks):
      out_ch, inner = filters[s + 1], filters[s + 1] // 4
      for b in range(n):
        stride = 2 if (b == 0 and s > 0) else 1
        name = f"stage{s + 1}/block{b + 1}"
        blk = {"stride": stride,
               "a": self._conv_bn(f"{name}/a", 1, in_ch, inner, 1),
               "b": self._conv_bn(f"{name}/b", 3, inner, inner, stride),
               "c": self._conv_bn(f"{name}/c", 1, inner, out_ch, 1),
               "short": (self._conv_bn(f"{name}/shortcut", 1, in_ch, out_ch, stride)
                         if (in_ch != out_ch or stride != 1) else None)}
        self.layers.append((name, blk))
        in_ch = out_ch
    self.w = common.glorot([in_ch, classes], in_ch, classes, "head/kernel", dtype)
    self.b = common.zeros([classes], "head/bias", dtype=dtype)
    self.trainable += [self.w, self.b]

  def _conv_bn(self, name: str, k: int, cin: int, cout: int, stride: int) -> dict:
    dt = self.dtype
    kernel = common.glorot([k, k, cin, cout], k * k * cin, k * k * cout, f"{name}/kernel", dt)
    gamma = common.ones([cout], f"{name}/bn/gamma", dtype=dt)
    beta = common.zeros([cout], f"{name}/bn/beta", dtype=dt)
    mean = common.zeros([cout], f"{name}/bn/moving_mean", trainable=False, dtype=dt)
    var = common.ones([cout], f"{name}/bn/moving_variance", trainable=False, dtype=dt)
    self.trainable += [kernel, gamma, beta]
    return dict(name=name, kernel=kernel, gamma=gamma, beta=beta, mean=mean, var=var,
                stride=stride)

  def _apply(self, p: dict, x: tf.Tensor, relu: bool) -> tf.Tensor:
    with tf.name_scope(p["name"].rsplit("/", 1)[-1]):
      s = p["stride"]
      x = tf.nn.conv2d(x, p["kernel"], strides=[1, s, s, 1], padding="SAME")
      if self.dtype == "float32":
        y, mean, var = tf.compat.v1.nn.fused_batch_norm(x, p["gamma"], p["beta"],
                                                        epsilon=BN_EPSILON, is_training=True)
      else:  # FusedBatchNormV3 has no float64 kernel: the same math, unfused
        mean, var = tf.nn.moments(x, axes=[0, 1, 2])
        y = tf.nn.batch_normalization(x, mean, var, p["beta"], p["gamma"], BN_EPSILON)
      p["mean"].assign(BN_MOMENTUM * p["mean"] + (1.0 - BN_MOMENTUM) * mean)
      p["var"].assign(BN_MOMENTUM * p["var"] + (1.0 - BN_MOMENTUM) * var)
      return tf.nn.relu(y) if relu else y

  def __call__(self, images: tf.Tensor) -> tf.Tensor:
    x = self._apply(self.stem, images, relu=True)
    x = tf.nn.max_pool2d(x, 3, 2, "SAME")
    for name, blk in self.layers:
      with tf.name_scope(name):
        h = self._apply(blk["a"], x, relu=True)
        h = self._apply(blk["b"], h, relu=True)
        h = self._apply(blk["c"], h, relu=False)
        short = self._apply(blk["short"], x, relu=False) if blk["short"] else x
        x = tf.nn.relu(h + short)
    with tf.name_scope("head"):
      x = tf.reduce_mean(x, axis=[1, 2])
      return tf.nn.bias_add(tf.matmul(x, self.w), self.b)


def _keras_net(filters: Sequence[int], blocks: Sequence[int], classes: int, image: int,
               channels: int, batch: int, dtype: str):
  import keras
  from keras import layers

  def conv_bn(x, cout, k, stride, name, relu=True):
    x = layers.Conv2D(cout, k, strides=stride, padding="same", use_bias=False,
                      name=f"{name}_conv", dtype=dtype)(x)
    x = layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                                  name=f"{name}_bn", dtype=dtype)(x)
    return layers.ReLU(name=f"{name}_relu", dtype=dtype)(x) if relu else x

  inputs = keras.Input(shape=(image, image, channels), batch_size=batch, dtype=dtype)
  x = conv_bn(inputs, filters[0], 7, 2, "stem")
  x = layers.MaxPooling2D(3, 2, padding="same", name="stem_pool", dtype=dtype)(x)
  in_ch = filters[0]
  for s, n in enumerate(blocks):
    out_ch, inner = filters[s + 1], filters[s + 1] // 4
    for b in range(n):
      stride = 2 if (b == 0 and s > 0) else 1
      name = f"stage{s + 1}_block{b + 1}"
      h = conv_bn(x, inner, 1, 1, f"{name}_a")
      h = conv_bn(h, inner, 3, stride, f"{name}_b")
      h = conv_bn(h, out_ch, 1, 1, f"{name}_c", relu=False)
      short = (conv_bn(x, out_ch, 1, stride, f"{name}_shortcut", relu=False)
               if (in_ch != out_ch or stride != 1) else x)
      x = layers.ReLU(name=f"{name}_out", dtype=dtype)(
          layers.Add(name=f"{name}_add", dtype=dtype)([h, short]))
      in_ch = out_ch
  x = layers.GlobalAveragePooling2D(name="pool", dtype=dtype)(x)
  logits = layers.Dense(classes, name="head", dtype=dtype)(x)
  return keras.Model(inputs, logits, name="wresnet")


def build(depth: int = 50, width: int = 1, batch: int = 8, image: int = 224, classes: int = 1000,
          base: Sequence[int] = BASE, blocks: Optional[Sequence[int]] = None, channels: int = 3,
          *, flavor: str = "tf", optimizer: str = "sgd",
          materialize: bool = True, dtype: str = "float32") -> common.TrainStep:
  """The Wide ResNet training step.

  Args:
    depth: 50, 101 or 152 (bottleneck blocks [3,4,6,3], [3,4,23,3], [3,8,36,3]).
    width: the widening factor W; filters are ``base[i] * W``.
    batch: images per step.
    image: input height and width (224 in the paper).
    classes: output classes.
    base: base filter counts (stem, stage 1..4 outputs).
    blocks: blocks per stage, overriding ``depth`` (for tiny test models).
    channels: input channels.
    flavor: ``"tf"`` or ``"keras"``.
    optimizer: ``"sgd"`` or ``"adam"``.
    materialize: False builds in a never-run graph (no weight memory).
    dtype: ``"float32"`` or ``"float64"`` (weights, activations, optimizer state).
  """
  common.check_choice("flavor", flavor, common.FLAVORS)
  dtype = common.check_dtype(dtype)
  blocks = tuple(blocks) if blocks is not None else block_counts(depth)
  if len(base) != 5 or len(blocks) != 4:
    raise ValueError(f"base needs 5 filter counts and blocks 4 stages, got {base}, {blocks}")
  filters = [int(f) * int(width) for f in base]
  if any(f % 4 for f in filters[1:]):
    raise ValueError(f"stage filters {filters[1:]} must be multiples of 4 (bottleneck width)")
  config = dict(depth=depth, width=width, batch=batch, image=image, classes=classes,
                blocks=blocks, base=tuple(base))
  signature = (tf.TensorSpec([batch, image, image, channels], dtype, name="images"),
               tf.TensorSpec([batch], tf.int32, name="labels"))
  with common.build_scope(materialize) as graph:
    if flavor == "tf":
      net = _PlainNet(filters, blocks, classes, channels, dtype)
      variables = net.trainable

      def loss_fn(images, labels):
        return common.sparse_xent(labels, net(images))
    else:
      model = _keras_net(filters, blocks, classes, image, channels, batch, dtype)
      variables = list(model.trainable_variables)

      def loss_fn(images, labels):
        return common.sparse_xent(labels, model(images, training=True))

    return common.make_step(common.describe_config("wresnet", config), config, signature,
                            [(0.0, 1.0), (0, classes)], loss_fn, variables, optimizer, flavor,
                            graph, dtype)
