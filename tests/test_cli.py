"""Tests for the tofu command's dispatch."""

import os
import subprocess
import sys

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tofu(*args):
  return subprocess.run([sys.executable, "-m", "tf_tofu.cli", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


class CliTest(absltest.TestCase):

  def test_usage_and_unknown_subcommand(self):
    self.assertIn("validate", tofu("--help").stdout)
    bad = tofu("frobnicate")
    self.assertEqual(bad.returncode, 2)
    self.assertIn("unknown subcommand 'frobnicate'", bad.stderr)

  def test_validate_subset(self):
    out = tofu("validate", "--only=MatMul", "--coverage_out=")
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertRegex(out.stdout, r"validated 1 op types, \d+ cases, \d+ strategies: 0 mismatches")


if __name__ == "__main__":
  absltest.main()
