"""``model.fit``, ``evaluate`` and ``predict`` of a compiled Keras 3 model, partitioned.

    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    tf_tofu.keras.partition(model, devices=8)
    model.fit(x, y, batch_size=64, epochs=3, validation_split=0.1,
              callbacks=[keras.callbacks.ModelCheckpoint("w.weights.h5", save_weights_only=True)])

After :func:`partition`, Keras' own loops (progress bar, callbacks, metrics,
validation) run unchanged; only the steps are replaced:

* the train step ``forward (training=True) -> compiled loss -> gradients ->
  optimizer.apply_gradients`` is one ``tf_tofu.function``: planned, rewritten
  and run across ``devices`` with weights and optimizer state sharded; it
  returns the loss and the predictions, from which Keras updates its loss
  tracker and metrics as in its own ``train_step``;
* the test step (forward with ``training=False`` and the loss) and the
  predict step (forward) are partitioned the same way, without updates.

Weights: the shards are what trains.  They are written back into the
model's variables (``Function.sync_variables``) at the end of every epoch,
before any other callback sees it (so ``ModelCheckpoint`` and
``EarlyStopping`` read trained weights), at the end of ``fit``, and before
``evaluate`` and ``predict``; variables changed by callbacks at an epoch's
start (a learning-rate schedule) are read back into the shards before its
first batch (``Function.load_variables``).  Every batch shape gets its own
plan, cached: a last partial batch is planned once.  Not supported (a
``TofuError`` says so): sample weights, ``steps_per_execution`` > 1, and
models without a compiled loss.

Keras runs these steps eagerly (``run_eagerly``): the partitioned step is
one graph call per batch, the metrics a few eager ops.
"""

from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf

from tf_tofu.core import devices as devices_lib
from tf_tofu.core.errors import TofuError


def _unpack(data):
  from keras.src.trainers.data_adapters import data_adapter_utils
  x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(data)
  if sample_weight is not None:
    raise TofuError("tf_tofu.keras: sample weights are not supported by the partitioned "
                    "steps; train without sample_weight/class_weight, or without partition()")
  return x, y


def _batch_size(x) -> int:
  return int(tf.shape(tf.nest.flatten(x)[0])[0])


class PartitionedSteps:
  """The partitioned train, test and predict steps of one compiled model (module docstring).

  Attributes:
    train, test, predict: the ``tf_tofu.Function`` of each step (built lazily,
      each with a plan per batch shape).
  """

  def __init__(self, model, devices: devices_lib.Devices, planner: str = "tofu",
               comm: str = "plain"):
    import tf_tofu
    if getattr(model, "optimizer", None) is None or getattr(model, "_compile_loss", None) is None:
      raise TofuError("tf_tofu.keras.partition needs a compiled model with an optimizer and a "
                      "loss: call model.compile(optimizer=..., loss=...) first")
    if getattr(model, "steps_per_execution", 1) != 1:
      raise TofuError("tf_tofu.keras.partition: steps_per_execution must be 1 (the partitioned "
                      "step runs once per batch); compile without steps_per_execution")
    self.model = model
    options = dict(devices=devices, planner=planner, comm=comm)
    self.train = tf_tofu.function(self._train_fn, **options)
    self.test = tf_tofu.function(self._test_fn, **options)
    self.predict = tf_tofu.function(self._predict_fn, **options)
    self._active: Optional[Any] = None

  # The steps that are partitioned: pure TensorFlow, no metric updates.

  def _forward(self, x, training: bool):
    model = self.model
    return model(x, training=training) if model._call_has_training_arg else model(x)

  def _train_fn(self, x, y):
    model = self.model
    with tf.GradientTape() as tape:
      y_pred = self._forward(x, training=True)
      loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=None, training=True)
      scaled = model.optimizer.scale_loss(loss)
    weights = model.trainable_weights
    model.optimizer.apply_gradients(zip(tape.gradient(scaled, weights), weights))
    return loss, y_pred

  def _test_fn(self, x, y):
    y_pred = self._forward(x, training=False)
    return self.model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=None,
                                    training=False), y_pred

  def _predict_fn(self, x):
    return self._forward(x, training=False)

  # Which Function's shards hold the current weights.

  def use(self, function) -> None:
    """Makes ``function``'s shards the current weights: the previous one's are synced into
    the model's variables, and ``function`` reads them (no-op if already current)."""
    if self._active is function:
      return
    self.sync()
    function.load_variables()
    self._active = function

  def sync(self) -> None:
    """Writes the current shards back into the model's (and optimizer's) variables."""
    if self._active is not None:
      self._active.sync_variables()

  def reload(self) -> None:
    """Reads the model's variables into the current shards (after callbacks changed them)."""
    if self._active is not None:
      self._active.load_variables()

  # Keras' step methods, replaced on the model.

  def train_step(self, data):
    x, y = _unpack(data)
    self.use(self.train)
    loss, y_pred = self.train(x, y)
    return self._metrics(x, y, y_pred, loss)

  def test_step(self, data):
    x, y = _unpack(data)
    self.use(self.test)
    loss, y_pred = self.test(x, y)
    return self._metrics(x, y, y_pred, loss)

  def predict_step(self, data):
    x, _ = _unpack(data)
    self.use(self.predict)
    return self.predict(x)

  def _metrics(self, x, y, y_pred, loss):
    model = self.model
    model._loss_tracker.update_state(loss, sample_weight=_batch_size(x))
    return model.compute_metrics(x, y, y_pred, sample_weight=None)


def _sync_callback(steps: PartitionedSteps):
  import keras

  class SyncWeights(keras.callbacks.Callback):
    """Shards -> model at each epoch's end (first of the callbacks) and at the end of
    training; model -> shards before each epoch's first batch."""

    def on_train_batch_begin(self, batch, logs=None):
      if batch == 0:
        steps.reload()

    def on_epoch_end(self, epoch, logs=None):
      steps.sync()

    def on_train_end(self, logs=None):
      steps.sync()

  return SyncWeights()


def partition(model, devices: devices_lib.Devices, planner: str = "tofu", comm: str = "plain"):
  """Makes ``model.fit``, ``evaluate`` and ``predict`` run partitioned across ``devices``.

  Args:
    model: a compiled Keras 3 model.
    devices: an int k or device names (as for ``tf_tofu.function``).
    planner: "tofu" or a baseline.
    comm: "plain" or "collective".

  Returns:
    The model (changed in place); ``model.tofu_steps`` is the
    :class:`PartitionedSteps` (its ``train.plan(x, y)`` shows a batch's plan).
  """
  steps = PartitionedSteps(model, devices, planner, comm)
  fit, evaluate, predict = model.fit, model.evaluate, model.predict

  def partitioned_fit(*args, callbacks=None, **kwargs):
    if kwargs.get("sample_weight") is not None or kwargs.get("class_weight") is not None:
      raise TofuError("tf_tofu.keras: sample_weight and class_weight are not supported by the "
                      "partitioned steps")
    return fit(*args, callbacks=[_sync_callback(steps), *(callbacks or [])], **kwargs)

  def synced(run):
    def call(*args, **kwargs):
      steps.sync()
      return run(*args, **kwargs)
    return call

  model.train_step = steps.train_step
  model.test_step = steps.test_step
  model.predict_step = steps.predict_step
  model.fit = partitioned_fit
  model.evaluate = synced(evaluate)
  model.predict = synced(predict)
  model.run_eagerly = True
  for attr in ("train_function", "test_function", "predict_function"):
    setattr(model, attr, None)  # rebuilt by Keras around the replaced steps
  model.tofu_steps = steps
  return model


__all__ = ["PartitionedSteps", "partition"]
