"""Tests for tf_tofu.cli.inputs: inputs never overwritten, outputs never clobbered, bad input."""

import os

import tensorflow as tf
from absl.testing import absltest

from tests.cli.clitest import CommandCase, tofu_here as tofu


class OutputSafetyTest(absltest.TestCase):
  """check_output, in process."""

  def setUp(self):
    super().setUp()
    import tempfile
    from absl import flags
    from absl.testing import flagsaver
    from tf_tofu.cli import inputs as cli_inputs
    self.cli_inputs = cli_inputs
    if not flags.FLAGS.is_parsed():
      flags.FLAGS.mark_as_parsed()
    self.dir = tempfile.mkdtemp(prefix="tofu_out_test_")
    self.model = os.path.join(self.dir, "models", "step")
    os.makedirs(self.model)
    open(os.path.join(self.model, "saved_model.pb"), "wb").close()
    saver = flagsaver.flagsaver(saved_model=self.model, graph=None, overwrite=False)
    saver.__enter__()
    self.addCleanup(saver.__exit__, None, None, None)

  def refused(self, path, pattern, **kw):
    with self.assertRaisesRegex(self.cli_inputs.UsageError, pattern):
      self.cli_inputs.check_output(path, "--output", **kw)

  def test_inputs_are_never_targets(self):
    self.refused(self.model, "would overwrite the input", directory=True)
    self.refused(os.path.join(self.model, "x.pb"), "would overwrite the input")
    self.refused(os.path.dirname(self.model), "contains the input", directory=True)
    self.refused(self.dir, "contains the input", directory=True)
    cwd = os.getcwd()
    os.chdir(self.dir)
    try:
      self.refused(".", "contains the input", directory=True)
    finally:
      os.chdir(cwd)
    self.assertTrue(os.path.exists(os.path.join(self.model, "saved_model.pb")))

  def test_existing_outputs_need_overwrite_and_must_be_ours(self):
    from absl.testing import flagsaver
    theirs = os.path.join(self.dir, "theirs")
    os.makedirs(theirs)
    self.refused(theirs, "exists; pass --overwrite", directory=True)
    with flagsaver.flagsaver(overwrite=True):
      self.refused(theirs, "tofu did not write", directory=True)
    ours = os.path.join(self.dir, "ours")
    self.cli_inputs.write_atomically(ours, lambda tmp: os.makedirs(tmp), directory=True)
    self.refused(ours, "exists; pass --overwrite", directory=True)
    with flagsaver.flagsaver(overwrite=True):
      self.assertEqual(self.cli_inputs.check_output(ours, "--output", directory=True),
                       os.path.realpath(ours))
    self.refused(ours, "is a directory; give a path for a file")
    plan = os.path.join(self.dir, "plan.json")
    open(plan, "w").close()
    self.refused(plan, "exists; pass --overwrite")
    self.refused(plan, "is a file", directory=True)
    with flagsaver.flagsaver(overwrite=True):
      self.cli_inputs.check_output(plan, "--output")
    board = os.path.join(self.dir, "board")
    os.makedirs(board)
    self.cli_inputs.check_output(board, "--tensorboard", directory=True, log_dir=True)
    self.refused(self.model, "would overwrite the input", directory=True, log_dir=True)

  def test_unwritable_parent(self):
    locked = os.path.join(self.dir, "locked")
    os.makedirs(locked)
    os.chmod(locked, 0o500)
    self.addCleanup(os.chmod, locked, 0o700)
    if os.access(locked, os.W_OK):
      self.skipTest("running as a user who can write anywhere (root)")
    self.refused(os.path.join(locked, "out.pb"), "cannot write in")

  def test_feeds_without_a_shape_keep_the_placeholder_shape(self):
    self.assertEqual(self.cli_inputs.parse_feeds(["x=8x6", "k=", "y"]),
                     {"x": (8, 6), "k": (), "y": None})
    g = tf.Graph()
    with g.as_default():
      x = tf.compat.v1.placeholder(tf.float32, (8, 6), name="x")
      tf.reduce_sum(tf.nn.relu(x), name="loss")
    from tf_tofu.graph import TofuGraph
    graph = TofuGraph.from_graph_def(g.as_graph_def(), feeds={"x": None}, fetches=["loss"])
    self.assertEqual(graph.tensors["x:0"].shape, (8, 6))


class BadInputTest(CommandCase):
  """Missing, unreadable and clashing inputs and flags, as a user meets them (each command
  through the command's entry point in this process; tests/cli/test_cli.py runs it as a
  process)."""

  def test_bad_input(self):
    missing = tofu("plan", "--graph=/nonexistent/step.pb", "--fetches=loss")
    self.assertEqual(missing.returncode, 2)
    self.assertIn("no such file", missing.stderr)
    junk = self.out("junk.pb")
    with open(junk, "wb") as f:
      f.write(b"\xff\x00 this is not a graph")
    bad = tofu("plan", f"--graph={junk}", "--fetches=loss")
    self.assertEqual(bad.returncode, 1)
    self.assertIn("is not a GraphDef", bad.stderr)
    sig = tofu("plan", f"--saved_model={self.saved}", "--signature=nope")
    self.assertEqual(sig.returncode, 1)
    self.assertIn("has no signature 'nope'", sig.stderr)
    self.assertIn("train", sig.stderr)
    same = tofu("rewrite", f"--saved_model={self.saved}", "--signature=train",
                f"--output={self.saved}")
    self.assertEqual(same.returncode, 2)
    self.assertIn("would overwrite the input", same.stderr)
    inside = tofu("plan", f"--saved_model={self.saved}", "--signature=train",
                  f"--plan_out={os.path.join(self.saved, 'plan.json')}")
    self.assertEqual(inside.returncode, 2)
    self.assertTrue(os.path.exists(os.path.join(self.saved, "saved_model.pb")))
    self.assertFalse(os.path.exists(os.path.join(self.saved, "plan.json")))
    both = tofu("plan", f"--saved_model={self.saved}", f"--graph={junk}")
    self.assertEqual(both.returncode, 2)
    self.assertIn("exactly one of", both.stderr)
    # The folder holding the input is never the output, whatever the spelling.
    parent = tofu("rewrite", "--saved_model=tiny_step", "--signature=train", "--output=.",
                  cwd=self.dir)
    self.assertEqual(parent.returncode, 2)
    self.assertIn("contains the input", parent.stderr)
    self.assertTrue(os.path.exists(os.path.join(self.saved, "saved_model.pb")))
    magic = tofu("rewrite", f"--saved_model={self.saved}", "--signature=train",
                 "--planner=magic", f"--output={self.out('m.pb')}")
    self.assertEqual(magic.returncode, 2)
    self.assertIn("--planner: unknown planner 'magic'", magic.stderr)
    negative = tofu("plan", f"--saved_model={self.saved}", "--signature=train", "--devices=-1")
    self.assertEqual(negative.returncode, 2)
    self.assertIn("--devices=-1", negative.stderr)


if __name__ == "__main__":
  absltest.main()
