"""Tests for tf_tofu.cli.rewrite: SavedModel and GraphDef outputs that run."""

import os

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tests.cli.clitest import K, CommandCase, tofu, tofu_here
from tf_tofu.rewrite import export


class RewriteCommandTest(CommandCase):
  """tofu rewrite end to end."""

  def test_rewrite_to_a_saved_model_that_trains_on_the_devices(self):
    out = self.out("partitioned")
    board = self.out("board")
    self.ok(tofu("rewrite", f"--saved_model={self.saved}", "--signature=train",
                 f"--devices={K}", "--comm=collective", f"--output={out}",
                 f"--tensorboard={board}"))
    self.assertTrue(os.listdir(board))
    tf.config.set_soft_device_placement(True)  # TF re-applies saved devices only with it on
    try:
      loaded = tf.saved_model.load(out, options=export.LOAD_OPTIONS)
    finally:
      tf.config.set_soft_device_placement(False)
    # The signature key, the output names and the variable names of the input are kept.
    self.assertEqual(list(loaded.signatures), ["train"])
    sig = loaded.signatures["train"]
    ref = tf.saved_model.load(self.saved).signatures["train"]
    self.assertEqual(sorted(sig.structured_outputs), sorted(ref.structured_outputs))
    kernel = loaded.shards["dense_0/kernel"]
    self.assertLen(kernel, K)
    self.assertEqual([v.name for v in kernel],
                     [f"dense_0/kernel/tofu_shard_{d}:0" for d in range(K)])
    self.assertEqual(sorted({v.device[-5:] for v in kernel}), [f"CPU:{d}" for d in range(K)])
    x, y = self.step.example_inputs(seed=3)
    first = sig(x=tf.constant(x), y=tf.constant(y))
    second = sig(x=tf.constant(x), y=tf.constant(y))
    (name,) = first
    # The reference: the saved step's own signature, on a fresh load of the input.
    ref = tf.saved_model.load(self.saved).signatures["train"]
    want = [float(ref(x=tf.constant(x), y=tf.constant(y))[name]) for _ in range(2)]
    np.testing.assert_allclose([float(first[name]), float(second[name])], want, rtol=1e-5)

  def test_a_graph_def_file_with_feeds(self):
    g = tf.Graph()
    with g.as_default():
      x = tf.compat.v1.placeholder(tf.float32, (None, 6), name="x")
      w = tf.compat.v1.placeholder(tf.float32, (6, 4), name="w")
      y = tf.nn.relu(tf.matmul(x, w))
      tf.reduce_sum(y * y, name="loss")
    path = self.out("model.pbtxt")
    tf.io.write_graph(g.as_graph_def(), os.path.dirname(path), "model.pbtxt", as_text=True)
    common = [f"--graph={path}", "--feeds=x=8x6,w=6x4", "--fetches=loss", "--devices=4"]
    self.assertIn("tf_tofu plan (tofu) for 4 devices", self.ok(tofu("plan", *common)))
    out = self.out("partitioned")
    self.ok(tofu("rewrite", *common, "--planner=allrow", f"--output={out}"))
    sig = tf.saved_model.load(out).signatures["serving_default"]
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((8, 6), np.float32), rng.standard_normal((6, 4), np.float32)
    got = float(sig(x=tf.constant(xv), w=tf.constant(wv))["loss"])
    want = float(np.sum(np.maximum(xv @ wv, 0) ** 2))
    self.assertAlmostEqual(got, want, delta=1e-4 * abs(want))
    pb = self.out("partitioned.pb")
    self.ok(tofu("rewrite", *common, f"--output={pb}"))
    self.assertTrue(os.path.exists(pb + ".partition.json"))
    unshaped = tofu_here("plan", f"--graph={path}", "--fetches=loss", "--devices=4")
    self.assertEqual(unshaped.returncode, 1)
    self.assertIn("x", unshaped.stderr)


if __name__ == "__main__":
  absltest.main()
