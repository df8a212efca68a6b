"""Tests for tf_tofu.models.common: TrainStep, helpers, optimizers, the zoo-wide contract.

The zoo-wide tests (every tiny step ingests completely and trains; build,
tiny and paper dispatch) exercise the shared contract through
tf_tofu/models/__init__.py.
"""

import functools
import itertools
import random

import numpy as np
import keras
import tensorflow as tf
from absl.testing import absltest, parameterized

import tf_tofu
from tf_tofu import models
from tf_tofu.models import common, gpt, lstm, mlp, wresnet

CASES = [dict(testcase_name=f"{k}_{f}_{o}", key=k, flavor=f, optimizer=o)
         for k, f, o in itertools.product(sorted(models.TINY), models.FLAVORS, models.OPTIMIZERS)]


@functools.lru_cache(maxsize=None)
def _ingested(key, flavor, optimizer):
  step = models.tiny(key, flavor=flavor, optimizer=optimizer)
  return step, tf_tofu.trace(step.fn, *step.input_signature)


class ZooIngestTest(parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_tiny_step_ingests_completely(self, key, flavor, optimizer):
    step, g = _ingested(key, flavor, optimizer)
    for t in g.tensors.values():
      self.assertTrue(all(isinstance(d, int) and d >= 0 for d in t.shape), t.name)
      self.assertTrue(t.dtype, t.name)
    self.assertEqual(g.unattached, ())
    trainable = [v for v in g.variables if v.trainable]
    self.assertLen(trainable, len(step.variables))
    self.assertCountEqual([v.shape for v in trainable],
                          [tuple(v.shape.as_list()) for v in step.variables])
    for v in trainable:
      self.assertIsNotNone(v.gradient, v.name)
      self.assertTrue(v.updates, v.name)
      self.assertTrue(v.reads, v.name)
      grad = g.tensors[v.gradient]
      self.assertEqual(grad.dtype, v.dtype)
      if v.gradient_indices is None:
        self.assertEqual(grad.shape, v.shape, v.name)
      else:
        self.assertEqual(grad.shape[1:], v.shape[1:], v.name)
      self.assertEqual(g.ops[grad.producer].role, "backward", v.name)
      for u in v.updates:
        self.assertEqual(g.ops[u].role, "update")
    self.assertTrue(all(g.ops[f].role == "forward" for f in g.forward_op_of.values()))
    self.assertTrue(all(g.ops[b].role == "backward" for b in g.forward_op_of))
    self.assertEqual(len(g.forward_op_of), len(g.ops_with_role("backward")))

  @parameterized.named_parameters(*CASES[::3])
  def test_tiny_step_trains(self, key, flavor, optimizer):
    step = models.tiny(key, flavor=flavor, optimizer=optimizer)
    before = [v.numpy() for v in step.variables]
    loss = float(step.fn(*step.example_inputs(seed=3)))
    self.assertTrue(np.isfinite(loss))
    changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, step.variables)]
    self.assertTrue(all(changed), step.name)


