"""Tests for the tofu command: dispatch, demo, plan and rewrite end to end, bad input.

Each subcommand runs in a subprocess, as a user runs it, on tiny zoo models;
the SavedModel fixture is a tiny MLP training step saved with its variables.
"""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tests import cpu_devices  # noqa: E402,F401  (splits the CPU: the rewritten SavedModel runs here)

K = 4

from absl.testing import absltest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tofu(*args, cwd=ROOT):
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return subprocess.run([sys.executable, "-m", "tf_tofu.cli", *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=600)


def save_tiny_step(path):
  """A tiny MLP training step as a SavedModel (signature "train"), with its example inputs."""
  from tf_tofu import models
  step = models.tiny("mlp", optimizer="adam")
  module = tf.Module()
  module.weights = list(step.variables) + list(step.optimizer_variables)
  module.train = step.fn
  tf.saved_model.save(module, path, signatures={"train": step.fn})
  return step


class CliTest(absltest.TestCase):

  def test_usage_and_unknown_subcommand(self):
    usage = tofu("--help").stdout
    for name in ("demo", "plan", "rewrite", "validate"):
      self.assertIn(name, usage)
    env = dict(os.environ, PYTHONPATH=ROOT)
    as_module = subprocess.run([sys.executable, "-m", "tf_tofu", "--help"], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=120)
    self.assertEqual(as_module.returncode, 0, as_module.stderr[-2000:])
    self.assertIn("usage: tofu SUBCOMMAND", as_module.stdout)
    bad = tofu("frobnicate")
    self.assertEqual(bad.returncode, 2)
    self.assertIn("unknown subcommand 'frobnicate'", bad.stderr)

  def test_fuzz_prints_its_counts(self):
    import tempfile
    out = tofu("fuzz", "--examples=2", "--seed=1", f"--out_dir={tempfile.mkdtemp()}")
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertRegex(out.stdout, r"(?m)^2 tried, 0 failed \(\d+ s, seed 1\)$")

  def test_validate_subset(self):
    out = tofu("validate", "--only=MatMul", "--coverage_out=")
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertRegex(out.stdout, r"validated 1 op types, \d+ cases, \d+ strategies: 0 mismatches")


class OutputSafetyTest(absltest.TestCase):
  """check_output, in process: inputs are never overwritten, outputs never clobbered."""

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


class CommandsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    import tempfile
    cls.dir = tempfile.mkdtemp(prefix="tofu_cli_test_")
    cls.saved = os.path.join(cls.dir, "tiny_step")
    cls.step = save_tiny_step(cls.saved)

  def out(self, name):
    import tempfile
    return os.path.join(tempfile.mkdtemp(dir=self.dir), name)

  def ok(self, result):
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    return result.stdout

  def test_demo_ends_with_a_matching_summary(self):
    out_dir = self.out("demo")
    text = self.ok(tofu("demo", "--model=mlp", "--size=tiny", "--k=4", "--steps=2",
                        f"--out_dir={out_dir}"))
    summary = text[text.index("demo summary:"):]
    self.assertIn("losses match", summary)
    self.assertRegex(summary, r"tofu moves .* per step; the best baseline")
    self.assertRegex(summary, r"worst device peak .* the ideal")
    self.assertTrue(os.path.exists(os.path.join(out_dir, "plan.dot")))
    plan = json.load(open(os.path.join(out_dir, "plan.json")))
    self.assertLen(plan["devices"], 4)

  def test_plan_a_saved_model_then_rewrite_with_that_plan(self):
    plan_path, dot = self.out("plan.json"), self.out("plan.dot")
    text = self.ok(tofu("plan", f"--saved_model={self.saved}", "--signature=train",
                        f"--devices={K}", f"--plan_out={plan_path}", f"--dot={dot}"))
    self.assertIn(f"tf_tofu plan (tofu) for {K} devices", text)
    from tf_tofu.core.plan import Plan
    plan = Plan.from_json(open(plan_path).read())
    self.assertTrue(os.path.exists(dot))
    # Applying the saved plan rewrites to a GraphDef that moves exactly its bytes.
    pb = self.out("step.pb")
    self.ok(tofu("rewrite", f"--saved_model={self.saved}", "--signature=train",
                 f"--plan_in={plan_path}", f"--output={pb}"))
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(open(pb, "rb").read())
    from tf_tofu import count_transfer_bytes
    self.assertEqual(count_transfer_bytes(gd), plan.total_bytes)
    side = json.load(open(pb + ".partition.json"))
    self.assertLen(side["devices"], K)
    self.assertTrue(side["variables"])
    for n in gd.node:
      self.assertIn("_output_shapes", n.attr, n.name)
    # A device count that contradicts the plan is an error, not silently ignored.
    other = tofu("rewrite", f"--saved_model={self.saved}", "--signature=train",
                 f"--plan_in={plan_path}", "--devices=8", f"--output={self.out('x.pb')}")
    self.assertEqual(other.returncode, 1)
    self.assertIn(f"8 devices given, the plan has {K}", other.stderr)

  def test_rewrite_to_a_saved_model_that_trains_on_the_devices(self):
    out = self.out("partitioned")
    board = self.out("board")
    self.ok(tofu("rewrite", f"--saved_model={self.saved}", "--signature=train",
                 f"--devices={K}", "--comm=collective", f"--output={out}",
                 f"--tensorboard={board}"))
    self.assertTrue(os.listdir(board))
    loaded = tf.saved_model.load(out)
    sig = loaded.signatures["serving_default"]
    x, y = self.step.example_inputs(seed=3)
    first = sig(x=tf.constant(x), y=tf.constant(y))
    second = sig(x=tf.constant(x), y=tf.constant(y))
    (name,) = first
    # The reference: the saved step's own signature, on a fresh load of the input.
    ref = tf.saved_model.load(self.saved).signatures["train"]
    want = [float(list(ref(x=tf.constant(x), y=tf.constant(y)).values())[0]) for _ in range(2)]
    np.testing.assert_allclose([float(first[name]), float(second[name])], want, rtol=1e-5)

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
    negative = tofu("plan", f"--saved_model={self.saved}", "--signature=train", "--devices=-1")
    self.assertEqual(negative.returncode, 2)
    self.assertIn("--devices=-1", negative.stderr)

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
    unshaped = tofu("plan", f"--graph={path}", "--fetches=loss", "--devices=4")
    self.assertEqual(unshaped.returncode, 1)
    self.assertIn("x", unshaped.stderr)

  def test_bench_tiny(self):
    text = self.ok(tofu("bench", "--only=memory", "--sizes=tiny", "--nowrite"))
    self.assertIn("worst / ideal", text)
    self.assertIn("rewrite within 60 s", text)

  def test_helpfull_lists_the_flags(self):
    text = tofu("rewrite", "--helpfull").stdout  # absl exits 1 after printing help
    self.assertIn("tofu rewrite --saved_model=DIR", text)
    for flag in ("--output", "--plan_in", "--comm", "--devices", "--feeds", "--tensorboard"):
      self.assertIn(flag, text)


if __name__ == "__main__":
  absltest.main()
