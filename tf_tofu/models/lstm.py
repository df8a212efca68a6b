"""A stacked LSTM language model unrolled over T steps (no loop op in the graph).

    x_t = E[ids_t]                                     (batch, hidden)
    per layer l, step t:  [i, f, g, o] = split([x_t, h_{t-1}] W_l + b_l, 4)
                          c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g)
                          h_t = sigmoid(o) tanh(c_t)
    logits_t = h_t W_out + b_out;   loss = mean_{b,t} xent(logits_t, target_t)

The embedding width equals the hidden size H.  Every step reuses the same
weights, so each weight's gradient is the sum (AddN) of T contributions.
"""

from __future__ import annotations

import tensorflow as tf

from tf_tofu.models import common


def build(layers: int = 2, hidden: int = 8, steps: int = 20, batch: int = 4, vocab: int = 16,
          *, flavor: str = "tf", optimizer: str = "sgd",
          materialize: bool = True, dtype: str = "float32") -> common.TrainStep:
  """The LSTM language-model training step.

  Args:
    layers: stacked LSTM layers L.
    hidden: hidden (and embedding) size H.
    steps: unrolled time steps T (20 in the paper).
    batch: sequences per step.
    vocab: vocabulary size.
    flavor: ``"tf"`` (one fused [x, h] matmul per cell) or ``"keras"``
      (``keras.layers.LSTM(unroll=True)``).
    optimizer: ``"sgd"`` or ``"adam"``.
    materialize: False builds in a never-run graph (no weight memory).
    dtype: ``"float32"`` or ``"float64"`` (weights, activations, optimizer state).
  """
  common.check_choice("flavor", flavor, common.FLAVORS)
  dtype = common.check_dtype(dtype)
  config = dict(layers=layers, hidden=hidden, steps=steps, batch=batch, vocab=vocab)
  signature = (tf.TensorSpec([batch, steps], tf.int32, name="ids"),
               tf.TensorSpec([batch, steps], tf.int32, name="targets"))
  h_ = hidden
  with common.build_scope(materialize) as graph:
    if flavor == "tf":
      emb = common.glorot([vocab, h_], vocab, h_, "embedding", dtype)
      cells = []
      for l in range(layers):
        cells.append((common.glorot([2 * h_, 4 * h_], 2 * h_, 4 * h_, f"lstm_{l}/kernel",
                                    dtype),
                      common.zeros([4 * h_], f"lstm_{l}/bias", dtype=dtype)))
      w_out = common.glorot([h_, vocab], h_, vocab, "softmax/kernel", dtype)
      b_out = common.zeros([vocab], "softmax/bias", dtype=dtype)
      variables = [emb] + [v for c in cells for v in c] + [w_out, b_out]

      def loss_fn(ids, targets):
        xs = tf.unstack(tf.gather(emb, ids), axis=1)
        for l, (w, b) in enumerate(cells):
          with tf.name_scope(f"lstm_{l}"):
            h = tf.zeros([batch, h_], dtype)
            c = tf.zeros([batch, h_], dtype)
            outs = []
            for t, x in enumerate(xs):
              with tf.name_scope(f"t{t}"):
                z = tf.nn.bias_add(tf.matmul(tf.concat([x, h], axis=1), w), b)
                i, f, g, o = tf.split(z, 4, axis=1)
                c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
                h = tf.sigmoid(o) * tf.tanh(c)
                outs.append(h)
            xs = outs
        with tf.name_scope("softmax"):
          logits = tf.nn.bias_add(tf.matmul(tf.concat(xs, axis=0), w_out), b_out)
          labels = tf.reshape(tf.transpose(targets), [-1])
          return common.sparse_xent(labels, logits)
    else:
      import keras
      model = keras.Sequential(
          [keras.layers.Embedding(vocab, h_, dtype=dtype)]
          + [keras.layers.LSTM(h_, return_sequences=True, unroll=True, dtype=dtype)
             for _ in range(layers)]
          + [keras.layers.Dense(vocab, dtype=dtype)], name="lstm_lm")
      model.build((batch, steps))
      variables = list(model.trainable_variables)

      def loss_fn(ids, targets):
        return common.sparse_xent(targets, model(ids, training=True))

    return common.make_step(common.describe_config("lstm", config), config, signature,
                            [(0, vocab), (0, vocab)], loss_fn, variables, optimizer, flavor,
                            graph, dtype)