class ZooDispatchTest(parameterized.TestCase):

  @parameterized.parameters(("mlp", mlp.build), ("wresnet", wresnet.build),
                            ("wresnet152", wresnet.build), ("lstm10", lstm.build),
                            ("gpt", gpt.build), ("gpt_untied", gpt.build))
  def test_builder_of_maps_a_key_to_its_family(self, key, builder):
    self.assertIs(models.builder_of(key), builder)

  def test_every_tiny_and_paper_key_has_a_builder(self):
    self.assertEqual(set(models.BUILDERS), {"mlp", "wresnet", "lstm", "gpt"})
    for key in list(models.TINY) + list(models.PAPER):
      self.assertIn(models.builder_of(key), set(models.BUILDERS.values()), key)

  def test_bad_choices_are_refused(self):
    with self.assertRaisesRegex(ValueError, "unknown flavor 'torch'"):
      models.tiny("mlp", flavor="torch")
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'lamb'"):
      models.tiny("mlp", optimizer="lamb")
    with self.assertRaisesRegex(ValueError,
                                "no zoo model 'vgg'; families: gpt, lstm, mlp, wresnet"):
      models.build("vgg")
    with self.assertRaisesRegex(ValueError,
                                "unknown dtype 'float16'; choose one of float32, float64"):
      models.tiny("mlp", dtype="float16")

  def test_tiny_builds_the_tiny_sizes_eagerly(self):
    step = models.tiny("lstm", optimizer="adam", dtype="float64")
    self.assertEqual(step.config, models.TINY["lstm"])
    self.assertIsNone(step.graph)
    self.assertEqual(step.name, "lstm(layers=2,hidden=4,steps=3,batch=2,vocab=7)/tf/adam/float64")

  def test_paper_is_unmaterialized_by_default(self):
    step = models.paper("lstm10")
    self.assertIsNotNone(step.graph)
    self.assertTrue(tf.executing_eagerly())
    self.assertTrue(all(v.handle.graph is step.graph for v in step.variables))
    self.assertEqual(step.config, models.PAPER["lstm10"])


