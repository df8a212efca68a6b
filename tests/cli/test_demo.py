"""Tests for tf_tofu.cli.demo: the main job ends with a matching summary."""

import json
import os

from absl.testing import absltest

from tests.cli.clitest import CommandCase, tofu


class DemoTest(CommandCase):
  """tofu demo on a tiny model."""

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


if __name__ == "__main__":
  absltest.main()
