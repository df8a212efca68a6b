"""Tests for tf_tofu.cli.fuzz: a short campaign prints its counts."""

from absl.testing import absltest

from tests.cli.clitest import tofu


class FuzzCommandTest(absltest.TestCase):
  """tofu fuzz --examples=2."""

  def test_fuzz_prints_its_counts(self):
    import tempfile
    out = tofu("fuzz", "--examples=2", "--seed=1", f"--out_dir={tempfile.mkdtemp()}")
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertRegex(out.stdout, r"(?m)^2 tried, 0 failed \(\d+ s, seed 1\)$")


if __name__ == "__main__":
  absltest.main()