class HelpersTest(absltest.TestCase):

  def test_check_choice_passes_allowed_and_names_the_rest(self):
    self.assertIsNone(common.check_choice("flavor", "keras", common.FLAVORS))
    with self.assertRaisesRegex(ValueError, r"^unknown flavor 'jax'; choose one of tf, keras$"):
      common.check_choice("flavor", "jax", common.FLAVORS)

  def test_check_dtype(self):
    self.assertEqual(common.check_dtype("float64"), "float64")
    self.assertEqual(common.check_dtype("float32"), "float32")
    with self.assertRaisesRegex(ValueError,
                                "unknown dtype 'bfloat16'; choose one of float32, float64"):
      common.check_dtype("bfloat16")

  def test_describe_config(self):
    self.assertEqual(common.describe_config("mlp", dict(depth=2, width=8)), "mlp(depth=2,width=8)")
    self.assertEqual(common.describe_config("x", {}), "x()")

  def test_keras_models_start_from_the_same_weights_every_time(self):
    # Keras 3 seeds a default initializer from Python's random: unseeded, two builds (and
    # two processes) started from different weights, and a float64 comparison of a deep
    # batch-normalised net passed or failed with the draw.
    random.seed(1234)
    after_seeding = random.random()
    random.seed(1234)
    first = models.tiny("wresnet", flavor="keras", optimizer="sgd", dtype="float64")
    self.assertEqual(random.random(), after_seeding)  # the caller's random is untouched
    again = models.tiny("wresnet", flavor="keras", optimizer="sgd", dtype="float64")
    self.assertEqual(len(first.variables), len(again.variables))
    for a, b in zip(first.variables, again.variables):
      np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)
    self.assertTrue(any(np.any(v.numpy() != 0) for v in first.variables))
    with common.seeded_keras_weights(seed=1):
      other = keras.layers.Dense(3)
      other.build((None, 4))
    with common.seeded_keras_weights(seed=1):
      same = keras.layers.Dense(3)
      same.build((None, 4))
    np.testing.assert_array_equal(other.kernel.numpy(), same.kernel.numpy())

  def test_build_scope_materialized_is_eager(self):
    with common.build_scope(True) as graph:
      self.assertIsNone(graph)
      self.assertTrue(tf.executing_eagerly())
    with tf.Graph().as_default():
      with self.assertRaisesRegex(RuntimeError, "materialize=True needs eager execution"):
        with common.build_scope(True):
          pass

  def test_build_scope_unmaterialized_is_a_fresh_graph(self):
    with common.build_scope(False) as g1:
      self.assertIs(tf.compat.v1.get_default_graph(), g1)
      self.assertFalse(tf.executing_eagerly())
      v = common.zeros([3], "z")
    with common.build_scope(False) as g2:
      pass
    self.assertIsInstance(g1, tf.Graph)
    self.assertIsNot(g1, g2)
    self.assertIs(v.handle.graph, g1)
    self.assertTrue(tf.executing_eagerly())

  def test_glorot_shape_bounds_and_name_seed(self):
    v = common.glorot([30, 20], 30, 20, "w")
    self.assertEqual(tuple(v.shape.as_list()), (30, 20))
    self.assertEqual(v.dtype, tf.float32)
    self.assertTrue(v.trainable)
    self.assertEqual(v.name, "w:0")
    values = v.numpy()
    limit = np.sqrt(6.0 / 50.0)
    self.assertLessEqual(np.abs(values).max(), limit + 1e-7)
    self.assertGreater(np.abs(values).max(), 0.9 * limit)
    # uniform(-l, l) has standard deviation l / sqrt(3); 600 draws land close to it
    self.assertAlmostEqual(values.std(), limit / np.sqrt(3), delta=0.15 * limit)
    np.testing.assert_array_equal(common.glorot([30, 20], 30, 20, "w").numpy(), values)
    self.assertFalse(np.array_equal(common.glorot([30, 20], 30, 20, "w2").numpy(), values))

  def test_glorot_float64_is_the_float32_values_cast(self):
    v32 = common.glorot([4, 5], 4, 5, "k")
    v64 = common.glorot([4, 5], 4, 5, "k", "float64")
    self.assertEqual(v64.dtype, tf.float64)
    np.testing.assert_array_equal(v64.numpy(), v32.numpy().astype(np.float64))

  def test_zeros_and_ones(self):
    z = common.zeros([2, 3], "z", trainable=False, dtype="float64")
    o = common.ones([4], "o")
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(o.numpy(), np.ones(4))
    self.assertEqual((z.dtype, z.trainable), (tf.float64, False))
    self.assertEqual((o.dtype, o.trainable), (tf.float32, True))

  def test_sparse_xent_is_the_mean_cross_entropy(self):
    # softmax([0, ln 3]) = [1/4, 3/4]: label 0 costs ln 4, label 1 costs ln(4/3)
    logits = tf.constant([[0.0, np.log(3.0)], [0.0, np.log(3.0)]], tf.float64)
    loss = common.sparse_xent(tf.constant([0, 1]), logits)
    self.assertAlmostEqual(float(loss), (np.log(4.0) + np.log(4.0 / 3.0)) / 2, places=12)
    flat = common.sparse_xent(tf.zeros([2, 3], tf.int32), tf.zeros([2, 3, 5]))
    self.assertAlmostEqual(float(flat), np.log(5.0), places=6)

  def test_tf_variables_unwraps_keras_variables(self):
    import keras
    kv = keras.Variable(np.ones((2,), np.float32), name="k")
    tv = tf.Variable([1.0])
    self.assertNotIsInstance(kv, tf.Variable)
    out = common.tf_variables([kv, tv])
    self.assertLen(out, 2)
    self.assertIsInstance(out[0], tf.Variable)
    self.assertIs(out[0], kv.value)
    self.assertIs(out[1], tv)


