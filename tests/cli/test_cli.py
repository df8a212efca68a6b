"""Tests for tf_tofu.cli: the tofu command's dispatch, help and python -m."""

import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest

from tests.cli.clitest import ROOT, tofu


class DispatchTest(absltest.TestCase):
  """Subcommands, usage, unknown names, per-subcommand help."""

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

  def test_helpfull_lists_the_flags(self):
    text = tofu("rewrite", "--helpfull").stdout  # absl exits 1 after printing help
    self.assertIn("tofu rewrite --saved_model=DIR", text)
    for flag in ("--output", "--plan_in", "--comm", "--devices", "--feeds", "--tensorboard"):
      self.assertIn(flag, text)

  def test_help_lists_the_subcommands_own_flags_only(self):
    text = tofu("rewrite", "--help").stdout
    for flag in ("--output", "--plan_in", "--comm", "--devices", "--feeds", "--tensorboard"):
      self.assertIn(flag, text)
    self.assertNotIn("--coverage_out", text)  # validate's
    self.assertNotIn("--only", text)          # validate's and bench's
    self.assertIn("--coverage_out", tofu("validate", "--help").stdout)

  def test_validate_subset_writes_no_file_unless_asked(self):
    cwd = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, cwd)
    out = tofu("validate", "--only=MatMul", cwd=cwd)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertRegex(out.stdout, r"validated 1 op types, \d+ cases, \d+ strategies: 0 mismatches")
    self.assertEqual(os.listdir(cwd), [])
    table = os.path.join(cwd, "table.md")
    out = tofu("validate", "--only=MatMul", f"--coverage_out={table}", cwd=cwd)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertIn("MatMul", open(table).read())


if __name__ == "__main__":
  absltest.main()
