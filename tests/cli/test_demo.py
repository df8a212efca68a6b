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
    self.assertRegex(summary, r"\(variables \d\.\de[+-]\d+, the largest in [^\s)]+\)")
    self.assertRegex(summary, r"tofu moves .* per step; the best baseline")
    self.assertRegex(summary, r"worst device peak .* the ideal")
    self.assertRegex(summary, r"memory budget per device -> bytes per step")
    self.assertRegex(summary, r"unlimited: [\d.]+ [KMG]?i?B \(peak ")
    self.assertTrue(os.path.exists(os.path.join(out_dir, "plan.dot")))
    plan = json.load(open(os.path.join(out_dir, "plan.json")))
    self.assertLen(plan["devices"], 4)

  def test_demo_across_two_local_servers(self):
    text = self.ok(tofu("demo", "--cluster=local:2x2", "--model=mlp", "--size=tiny",
                        "--steps=2", "--out_dir="))
    self.assertIn("servers up at 127.0.0.1:", text)
    self.assertIn("/job:worker/replica:0/task:1/device:CPU:1", text)
    summary = text[text.index("demo summary:"):]
    self.assertIn("losses match", summary)
    self.assertRegex(summary, r"bytes per link class: planned local \d+ B, network \d+ B, "
                     r".*; counted in the partitioned graph local \d+ B, network \d+ B \(equal\)")

  def test_demo_refuses_a_bad_cluster(self):
    self.assertIn("local:TxD", tofu("demo", "--cluster=local:2", "--out_dir=").stderr)


if __name__ == "__main__":
  absltest.main()
