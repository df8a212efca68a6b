"""Tests for tf_tofu.verify.sweep: one step measured end to end.

A Keras Dense step at k = 2: nothing left whole, counted bytes equal to the
plan's and to the sum of what the devices receive, numerics equal, the
baseline priced on the same graph.  A step with a band-part (an op no
description covers): its undescribed ops are reported by type, and gathering
their inputs on one device makes that device the busiest.
"""

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tests import cpu_devices
import tf_tofu
from tf_tofu.models import keras_catalog
from tf_tofu.verify import sweep


def setUpModule():
  cpu_devices.require(4)


def _check(model, k, **kwargs):
  step = keras_catalog.build(model, "adam", "float64")
  inputs = [step.example_inputs(seed) for seed in range(2)]
  return step, sweep.check_step(step.name, step.fn, inputs, k, **kwargs)


class CheckStepTest(absltest.TestCase):

  def test_a_described_step(self):
    step, row = _check("dense", 2, baselines=("datapar",))
    self.assertEqual((row.name, row.k), ("dense/keras/adam/float64", 2))
    self.assertEqual(row.whole, {})
    self.assertEqual(row.whole_count, 0)
    self.assertEqual(row.counted, row.predicted)
    self.assertGreater(row.counted, 0)
    self.assertEqual(row.mismatches, ())
    self.assertGreaterEqual(row.busiest, 1.0)
    self.assertGreater(row.memory_ratio, 0)
    self.assertGreater(row.ops, 50)
    datapar = tf_tofu.plan(step.fn, *step.input_signature, devices=2, planner="datapar")
    self.assertEqual(row.best_baseline, ("datapar", datapar.total_bytes))

  def test_ops_left_whole_are_reported_and_load_one_device(self):
    w = tf.Variable(np.arange(24.0).reshape(6, 4) / 10)

    @tf.function(autograph=False)
    def step(x):
      with tf.GradientTape() as tape:
        h = tf.matmul(x, w)
        loss = tf.reduce_sum(tf.linalg.band_part(h, 0, -1) ** 2)  # MatrixBandPart: undescribed
      w.assign_sub(0.01 * tape.gradient(loss, w))
      return loss

    rng = np.random.default_rng(0)
    row = sweep.check_step("band_part", step, [(rng.normal(size=(8, 6)),),
                                              (rng.normal(size=(8, 6)),)], 4)
    self.assertEqual(row.whole, {"MatrixBandPart": 2})  # the op and its gradient
    self.assertEqual(row.whole_count, 2)
    self.assertGreater(row.busiest, 1.2)
    self.assertEqual(row.mismatches, ())  # left whole, still exact


if __name__ == "__main__":
  absltest.main()
