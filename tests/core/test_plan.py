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

  def test_link_fields_round_trip_and_old_plans_load(self):
    from tf_tofu.core.plan import link_fields
    import dataclasses
    plan, _ = make_plan()
    linked = dataclasses.replace(plan, **link_fields(
        {"local": 100, "network": 30}, {"local": 1e10, "network": 1e9}, "level(s) 1 across"))
    self.assertAlmostEqual(linked.comm_time, 100 / 1e10 + 30 / 1e9)
    again = Plan.from_json(linked.to_json())
    self.assertEqual((again.link_bytes, again.bandwidth, again.comm_time, again.placement),
                     (linked.link_bytes, linked.bandwidth, linked.comm_time,
                      linked.placement))
    report = linked.report()
    self.assertIn("bytes per link class: local 100 B (100 B), network 30 B (30 B); predicted "
                  "communication 0.000 ms per step at local 10 GB/s, network 1 GB/s", report)
    self.assertIn("device order: level(s) 1 across", report)
    old = json.loads(plan.to_json())
    for field in ("link_bytes", "bandwidth", "comm_time", "placement"):
      del old[field]
    loaded = Plan.from_dict(old)  # a plan saved before the fields existed
    self.assertEqual((loaded.link_bytes, loaded.bandwidth, loaded.comm_time,
                      loaded.placement), ({}, {}, None, ""))
    self.assertNotIn("link class", loaded.report())

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