class OptimizerTest(absltest.TestCase):

  def test_plain_sgd_dense_and_sparse_updates(self):
    opt = common.PlainSGD()
    v = tf.Variable([1.0, 2.0, 3.0], dtype=tf.float64)
    e = tf.Variable([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], dtype=tf.float64)
    opt.build([v, e])
    self.assertEqual(opt.variables, ())
    sparse = tf.IndexedSlices(tf.constant([[10.0, 20.0]], tf.float64), tf.constant([2]),
                              tf.constant([3, 2]))
    opt.apply([tf.constant([10.0, 20.0, 30.0], tf.float64), sparse], [v, e])
    np.testing.assert_allclose(v.numpy(), [0.9, 1.8, 2.7], rtol=1e-12)
    np.testing.assert_allclose(e.numpy(), [[1.0, 1.0], [2.0, 2.0], [2.9, 2.8]], rtol=1e-12)

  def test_plain_adam_slots(self):
    opt = common.PlainAdam()
    a = tf.Variable(tf.zeros([2, 3], tf.float64), name="layer/kernel")
    b = tf.Variable(tf.zeros([3], tf.float64), name="bias")
    opt.build([a, b])
    self.assertLen(opt.variables, 2 + 2 * 2)
    self.assertAlmostEqual(float(opt.beta1_power), 0.9)
    self.assertAlmostEqual(float(opt.beta2_power), 0.999)
    names = [v.name.split(":")[0] for v in opt.variables]
    self.assertEqual(names, ["adam/beta1_power", "adam/beta2_power", "adam/layer_kernel_m",
                             "adam/layer_kernel_v", "adam/bias_m", "adam/bias_v"])
    self.assertEqual([tuple(v.shape.as_list()) for v in opt.variables],
                     [(), (), (2, 3), (2, 3), (3,), (3,)])
    self.assertTrue(all(v.dtype == tf.float64 and not v.trainable for v in opt.variables))

  def test_plain_adam_two_steps_follow_the_adam_formula(self):
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-7
    opt = common.PlainAdam()
    w = tf.Variable([1.0, -2.0, 0.5], dtype=tf.float64)
    e = tf.Variable([[1.0], [2.0]], dtype=tf.float64)
    opt.build([w, e])
    # per step: w's dense gradient, and the sparse gradient of e's row 1 (Adam densifies it,
    # so row 0 sees g = 0 and stays put)
    grads = [(np.array([0.3, -0.1, 2.0]), 4.0), (np.array([-0.2, 0.5, 1.0]), -1.0)]
    want_w, want_e = np.array([1.0, -2.0, 0.5]), np.array([[1.0], [2.0]])
    m, s = np.zeros(3), np.zeros(3)
    me, se = np.zeros((2, 1)), np.zeros((2, 1))
    for t, (gw, g1) in enumerate(grads, start=1):
      opt.apply([tf.constant(gw, tf.float64),
                 tf.IndexedSlices(tf.constant([[g1]], tf.float64), tf.constant([1]),
                                  tf.constant([2, 1]))], [w, e])
      ge = np.array([[0.0], [g1]])
      lr_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
      m, s = b1 * m + (1 - b1) * gw, b2 * s + (1 - b2) * gw * gw
      want_w = want_w - lr_t * m / (np.sqrt(s) + eps)
      me, se = b1 * me + (1 - b1) * ge, b2 * se + (1 - b2) * ge * ge
      want_e = want_e - lr_t * me / (np.sqrt(se) + eps)
      np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-12)
      np.testing.assert_allclose(e.numpy(), want_e, rtol=1e-12)
    self.assertEqual(e.numpy()[0, 0], 1.0)
    self.assertAlmostEqual(float(opt.beta1_power), b1**3, places=12)
    self.assertAlmostEqual(float(opt.beta2_power), b2**3, places=12)

  def test_optimizer_factories(self):
    import keras
    sgd, adam = common.plain_optimizer("sgd"), common.plain_optimizer("adam")
    self.assertIsInstance(sgd, common.PlainSGD)
    self.assertEqual(sgd.learning_rate, 0.01)
    self.assertIsInstance(adam, common.PlainAdam)
    self.assertEqual((adam.learning_rate, adam.beta1, adam.beta2, adam.epsilon),
                     (1e-3, 0.9, 0.999, 1e-7))
    ksgd, kadam = common.keras_optimizer("sgd"), common.keras_optimizer("adam")
    self.assertIsInstance(ksgd, keras.optimizers.SGD)
    self.assertIsInstance(kadam, keras.optimizers.Adam)
    self.assertAlmostEqual(float(ksgd.learning_rate), 0.01, places=6)
    self.assertAlmostEqual(float(kadam.learning_rate), 1e-3, places=6)
    for factory in (common.plain_optimizer, common.keras_optimizer):
      with self.assertRaisesRegex(ValueError,
                                  "unknown optimizer 'rmsprop'; choose one of sgd, adam"):
        factory("rmsprop")


