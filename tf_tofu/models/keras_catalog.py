"""Keras 3 models as users bring them: layer stacks and ``keras.applications``.

Every entry builds a compiled-free Keras model and its training step (the
user's usual ``GradientTape`` step: forward with ``training=True``, the loss,
``optimizer.apply_gradients``) with any of the Keras optimizers users train
with (:data:`OPTIMIZERS`)::

    step = keras_catalog.build("conv2d", optimizer="adamw", dtype="float64")
    tf_tofu.function(step.fn, devices=4)(*step.example_inputs())

``LAYERS`` are small stacks exercising one kind of layer each (Dense,
Conv1D/2D/3D, depthwise and separable convolutions, the normalisations,
attention, Embedding, unrolled LSTM/GRU, Dropout, pooling, and every
built-in activation: all but sparsemax side by side in ``activations``,
sparsemax, whose ops are not all described, on its own); ``APPLICATIONS`` are ``keras.applications`` models with
``weights=None`` at the smallest input each accepts.  Sizes deliberately do
not divide 2, 3, 4 or 8 everywhere.

A float64 step builds its layers under ``keras.config.set_floatx("float64")``
(restored afterwards), so weights, activations and optimizer state are
float64 throughout.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import tensorflow as tf

from tf_tofu.models.common import (TrainStep, check_choice, check_dtype,
                                   seeded_keras_weights, tf_variables)

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
BATCH = 4
CLASSES = 5


def keras_optimizer(name: str):
  """A Keras optimizer by name: plain SGD, SGD with momentum 0.9, Adam, AdamW."""
  import keras
  check_choice("Keras optimizer", name, OPTIMIZERS)
  return {"sgd": lambda: keras.optimizers.SGD(0.01),
          "momentum": lambda: keras.optimizers.SGD(0.01, momentum=0.9),
          "adam": lambda: keras.optimizers.Adam(1e-3),
          "adamw": lambda: keras.optimizers.AdamW(1e-3, weight_decay=0.004)}[name]()


@contextlib.contextmanager
def floatx(dtype: str) -> Iterator[None]:
  """Keras' default float type and dtype policy set to ``dtype`` inside the block."""
  import keras
  before = keras.config.floatx(), keras.config.dtype_policy()
  keras.config.set_floatx(dtype)
  keras.config.set_dtype_policy(dtype)
  try:
    yield
  finally:
    keras.config.set_floatx(before[0])
    keras.config.set_dtype_policy(before[1])


def _sequential(input_shape, *layers, input_dtype=None):
  import keras
  return keras.Sequential([keras.Input(input_shape, batch_size=BATCH, dtype=input_dtype),
                           *layers])


def _mha():
  import keras
  x = keras.Input((6, 8), batch_size=BATCH)
  h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)(x, x)
  h = keras.layers.LayerNormalization()(h + x)
  out = keras.layers.Dense(CLASSES)(keras.layers.GlobalAveragePooling1D()(h))
  return keras.Model(x, out)


def _layer_models() -> dict[str, Callable[[], Any]]:
  import keras
  L = keras.layers
  head = lambda: L.Dense(CLASSES)  # noqa: E731
  models = {
      "dense": lambda: _sequential((7,), L.Dense(6, activation="relu"), head()),
      "conv1d": lambda: _sequential((9, 3), L.Conv1D(5, 3, padding="same"),
                                    L.Conv1D(4, 2, strides=2), L.MaxPooling1D(2),
                                    L.GlobalAveragePooling1D(), head()),
      "conv2d": lambda: _sequential((9, 7, 3), L.Conv2D(5, 3, padding="same"),
                                    L.MaxPooling2D(), L.Conv2D(4, 2, strides=2),
                                    L.AveragePooling2D(pool_size=1), L.Flatten(), head()),
      "conv3d": lambda: _sequential((5, 6, 5, 2), L.Conv3D(3, 2), L.MaxPooling3D(),
                                    L.GlobalAveragePooling3D(), head()),
      "depthwise": lambda: _sequential((9, 7, 3), L.Conv2D(4, 1), L.DepthwiseConv2D(3),
                                       L.GlobalMaxPooling2D(), head()),
      "separable": lambda: _sequential((9, 7, 3), L.Conv2D(4, 1), L.SeparableConv2D(5, 3),
                                       L.GlobalAveragePooling2D(), head()),
      "batchnorm": lambda: _sequential((7, 6, 3), L.Conv2D(5, 3), L.BatchNormalization(),
                                       L.ReLU(), L.GlobalAveragePooling2D(), head()),
      "layernorm": lambda: _sequential((5, 6), L.Dense(7), L.LayerNormalization(),
                                       L.GlobalAveragePooling1D(), head()),
      "groupnorm": lambda: _sequential((6, 5, 4), L.GroupNormalization(2),
                                       L.GlobalAveragePooling2D(), head()),
      "attention": _mha,
      "embedding": lambda: _sequential((6,), L.Embedding(13, 5), L.GlobalAveragePooling1D(),
                                       head(), input_dtype="int32"),
      "lstm": lambda: _sequential((5, 3), L.LSTM(6, unroll=True), head()),
      "gru": lambda: _sequential((5, 3), L.GRU(6, unroll=True), head()),
      "dropout": lambda: _sequential((7,), L.Dense(9), L.Dropout(0.5), head()),
  }
  models["activations"] = _activations
  models["activation_sparsemax"] = (
      lambda: _sequential((7,), L.Dense(6), L.Activation("sparsemax"), head()))
  return models


def _activations():
  """Every built-in activation but sparsemax, side by side on one Dense output (one step
  checks them all)."""
  import keras
  L = keras.layers
  x = keras.Input((7,), batch_size=BATCH)
  h = L.Dense(6)(x)
  branches = [L.Activation(act)(h) for act in ACTIVATIONS if act != "sparsemax"]
  return keras.Model(x, L.Dense(CLASSES)(L.Concatenate()(branches)))


