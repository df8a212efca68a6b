"""Tests for tf_tofu.cli.plan: tofu plan on a SavedModel, its plan applied by tofu rewrite."""

import json
import os
import re

import tensorflow as tf
from absl.testing import absltest

from tests.cli.clitest import K, CommandCase, tofu, tofu_here


class PlanCommandTest(CommandCase):
  """plan -> plan.json -> rewrite --plan_in."""

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
    other = tofu_here("rewrite", f"--saved_model={self.saved}", "--signature=train",
                      f"--plan_in={plan_path}", "--devices=8", f"--output={self.out('x.pb')}")
    self.assertEqual(other.returncode, 1)
    self.assertIn(f"8 devices given, the plan has {K}", other.stderr)

  def test_never_worse_reports_who_found_the_plan(self):
    plan_path = self.out("nw.json")
    text = self.ok(tofu("plan", f"--saved_model={self.saved}", "--signature=train",
                        f"--devices={K}", "--never_worse", f"--plan_out={plan_path}"))
    from tf_tofu.core.plan import Plan
    plan = Plan.from_json(open(plan_path).read())
    self.assertIn(f"found by: {plan.found_by}", text)
    self.assertIn(plan.found_by, ("tofu", "allrow", "spartan", "equalchop", "megatron"))

  def test_needs_once_flag_prices_each_level_on_its_exact_bytes(self):
    plan_path = self.out("once.json")
    text = self.ok(tofu("plan", f"--saved_model={self.saved}", "--signature=train",
                        f"--devices={K}", "--needs_once", f"--plan_out={plan_path}"))
    from tf_tofu.core.plan import Plan
    plan = Plan.from_json(open(plan_path).read())
    self.assertNotIn("per op group", {lvl["needs"] for lvl in plan.level_search})
    self.assertIn("shared needs priced once", text)
    # The rewrite plans the same way and moves what the plan predicts.
    pb = self.out("once.pb")
    text = self.ok(tofu("rewrite", f"--saved_model={self.saved}", "--signature=train",
                        f"--devices={K}", "--needs_once", f"--output={pb}"))
    self.assertIn("shared needs priced once", text)
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(open(pb, "rb").read())
    from tf_tofu import count_transfer_bytes
    self.assertEqual(count_transfer_bytes(gd), plan.total_bytes)

  def test_memory_budget_flag(self):
    plan_path = self.out("budget.json")
    text = self.ok(tofu("plan", f"--saved_model={self.saved}", "--signature=train",
                        f"--devices={K}", "--memory_budget=unlimited", f"--plan_out={plan_path}"))
    # Replicated storage pays on the tiny MLP (contractions still split their work).
    note = re.search(r"memory budget unlimited: the .* search's plan \(peak .*\) moves "
                     r"([\d,]+) B per step; Tofu's cut-only plan ([\d,]+) B", text)
    self.assertIsNotNone(note, text)
    moved, cut_only = (int(g.replace(",", "")) for g in note.groups())
    self.assertLess(moved, cut_only)
    self.assertRegex(text, rf"predicted bytes per step: .* \({moved} B\)")
    bad = tofu_here("plan", f"--saved_model={self.saved}", "--signature=train", f"--devices={K}",
                    "--memory_budget=16G")
    self.assertEqual(bad.returncode, 1)
    self.assertIn("memory_budget='16G' is not a size", bad.stderr)

  def test_plan_for_a_cluster_spec_with_bandwidths(self):
    spec = self.out("cluster.json")
    with open(spec, "w") as f:
      json.dump({"cluster": {"worker": ["h0:2222", "h1:2222"]},
                 "task": {"type": "worker", "index": 0}}, f)
    plan_path = self.out("cluster_plan.json")
    text = self.ok(tofu("plan", f"--saved_model={self.saved}", "--signature=train",
                        f"--cluster_spec={spec}", "--devices_per_task=2",
                        "--network_bandwidth=0.5", "--local_bandwidth=20",
                        f"--plan_out={plan_path}"))
    self.assertIn("bytes per link class: local", text)
    self.assertIn("at local 20 GB/s, network 0.5 GB/s", text)
    from tf_tofu.core.plan import Plan
    plan = Plan.from_json(open(plan_path).read())
    self.assertCountEqual(plan.devices, [f"/job:worker/replica:0/task:{t}/device:CPU:{d}"
                                         for t in (0, 1) for d in (0, 1)])
    self.assertEqual(plan.bandwidth, {"local": 2e10, "network": 5e8})
    bad = tofu_here("plan", f"--saved_model={self.saved}", "--signature=train",
                    f"--cluster_spec={self.out('missing.json')}")
    self.assertEqual(bad.returncode, 2)  # a usage error
    self.assertIn("--cluster_spec=", bad.stderr)


if __name__ == "__main__":
  absltest.main()