class TrainStepTest(absltest.TestCase):

  def _toy(self, optimizer="sgd", dtype="float32"):
    w = tf.Variable([3.0, -1.0], dtype=dtype, name="w")
    config = dict(n=2)

    def loss_fn(x):
      return tf.reduce_sum(tf.square(w * x))

    step = common.make_step("toy(n=2)", config, [tf.TensorSpec([2], dtype, name="x")],
                            [(-1.0, 1.0)], loss_fn, [w], optimizer, "tf", None, dtype)
    return step, w, config

  def test_make_step_runs_loss_then_sgd(self):
    step, w, config = self._toy()
    self.assertEqual(step.name, "toy(n=2)/tf/sgd")
    self.assertEqual(step.config, config)
    self.assertIsNot(step.config, config)
    self.assertEqual(step.optimizer_variables, ())
    self.assertEqual(step.variables, (w,))
    self.assertEqual(step.input_ranges, ((-1.0, 1.0),))
    # loss = 9 x0^2 + x1^2 = 10 at x = (1, 1); grad = 2 w x^2 = (6, -2); w -= 0.01 grad
    loss = step.fn(np.ones(2, np.float32))
    self.assertAlmostEqual(float(loss), 10.0, places=5)
    np.testing.assert_allclose(w.numpy(), [2.94, -0.98], rtol=1e-6)

  def test_make_step_float64_suffix_and_adam_state(self):
    step, w, _ = self._toy(optimizer="adam", dtype="float64")
    self.assertEqual(step.name, "toy(n=2)/tf/adam/float64")
    self.assertLen(step.optimizer_variables, 2 + 2)
    self.assertTrue(all(v.dtype == tf.float64 for v in step.optimizer_variables))
    self.assertEqual(step.input_signature[0].dtype, tf.float64)
    step.fn(np.ones(2))
    # Adam's first step moves each weight by ~lr against its gradient's sign
    np.testing.assert_allclose(w.numpy(), [3.0 - 1e-3, -1.0 + 1e-3], rtol=1e-6)

  def test_context_of_eager_and_graph_steps(self):
    eager = models.tiny("mlp")
    self.assertIsNone(eager.graph)
    with eager.context():
      self.assertTrue(tf.executing_eagerly())
    lazy = models.tiny("mlp", materialize=False)
    self.assertIsInstance(lazy.graph, tf.Graph)
    with lazy.context():
      self.assertIs(tf.compat.v1.get_default_graph(), lazy.graph)
      self.assertFalse(tf.executing_eagerly())
    self.assertTrue(tf.executing_eagerly())

  def test_example_inputs_follow_ranges_and_seed(self):
    step = models.tiny("mlp")  # x: (4, 6) in [-1, 1); y: (4,) classes in [0, 5)
    x, y = step.example_inputs(seed=7)
    self.assertEqual((x.shape, x.dtype), ((4, 6), np.float32))
    self.assertEqual((y.shape, y.dtype), ((4,), np.int32))
    self.assertTrue((x >= -1).all() and (x < 1).all())
    self.assertTrue((y >= 0).all() and (y < 5).all())
    x2, y2 = step.example_inputs(seed=7)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    self.assertFalse(np.array_equal(x, step.example_inputs(seed=8)[0]))

  def test_example_inputs_match_signature(self):
    step = models.tiny("gpt")
    ids, targets = step.example_inputs()
    self.assertEqual(ids.shape, (2, 4))
    self.assertEqual(ids.dtype, np.int32)
    self.assertTrue((0 <= targets).all() and (targets < 11).all())

  def test_weight_bytes(self):
    # tiny mlp: 6*8 + 8 + 8*8 + 8 + 8*5 + 5 = 173 weights
    self.assertEqual(models.tiny("mlp").weight_bytes(), 173 * 4)
    self.assertEqual(models.tiny("mlp", dtype="float64").weight_bytes(), 173 * 8)
    self.assertEqual(models.tiny("mlp", materialize=False).weight_bytes(), 173 * 4)


if __name__ == "__main__":
  absltest.main()
