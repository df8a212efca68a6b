"""Tests for tf_tofu.core.plan: JSON round trip, graph checks, the report."""

import json

from absl.testing import absltest

from tests import search_testlib  # noqa: E402

from tf_tofu.opdefs.registry import Describer  # noqa: E402
from tf_tofu.core.plan import Plan, PlanError, plan_from_search  # noqa: E402
from tf_tofu.search import planners  # noqa: E402
from tf_tofu.graph import view  # noqa: E402


def make_plan(seed=1, k=4, planner="tofu"):
  graph = view.from_tofu_graph(search_testlib.random_graph(seed))
  res = planners.run(planner, graph, k, Describer())
  return plan_from_search(res, graph, planner, [f"/device:CPU:{i}" for i in range(k)]), graph


class PlanTest(absltest.TestCase):

  def test_json_round_trip(self):
    plan, _ = make_plan()
    text = plan.to_json()
    again = Plan.from_json(text)
    self.assertEqual(again.to_json(), text)
    self.assertEqual(again.layouts, plan.layouts)
    self.assertEqual(again.strategies, plan.strategies)
    self.assertEqual(again.total_bytes, plan.total_bytes)

  def test_totals_are_consistent(self):
    plan, _ = make_plan()
    self.assertEqual(sum(plan.level_bytes), plan.total_bytes)
    self.assertEqual(sum(c["bytes"] for c in plan.conversions), plan.total_bytes)
    self.assertEqual(sum(plan.op_bytes.values()), plan.total_bytes)

  def test_bad_json(self):
    with self.assertRaisesRegex(PlanError, "does not parse"):
      Plan.from_json("{")
    with self.assertRaisesRegex(PlanError, "not a tf_tofu plan"):
      Plan.from_json(json.dumps({"format": "other"}))
    plan, _ = make_plan()
    d = plan.to_dict()
    del d["layouts"]
    with self.assertRaisesRegex(PlanError, "malformed"):
      Plan.from_dict(d)
    d = plan.to_dict()
    first = next(iter(d["strategies"]))
    d["strategies"][first] = d["strategies"][first][:1]
    with self.assertRaisesRegex(PlanError, "levels"):
      Plan.from_dict(d)

  def test_plan_checks_its_graph(self):
    plan, graph = make_plan(seed=1)
    plan.check_matches(graph)
    _, other = make_plan(seed=2)
    with self.assertRaisesRegex(PlanError, "another graph"):
      plan.check_matches(other)

  def test_report_lists_groups_and_conversions(self):
    plan, _ = make_plan()
    text = plan.report()
    self.assertIn("predicted bytes per step", text)
    self.assertIn("largest conversions", text)
    self.assertIn("matmul", text)


if __name__ == "__main__":
  absltest.main()
