"""A GPT-style decoder-only Transformer language model (pre-layer-norm).

    x = E_tok[ids] + E_pos[0:S]                                   (batch, seq, d)
    per layer:  x = x + W_o attn(ln_1(x))      attn: causal softmax(q k^T / sqrt(d_h)) v, per head
                x = x + W_2 gelu(W_1 ln_2(x))  (d -> 4d -> d)
    logits = ln_f(x) E_tok^T   (tied)   or   ln_f(x) W_out  (untied)
    loss = mean_{b,s} xent(logits[b, s], targets[b, s])
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tf_tofu.models import common

LN_EPSILON = 1e-5


def _layer_norm(x, gamma, beta):
  mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
  return (x - mean) * tf.math.rsqrt(var + LN_EPSILON) * gamma + beta


def _causal_bias(seq: int, dtype: str) -> np.ndarray:
  """0 where key <= query, -1e9 above the diagonal (added to the attention scores)."""
  return np.triu(np.full((seq, seq), -1e9, dtype), k=1)


class _PlainGPT:

  def __init__(self, layers, d_model, heads, seq, vocab, tied, dtype):
    d = d_model
    self.heads, self.d, self.seq, self.tied, self.dtype = heads, d, seq, tied, dtype

    def glorot(shape, fan_in, fan_out, name):
      return common.glorot(shape, fan_in, fan_out, name, dtype)

    def ones(shape, name):
      return common.ones(shape, name, dtype=dtype)

    def zeros(shape, name):
      return common.zeros(shape, name, dtype=dtype)

    self.tok = glorot([vocab, d], vocab, d, "tok_embedding")
    self.pos = glorot([seq, d], seq, d, "pos_embedding")
    self.blocks = []
    for l in range(layers):
      n = f"block_{l}"
      self.blocks.append(dict(
          ln1_g=ones([d], f"{n}/ln_1/gamma"), ln1_b=zeros([d], f"{n}/ln_1/beta"),
          qkv=glorot([d, 3 * d], d, 3 * d, f"{n}/attn/qkv/kernel"),
          qkv_b=zeros([3 * d], f"{n}/attn/qkv/bias"),
          proj=glorot([d, d], d, d, f"{n}/attn/proj/kernel"),
          proj_b=zeros([d], f"{n}/attn/proj/bias"),
          ln2_g=ones([d], f"{n}/ln_2/gamma"), ln2_b=zeros([d], f"{n}/ln_2/beta"),
          fc1=glorot([d, 4 * d], d, 4 * d, f"{n}/mlp/fc1/kernel"),
          fc1_b=zeros([4 * d], f"{n}/mlp/fc1/bias"),
          fc2=glorot([4 * d, d], 4 * d, d, f"{n}/mlp/fc2/kernel"),
          fc2_b=zeros([d], f"{n}/mlp/fc2/bias")))
    self.lnf_g, self.lnf_b = ones([d], "ln_f/gamma"), zeros([d], "ln_f/beta")
    self.variables = [self.tok, self.pos] + [v for b in self.blocks for v in b.values()]
    self.variables += [self.lnf_g, self.lnf_b]
    if not tied:
      self.out = glorot([d, vocab], d, vocab, "lm_head/kernel")
      self.variables.append(self.out)

  def __call__(self, ids):
    b_, s_, d, h = ids.shape[0], self.seq, self.d, self.heads
    dh = d // h
    x = tf.gather(self.tok, ids) + self.pos
    bias = tf.constant(_causal_bias(s_, self.dtype))
    for l, p in enumerate(self.blocks):
      with tf.name_scope(f"block_{l}"):
        with tf.name_scope("attn"):
          a = _layer_norm(x, p["ln1_g"], p["ln1_b"])
          qkv = tf.reshape(tf.matmul(tf.reshape(a, [b_ * s_, d]), p["qkv"]) + p["qkv_b"],
                           [b_, s_, 3, h, dh])
          q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))  # (b, h, s, dh) each
          scores = tf.matmul(q, k, transpose_b=True) * (1.0 / float(np.sqrt(dh))) + bias
          att = tf.matmul(tf.nn.softmax(scores, axis=-1), v)          # (b, h, s, dh)
          att = tf.reshape(tf.transpose(att, [0, 2, 1, 3]), [b_ * s_, d])
          x = x + tf.reshape(tf.matmul(att, p["proj"]) + p["proj_b"], [b_, s_, d])
        with tf.name_scope("mlp"):
          m = tf.reshape(_layer_norm(x, p["ln2_g"], p["ln2_b"]), [b_ * s_, d])
          m = tf.nn.gelu(tf.matmul(m, p["fc1"]) + p["fc1_b"], approximate=True)
          x = x + tf.reshape(tf.matmul(m, p["fc2"]) + p["fc2_b"], [b_, s_, d])
    with tf.name_scope("lm_head"):
      x = tf.reshape(_layer_norm(x, self.lnf_g, self.lnf_b), [b_ * s_, d])
      if self.tied:
        return tf.matmul(x, self.tok, transpose_b=True)
      return tf.matmul(x, self.out)


def _keras_gpt(layers, d_model, heads, seq, vocab, tied, batch, dtype):
  import keras
  from keras import layers as kl

  class Decoder(keras.Model):

    def __init__(self):
      super().__init__(name="gpt", dtype=dtype)
      self.tok = kl.Embedding(vocab, d_model, name="tok_embedding", dtype=dtype)
      self.pos = kl.Embedding(seq, d_model, name="pos_embedding", dtype=dtype)
      self.blocks = []
      for l in range(layers):
        self.blocks.append(dict(
            ln1=kl.LayerNormalization(epsilon=LN_EPSILON, name=f"block_{l}_ln_1", dtype=dtype),
            attn=kl.MultiHeadAttention(heads, d_model // heads, name=f"block_{l}_attn",
                                       dtype=dtype),
            ln2=kl.LayerNormalization(epsilon=LN_EPSILON, name=f"block_{l}_ln_2", dtype=dtype),
            fc1=kl.Dense(4 * d_model, activation="gelu", name=f"block_{l}_fc1", dtype=dtype),
            fc2=kl.Dense(d_model, name=f"block_{l}_fc2", dtype=dtype)))
      self.ln_f = kl.LayerNormalization(epsilon=LN_EPSILON, name="ln_f", dtype=dtype)
      self.head = (None if tied else
                   kl.Dense(vocab, use_bias=False, name="lm_head", dtype=dtype))

    def call(self, ids, training=False):
      x = self.tok(ids) + self.pos(keras.ops.arange(seq))
      for p in self.blocks:
        a = p["ln1"](x)
        x = x + p["attn"](a, a, use_causal_mask=True, training=training)
        x = x + p["fc2"](p["fc1"](p["ln2"](x)))
      x = self.ln_f(x)
      if self.head is None:
        return keras.ops.matmul(x, keras.ops.transpose(self.tok.embeddings))
      return self.head(x)

  model = Decoder()
  model(keras.ops.zeros((batch, seq), dtype="int32"))
  return model


def build(layers: int = 2, d_model: int = 8, heads: int = 2, seq: int = 4, vocab: int = 16,
          batch: int = 2, tied: bool = True, *, flavor: str = "tf", optimizer: str = "sgd",
          materialize: bool = True, dtype: str = "float32") -> common.TrainStep:
  """The GPT training step.

  Args:
    layers: decoder blocks.
    d_model: model width (a multiple of ``heads``).
    heads: attention heads.
    seq: sequence length.
    vocab: vocabulary size.
    batch: sequences per step.
    tied: output projection tied to the token embedding (else its own weight).
    flavor: ``"tf"`` or ``"keras"`` (Embedding, MultiHeadAttention, LayerNormalization, Dense).
    optimizer: ``"sgd"`` or ``"adam"``.
    materialize: False builds in a never-run graph (no weight memory).
    dtype: ``"float32"`` or ``"float64"`` (weights, activations, optimizer state).
  """
  common.check_choice("flavor", flavor, common.FLAVORS)
  dtype = common.check_dtype(dtype)
  if d_model % heads:
    raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
  config = dict(layers=layers, d_model=d_model, heads=heads, seq=seq, vocab=vocab, batch=batch,
                tied=tied)
  signature = (tf.TensorSpec([batch, seq], tf.int32, name="ids"),
               tf.TensorSpec([batch, seq], tf.int32, name="targets"))
  with common.build_scope(materialize) as graph:
    if flavor == "tf":
      net = _PlainGPT(layers, d_model, heads, seq, vocab, tied, dtype)
      variables = net.variables

      def loss_fn(ids, targets):
        return common.sparse_xent(tf.reshape(targets, [-1]), net(ids))
    else:
      model = _keras_gpt(layers, d_model, heads, seq, vocab, tied, batch, dtype)
      variables = list(model.trainable_variables)

      def loss_fn(ids, targets):
        return common.sparse_xent(targets, model(ids, training=True))

    return common.make_step(common.describe_config("gpt", config), config, signature,
                            [(0, vocab), (0, vocab)], loss_fn, variables, optimizer, flavor,
                            graph, dtype)
