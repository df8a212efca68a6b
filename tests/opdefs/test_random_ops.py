"""Tests for tf_tofu.opdefs.random_ops: stateless samplers are never cut.

Each sampler's description applies to the op TensorFlow builds (shapes,
inputs accounted for), derives no strategy at any n, and keeps its seed,
key, counter and scalar arguments whole on every worker; a partitioned
Keras Dropout step that draws through them equals the unpartitioned one
(tests/models/test_keras_catalog.py).
"""

import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.opdefs import analysis, random_ops, registry, validate
from tf_tofu.opdefs.cases import random_cases


def _semantics(case):
  ctx, values = validate.build_case(case)
  return registry.semantics_of(ctx), ctx, values


class SamplerTest(parameterized.TestCase):

  @parameterized.named_parameters((f"{c.op_type}_{i}", c)
                                  for i, c in enumerate(random_cases.CASES))
  def test_no_strategy_cuts_a_sampler(self, case):
    sem, ctx, _ = _semantics(case)
    self.assertIsNotNone(sem)
    for n in (2, 3, 4, 8):
      self.assertEqual(analysis.strategies(sem, n), (), f"n={n}")
    self.assertEqual([o.shape for o in sem.outputs], [o.shape for o in ctx.outputs])

  def test_shape_is_meta_and_every_other_input_is_replicated(self):
    case = next(c for c in random_cases.CASES if c.op_type == "StatelessRandomUniformIntV2")
    sem, _, _ = _semantics(case)
    self.assertEqual(sem.meta_inputs, frozenset({0}))
    self.assertEqual(sem.replicated_inputs, frozenset({1, 2, 3, 4, 5}))
    self.assertEqual(sem.outputs[0].shape, (9,))

  def test_key_counter_outputs_take_the_kernel_shapes(self):
    for op_type, shapes in (("StatelessRandomGetKeyCounter", [(1,), (2,)]),
                            ("StatelessRandomGetKeyCounterAlg", [(1,), (2,), ()])):
      case = next(c for c in random_cases.CASES if c.op_type == op_type)
      sem, _, _ = _semantics(case)
      self.assertEqual([o.shape for o in sem.outputs], shapes, op_type)
      self.assertEqual(sem.replicated_inputs, frozenset({0}))

  def test_every_sampler_family_is_registered(self):
    for op_type in (*random_ops.KEY_COUNTER_SAMPLERS, *random_ops.SEED_SAMPLERS):
      self.assertIs(registry.lookup(op_type), random_ops.stateless_sampler, op_type)
    self.assertIsNone(registry.lookup("RandomUniform"))  # stateful: left whole

  def test_the_kernel_draws_depend_on_the_whole_shape(self):
    """Why no cut: the first rows of a [6, 5] draw are not a [3, 5] draw."""
    import tensorflow as tf
    seed = tf.constant([7, 11], tf.int64)
    whole = tf.random.stateless_uniform([6, 5], seed, dtype=tf.float64).numpy()
    half = tf.random.stateless_uniform([3, 5], seed, dtype=tf.float64).numpy()
    np.testing.assert_array_equal(whole[:1, :1], half[:1, :1])  # the stream starts alike
    self.assertFalse(np.array_equal(whole[3:], half))


if __name__ == "__main__":
  absltest.main()
