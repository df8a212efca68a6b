"""Tests for tf_tofu.verify.equivalence: the fixed float64 comparison catches wrong steps."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tf_tofu.verify import equivalence


class ExcessTest(absltest.TestCase):

  def test_bound_is_relative_plus_absolute(self):
    want = np.array([2.0, -4.0])
    self.assertLessEqual(equivalence.excess(want + 4e-9, want), 0.0)   # 4e-9 <= 4e-9 + 1e-9
    self.assertGreater(equivalence.excess(want + 6e-9, want), 0.0)
    self.assertLessEqual(equivalence.excess([1e-10], [0.0]), 0.0)      # near zero: ATOL
    self.assertGreater(equivalence.excess([1e-3], [1e-3 + 1e-5], rtol=1e-3, atol=0.0), 0.0)

  def test_shape_and_nan_never_pass(self):
    self.assertEqual(equivalence.excess(np.zeros(3), np.zeros(2)), float("inf"))
    self.assertEqual(equivalence.excess([np.nan], [1.0]), float("inf"))
    self.assertEqual(equivalence.excess(np.zeros(0), np.zeros(0)), 0.0)


class _Step:
  """A float64 SGD step on one weight, with a stand-in for tf_tofu.Function around it."""

  def __init__(self, lr: float):
    self.w = tf.Variable(np.linspace(-1.0, 1.0, 6).reshape(2, 3), dtype=tf.float64)
    self.lr = lr

  def make(self, lr: float):
    w = self.w

    @tf.function(autograph=False)
    def step(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
      w.assign_sub(lr * tape.gradient(loss, w))
      return loss
    return step


class _AsFunction:
  """What Reference.compare needs of a tf_tofu.Function: call it, then sync_variables."""

  def __init__(self, fn):
    self.fn = fn

  def __call__(self, *xs):
    return self.fn(*xs)

  def sync_variables(self):
    pass


class ReferenceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.model = _Step(0.01)
    self.step = self.model.make(0.01)
    rng = np.random.default_rng(0)
    self.inputs = [(rng.normal(size=(4, 2)),) for _ in range(3)]
    self.ref = equivalence.Reference(self.step, self.inputs)

  def test_the_same_step_matches_and_restores(self):
    self.assertEqual(self.ref.compare(_AsFunction(self.step)), [])
    for name, value in self.ref.values().items():
      np.testing.assert_array_equal(value, self.ref.initial[name])

  def test_a_slightly_wrong_step_is_caught(self):
    wrong = self.model.make(0.01 * (1 + 1e-6))   # a learning rate off by one part in 1e6
    bad = self.ref.compare(_AsFunction(wrong))
    self.assertNotEmpty(bad)
    self.assertTrue(any("after 3 steps" in str(m) for m in bad), bad)
    self.assertTrue(any("outputs of step 2" in str(m) for m in bad), bad)

  def test_fewer_steps(self):
    self.assertEqual(self.ref.compare(_AsFunction(self.step), steps=1), [])


if __name__ == "__main__":
  absltest.main()