# Keras' built-in activations that take one tensor (glu halves its input;
# threshold needs arguments).
ACTIVATIONS = ("relu", "sigmoid", "softmax", "softplus", "softsign", "tanh", "selu", "elu",
               "exponential", "leaky_relu", "relu6", "silu", "hard_silu", "gelu",
               "hard_sigmoid", "linear", "mish", "log_softmax", "celu", "hard_tanh",
               "hard_shrink", "soft_shrink", "tanh_shrink", "squareplus", "sparse_plus",
               "log_sigmoid", "sparsemax")


def application(name: str, size: int, **kwargs) -> Callable[[], Any]:
  """A builder of ``keras.applications.<name>`` without weights on ``size`` x ``size`` RGB
  images and ``CLASSES`` logits (for :func:`train_step`)."""

  def build():
    import keras
    cls = getattr(keras.applications, name)
    return cls(weights=None, input_shape=(size, size, 3), classes=CLASSES,
               classifier_activation=None, **kwargs)
  return build


APPLICATIONS: dict[str, Callable[[], Any]] = {
    "ResNet50": application("ResNet50", 32),
    "MobileNetV2": application("MobileNetV2", 32, alpha=0.35),
    "EfficientNetB0": application("EfficientNetB0", 32),
    "DenseNet121": application("DenseNet121", 32),
    "InceptionV3": application("InceptionV3", 75),
    "ConvNeXtTiny": application("ConvNeXtTiny", 32),
}


def _losses() -> dict[str, Callable[[], Any]]:
  import keras
  K = keras.losses
  return {
      "sparse_categorical_crossentropy": lambda: K.SparseCategoricalCrossentropy(from_logits=True),
      "categorical_crossentropy": lambda: K.CategoricalCrossentropy(from_logits=True),
      "binary_crossentropy": lambda: K.BinaryCrossentropy(from_logits=True),
      "mean_squared_error": K.MeanSquaredError,
      "mean_absolute_error": K.MeanAbsoluteError,
      "huber": K.Huber,
      "log_cosh": K.LogCosh,
      "hinge": K.Hinge,
      "squared_hinge": K.SquaredHinge,
      "categorical_hinge": K.CategoricalHinge,
      "cosine_similarity": K.CosineSimilarity,
  }


# Keras' built-in losses of (targets, logits) that any real logits keep finite;
# the sparse one takes class ids, the others targets of the logits' shape.
LOSSES = ("sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
          "mean_squared_error", "mean_absolute_error", "huber", "log_cosh", "hinge",
          "squared_hinge", "categorical_hinge", "cosine_similarity")


def names() -> tuple[str, ...]:
  """Every catalogue entry: the layer models, then the applications."""
  return (*_layer_models(), *APPLICATIONS)


def build(name: str, optimizer: str = "adam", dtype: str = "float32",
          loss: str = "sparse_categorical_crossentropy", batch: int = BATCH) -> TrainStep:
  """The training step of catalogue entry ``name`` (see :func:`names`) on ``batch`` examples.

  ``loss`` is one of :data:`LOSSES`; targets are class ids for the sparse
  loss and rows of ``CLASSES`` values in [0, 1) otherwise.
  """
  layer_models = _layer_models()
  check_choice("Keras model", name, (*layer_models, *APPLICATIONS))
  return train_step(layer_models.get(name) or APPLICATIONS[name], name, optimizer, dtype, loss,
                    batch)


def train_step(make_model: Callable[[], Any], name: str, optimizer: str = "adam",
               dtype: str = "float32", loss: str = "sparse_categorical_crossentropy",
               batch: int = BATCH) -> TrainStep:
  """The training step of the Keras model ``make_model()`` (built in ``dtype``, its last
  layer giving ``CLASSES`` logits) with a Keras ``optimizer`` and ``loss`` on ``batch``
  examples, as for :func:`build`."""
  check_dtype(dtype)
  check_choice("loss", loss, LOSSES)
  with floatx(dtype), seeded_keras_weights():
    model = make_model()
    opt = keras_optimizer(optimizer)
    opt.build(model.trainable_variables)
    loss_fn = _losses()[loss]()
  x_spec = tf.TensorSpec([batch, *model.inputs[0].shape[1:]], model.inputs[0].dtype)
  sparse = loss.startswith("sparse")
  y_spec = (tf.TensorSpec([batch], tf.int32) if sparse
            else tf.TensorSpec([batch, CLASSES], dtype))
  variables = list(model.trainable_variables)

  def step(x, y):
    with tf.GradientTape() as tape:
      logits = model(x, training=True)
      value = loss_fn(y, logits)
    grads = tape.gradient(value, variables)
    opt.apply_gradients(zip(grads, variables))
    return value

  fn = tf.function(step, input_signature=[x_spec, y_spec], autograph=False)
  x_range = (0, 13) if x_spec.dtype.is_integer else (-1.0, 1.0)
  suffix = "" if dtype == "float32" else f"/{dtype}"
  return TrainStep(name=f"{name}/keras/{optimizer}{suffix}", fn=fn,
                   input_signature=(x_spec, y_spec), variables=tf_variables(variables),
                   optimizer_variables=tf_variables(opt.variables), graph=None,
                   config={"loss": loss}, input_ranges=(x_range, (0, CLASSES) if sparse
                                                        else (0.0, 1.0)))


__all__ = ["ACTIVATIONS", "APPLICATIONS", "BATCH", "CLASSES", "LOSSES", "OPTIMIZERS", "application",
           "build", "train_step", "floatx",
           "keras_optimizer", "names"]
