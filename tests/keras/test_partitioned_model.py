"""Tests for tf_tofu.keras.partitioned_model: model.fit, evaluate and predict, partitioned.

A float64 Keras model trained with ``fit`` after ``tf_tofu.keras.partition``
gives the history (loss, accuracy, validation), final weights, optimizer
state, ``evaluate`` and ``predict`` of plain ``fit`` from the same initial
weights, at the fixed float64 bound; a last partial batch gets its own plan;
``ModelCheckpoint`` saves trained weights; a learning-rate schedule set by a
callback reaches the shards; what is not supported is refused.
"""

import os
import shutil
import tempfile

import keras
import numpy as np
from absl.testing import absltest

from tests import cpu_devices
import tf_tofu.keras
from tf_tofu.core.errors import TofuError
from tf_tofu.models import keras_catalog
from tf_tofu.verify import equivalence

K = 4


def setUpModule():
  cpu_devices.require(K)


def _model(seed=0, compile_it=True):
  with keras_catalog.floatx("float64"):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((7,)), keras.layers.Dense(9, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(5)])
    if compile_it:
      model.compile(optimizer=keras.optimizers.Adam(0.01),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=["accuracy"])
  return model


def _data(n=22):
  rng = np.random.default_rng(0)
  return rng.normal(size=(n, 7)), rng.integers(0, 5, size=n).astype(np.int32)


def _pair():
  plain, partitioned = _model(), _model(seed=1)
  partitioned.set_weights(plain.get_weights())
  tf_tofu.keras.partition(partitioned, devices=K)
  return plain, partitioned


def _assert_close(test, got, want, what):
  test.assertLessEqual(equivalence.excess(np.asarray(got, np.float64),
                                          np.asarray(want, np.float64)), 0.0, what)


class FitTest(absltest.TestCase):

  def test_fit_evaluate_predict_equal_plain_keras(self):
    plain, partitioned = _pair()
    x, y = _data()
    kwargs = dict(batch_size=4, epochs=2, shuffle=False, verbose=0, validation_split=0.2)
    want = plain.fit(x, y, **kwargs).history
    got = partitioned.fit(x, y, **kwargs).history
    self.assertEqual(sorted(got), ["accuracy", "loss", "val_accuracy", "val_loss"])
    for key in want:
      _assert_close(self, got[key], want[key], key)
    for w_got, w_want in zip(partitioned.weights, plain.weights):
      _assert_close(self, w_got.numpy(), w_want.numpy(), w_want.path)
    for v_got, v_want in zip(partitioned.optimizer.variables, plain.optimizer.variables):
      _assert_close(self, v_got.numpy(), v_want.numpy(), v_want.path)
    self.assertEqual(int(partitioned.optimizer.iterations.numpy()), 10)  # 2 x ceil(17 / 4)
    # 17 training samples in batches of 4: a last batch of 1 has its own (cached) plan.
    self.assertLen(partitioned.tofu_steps.train._entries, 2)
    _assert_close(self, partitioned.evaluate(x, y, verbose=0), plain.evaluate(x, y, verbose=0),
                  "evaluate")
    _assert_close(self, partitioned.predict(x, batch_size=8, verbose=0),
                  plain.predict(x, batch_size=8, verbose=0), "predict")
    plan = partitioned.tofu_steps.train.plan(x[:4], y[:4])
    self.assertEqual(len(plan.devices), K)

  def test_checkpoints_and_schedules_see_the_trained_weights(self):
    plain, partitioned = _pair()
    x, y = _data(16)
    folder = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, folder)
    path = os.path.join(folder, "epoch{epoch}.weights.h5")
    schedule = lambda epoch, lr: 0.01 if epoch == 0 else 0.002  # noqa: E731

    def callbacks():
      return [keras.callbacks.LearningRateScheduler(schedule)]

    kwargs = dict(batch_size=8, epochs=2, shuffle=False, verbose=0)
    plain.fit(x, y, callbacks=callbacks(), **kwargs)
    partitioned.fit(x, y, callbacks=callbacks() + [keras.callbacks.ModelCheckpoint(
        path, save_weights_only=True)], **kwargs)
    for w_got, w_want in zip(partitioned.weights, plain.weights):
      _assert_close(self, w_got.numpy(), w_want.numpy(), w_want.path)
    saved = _model(seed=2)
    saved.load_weights(os.path.join(folder, "epoch2.weights.h5"))
    for w_saved, w_trained in zip(saved.weights, partitioned.weights):
      np.testing.assert_array_equal(w_saved.numpy(), w_trained.numpy())  # synced before saving

  def test_refusals(self):
    with self.assertRaisesRegex(TofuError, "compiled model"):
      tf_tofu.keras.partition(_model(compile_it=False), devices=K)
    _, partitioned = _pair()
    x, y = _data(8)
    with self.assertRaisesRegex(TofuError, "sample_weight"):
      partitioned.fit(x, y, sample_weight=np.ones(8), verbose=0)


class ReadmeExampleTest(absltest.TestCase):

  def test_the_readme_keras_example_runs(self):
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    section = readme.split("### Keras: `model.fit`, partitioned", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    model = keras.Sequential([keras.Input((7,)), keras.layers.Dense(9, activation="relu"),
                              keras.layers.Dense(5)])
    x, y = _data(142)  # 128 to train (two full batches), 14 to validate
    folder = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, folder)
    cwd = os.getcwd()
    os.chdir(folder)  # the example's ModelCheckpoint writes w.weights.h5 here
    self.addCleanup(os.chdir, cwd)
    exec(code, {"model": model, "x": x, "y": y, "keras": keras, "tf_tofu": tf_tofu})  # pylint: disable=exec-used
    self.assertLen(model.history.history["loss"], 3)
    self.assertTrue(os.path.exists(os.path.join(folder, "w.weights.h5")))
    self.assertIsNotNone(model.tofu_steps.train.plan(x[:64], y[:64]))


if __name__ == "__main__":
  absltest.main()
