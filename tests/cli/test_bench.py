"""Tests for tf_tofu.cli.bench: the benchmark harness on tiny models."""

from absl.testing import absltest

from tests.cli.clitest import CommandCase, tofu


class BenchTest(CommandCase):
  """tofu bench --sizes=tiny --nowrite."""

  def test_bench_tiny(self):
    text = self.ok(tofu("bench", "--only=memory", "--sizes=tiny", "--nowrite"))
    self.assertIn("worst / ideal", text)
    self.assertIn("rewrite within 60 s", text)


if __name__ == "__main__":
  absltest.main()
