"""Tests for tf_tofu.models.gpt: shapes, tying, the documented forward, causality, float64."""

import resource

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tf_tofu import models
from tf_tofu.models import gpt

TINY = dict(layers=1, d_model=8, heads=2, seq=4, vocab=11, batch=2)
CASES = (("tf_tied", "tf", True), ("tf_untied", "tf", False), ("keras_tied", "keras", True),
         ("keras_untied", "keras", False))


def _shapes(step):
  return [tuple(v.shape.as_list()) for v in step.variables]


def _params(layers, d, seq, vocab, tied):
  """V*d + S*d embeddings; per block 2d + (3d^2 + 3d) + (d^2 + d) + 2d + (4d^2 + 4d) + (4d^2 + d)
  = 12d^2 + 13d; 2d for ln_f; d*V more when untied."""
  return vocab * d + seq * d + layers * (12 * d * d + 13 * d) + 2 * d + (0 if tied else d * vocab)


def _layer_norm(x, g, b):
  mean = x.mean(axis=-1, keepdims=True)
  var = ((x - mean)**2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-5) * g + b


def _gelu_tanh(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _reference_loss(w, ids, targets, heads, tied):
  """The module docstring's forward in numpy (q, k, v = the qkv columns' thirds, heads
  contiguous within each)."""
  b_, s_ = ids.shape
  d = w["tok_embedding"].shape[1]
  dh = d // heads
  x = w["tok_embedding"][ids] + w["pos_embedding"]
  mask = np.triu(np.ones((s_, s_), bool), k=1)
  l = 0
  while f"block_{l}/ln_1/gamma" in w:
    p = lambda n: w[f"block_{l}/{n}"]  # noqa: E731
    a = _layer_norm(x, p("ln_1/gamma"), p("ln_1/beta"))
    qkv = a @ p("attn/qkv/kernel") + p("attn/qkv/bias")
    q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(b_, s_, heads, dh).transpose(0, 2, 1, 3)
               for i in range(3))
    scores = np.where(mask, -np.inf, q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh))
    att = np.exp(scores - scores.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    o = (att @ v).transpose(0, 2, 1, 3).reshape(b_, s_, d)
    x = x + o @ p("attn/proj/kernel") + p("attn/proj/bias")
    m = _gelu_tanh(_layer_norm(x, p("ln_2/gamma"), p("ln_2/beta")) @ p("mlp/fc1/kernel")
                   + p("mlp/fc1/bias"))
    x = x + m @ p("mlp/fc2/kernel") + p("mlp/fc2/bias")
    l += 1
  x = _layer_norm(x, w["ln_f/gamma"], w["ln_f/beta"])
  logits = x @ (w["tok_embedding"].T if tied else w["lm_head/kernel"])
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return -np.take_along_axis(logp, targets[..., None], -1).mean()


class GptBuildTest(parameterized.TestCase):

  def test_gpt_tied_has_no_output_weight(self):
    tied = models.tiny("gpt")
    untied = models.tiny("gpt_untied")
    self.assertLen(untied.variables, len(tied.variables) + 1)
    self.assertIn("lm_head/kernel", [v.name.split(":")[0] for v in untied.variables])

  def test_tf_variable_shapes(self):
    step = gpt.build(**TINY, tied=False)
    shapes = {v.name.split(":")[0]: tuple(v.shape.as_list()) for v in step.variables}
    self.assertEqual(shapes, {
        "tok_embedding": (11, 8), "pos_embedding": (4, 8),
        "block_0/ln_1/gamma": (8,), "block_0/ln_1/beta": (8,),
        "block_0/attn/qkv/kernel": (8, 24), "block_0/attn/qkv/bias": (24,),
        "block_0/attn/proj/kernel": (8, 8), "block_0/attn/proj/bias": (8,),
        "block_0/ln_2/gamma": (8,), "block_0/ln_2/beta": (8,),
        "block_0/mlp/fc1/kernel": (8, 32), "block_0/mlp/fc1/bias": (32,),
        "block_0/mlp/fc2/kernel": (32, 8), "block_0/mlp/fc2/bias": (8,),
        "ln_f/gamma": (8,), "ln_f/beta": (8,), "lm_head/kernel": (8, 11)})
    self.assertLen(step.variables, 17)
    self.assertEqual(step.variables[0].name, "tok_embedding:0")
    self.assertEqual(step.variables[-1].name, "lm_head/kernel:0")
    values = {v.name.split(":")[0]: v.numpy() for v in step.variables}
    np.testing.assert_array_equal(values["block_0/ln_1/gamma"], np.ones(8))
    np.testing.assert_array_equal(values["block_0/ln_1/beta"], np.zeros(8))

  @parameterized.named_parameters(*CASES)
  def test_parameter_count(self, flavor, tied):
    step = gpt.build(layers=2, d_model=4, heads=2, seq=3, vocab=5, batch=1, tied=tied,
                     flavor=flavor)
    # 5*4 + 3*4 + 2 * (12*16 + 13*4) + 2*4 = 528, plus 4*5 untied
    self.assertEqual(_params(2, 4, 3, 5, tied), 528 if tied else 548)
    self.assertEqual(sum(int(np.prod(s)) for s in _shapes(step)), 528 if tied else 548)
    # last built: ln_f's beta when tied, else the (d, V) output projection
    self.assertEqual(_shapes(step)[-1], (4,) if tied else (4, 5))

  def test_signature_ranges_and_name(self):
    step = gpt.build(**TINY)
    ids, targets = step.input_signature
    self.assertEqual((ids.shape.as_list(), ids.dtype, ids.name), ([2, 4], tf.int32, "ids"))
    self.assertEqual((targets.shape.as_list(), targets.dtype), ([2, 4], tf.int32))
    self.assertEqual(step.input_ranges, ((0, 11), (0, 11)))
    self.assertEqual(step.name,
                     "gpt(layers=1,d_model=8,heads=2,seq=4,vocab=11,batch=2,tied=True)/tf/sgd")

  def test_causal_bias(self):
    bias = gpt._causal_bias(3, "float64")
    self.assertEqual(bias.dtype, np.float64)
    np.testing.assert_array_equal(bias, [[0, -1e9, -1e9], [0, 0, -1e9], [0, 0, 0]])

  def test_layer_norm(self):
    x = tf.constant([[1.0, 2.0, 3.0], [-4.0, 0.0, 4.0]], tf.float64)
    gamma = tf.constant([1.0, 2.0, 1.0], tf.float64)
    beta = tf.constant([0.0, 0.0, 5.0], tf.float64)
    # rows: mean 2, var 2/3; mean 0, var 32/3
    want = np.array([[-1.0, 0.0, 1.0], [-4.0, 0.0, 4.0]]) / np.sqrt(
        np.array([[2 / 3], [32 / 3]]) + gpt.LN_EPSILON)
    want = want * [1.0, 2.0, 1.0] + [0.0, 0.0, 5.0]
    np.testing.assert_allclose(gpt._layer_norm(x, gamma, beta).numpy(), want, rtol=1e-12)

  @parameterized.named_parameters(("tf", "tf"), ("keras", "keras"))
  def test_attention_is_causal(self, flavor):
    if flavor == "tf":
      net = gpt._PlainGPT(1, 8, 2, 4, 11, True, "float32")
    else:
      net = gpt._keras_gpt(1, 8, 2, 4, 11, True, 2, "float32")
    ids = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int32)
    later = ids.copy()
    later[:, 3] = [9, 10]
    a = np.reshape(net(tf.constant(ids)), (2, 4, 11))
    b = np.reshape(net(tf.constant(later)), (2, 4, 11))
    np.testing.assert_array_equal(a[:, :3], b[:, :3])  # earlier positions never see token 3
    self.assertGreater(np.abs(a[:, 3] - b[:, 3]).min(), 0.0)

  @parameterized.named_parameters(("tied", True), ("untied", False))
  def test_loss_is_the_documented_forward(self, tied):
    step = gpt.build(layers=2, d_model=8, heads=2, seq=4, vocab=11, batch=2, tied=tied,
                     dtype="float64")
    w = {v.name.split(":")[0]: v.numpy() for v in step.variables}
    ids, targets = step.example_inputs(seed=2)
    want = _reference_loss(w, ids, targets, heads=2, tied=tied)
    loss = step.fn(ids, targets)
    self.assertEqual(loss.dtype, tf.float64)
    self.assertAlmostEqual(float(loss), want, places=10)

  @parameterized.named_parameters(("tf", "tf"), ("keras", "keras"))
  def test_float64_builds_float64(self, flavor):
    step = gpt.build(**TINY, flavor=flavor, optimizer="adam", dtype="float64")
    self.assertTrue(step.name.endswith(f"/{flavor}/adam/float64"))
    self.assertEqual({v.dtype for v in step.variables}, {tf.float64})
    slots = [v for v in step.optimizer_variables if v.shape.rank]
    self.assertLen(slots, 2 * len(step.variables))
    self.assertEqual({v.dtype for v in slots}, {tf.float64})
    self.assertEqual(step.weight_bytes(), 8 * _params(1, 8, 4, 11, True))

  def test_paper_gpt_unmaterialized_allocates_nothing(self):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    step = models.paper("gpt")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    # 50257*2048 + 1024*2048 + 24 * (12*2048^2 + 13*2048) + 2*2048 = 1,313,626,112 weights
    self.assertEqual(_params(24, 2048, 1024, 50257, True), 1_313_626_112)
    self.assertEqual(step.weight_bytes(), 4 * 1_313_626_112)
    self.assertLess(grown, 2**29)  # 4.9 GiB if it were real
    self.assertLen(step.variables, 2 + 24 * 12 + 2)
    self.assertTrue(all(v.handle.graph is step.graph for v in step.variables))
    shapes = dict(zip([v.name.split(":")[0] for v in step.variables], _shapes(step)))
    self.assertEqual(shapes["block_23/mlp/fc1/kernel"], (2048, 8192))
    self.assertEqual(shapes["tok_embedding"], (50257, 2048))

  def test_bad_arguments_are_refused(self):
    with self.assertRaisesRegex(ValueError, "d_model 10 is not a multiple of heads 3"):
      gpt.build(layers=1, d_model=10, heads=3)
    with self.assertRaisesRegex(ValueError, "unknown flavor 'flax'; choose one of tf, keras"):
      gpt.build(**TINY, flavor="flax")
    with self.assertRaisesRegex(ValueError, "unknown dtype 'int32'"):
      gpt.build(**TINY, dtype="int32")
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'lion'"):
      gpt.build(**TINY, optimizer="lion")


if __name__ == "__main__":
  absltest.main()
