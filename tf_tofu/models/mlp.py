"""A multi-layer perceptron classifier: ``depth`` hidden ReLU layers of ``width`` units.

    h_0 = x  (batch, in_dim);   h_l = relu(h_{l-1} W_l + b_l);   logits = h_depth W_out + b_out
    loss = mean_b xent(logits_b, y_b)
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from tf_tofu.models import common


def build(depth: int = 2, width: int = 8, batch: int = 4, in_dim: Optional[int] = None,
          classes: int = 10, *, flavor: str = "tf", optimizer: str = "sgd",
          materialize: bool = True, dtype: str = "float32") -> common.TrainStep:
  """The MLP training step.

  Args:
    depth: number of hidden layers.
    width: units per hidden layer.
    batch: examples per step.
    in_dim: input features (default ``width``).
    classes: output classes.
    flavor: ``"tf"`` (tf.Variable + tf ops) or ``"keras"`` (keras.layers.Dense).
    optimizer: ``"sgd"`` or ``"adam"``.
    materialize: False builds in a never-run graph (no weight memory).
    dtype: ``"float32"`` or ``"float64"`` (weights, activations, optimizer state).
  """
  common.check_choice("flavor", flavor, common.FLAVORS)
  dtype = common.check_dtype(dtype)
  in_dim = in_dim or width
  config = dict(depth=depth, width=width, batch=batch, in_dim=in_dim, classes=classes)
  signature = (tf.TensorSpec([batch, in_dim], dtype, name="x"),
               tf.TensorSpec([batch], tf.int32, name="y"))
  with common.build_scope(materialize) as graph:
    if flavor == "tf":
      layers = []
      sizes = [in_dim] + [width] * depth + [classes]
      for l in range(depth + 1):
        w = common.glorot([sizes[l], sizes[l + 1]], sizes[l], sizes[l + 1], f"dense_{l}/kernel",
                          dtype)
        b = common.zeros([sizes[l + 1]], f"dense_{l}/bias", dtype=dtype)
        layers.append((w, b))
      variables = [v for pair in layers for v in pair]

      def loss_fn(x, y):
        h = x
        for l, (w, b) in enumerate(layers):
          with tf.name_scope(f"dense_{l}"):
            h = tf.nn.bias_add(tf.matmul(h, w), b)
            if l < depth:
              h = tf.nn.relu(h)
        return common.sparse_xent(y, h)
    else:
      import keras
      model = keras.Sequential(
          [keras.layers.Dense(width, activation="relu", dtype=dtype) for _ in range(depth)]
          + [keras.layers.Dense(classes, dtype=dtype)], name="mlp")
      model.build((batch, in_dim))
      variables = list(model.trainable_variables)

      def loss_fn(x, y):
        return common.sparse_xent(y, model(x, training=True))

    return common.make_step(common.describe_config("mlp", config), config, signature,
                            [(-1.0, 1.0), (0, classes)], loss_fn, variables, optimizer, flavor,
                            graph, dtype)
