"""Tests for tf_tofu.search.topology_search: factor order and device order by predicted time."""

import fractions
import itertools

from absl.testing import absltest

import tf_tofu
from tf_tofu import api, models
from tf_tofu.core import cluster, topology
from tf_tofu.core.plan import plan_from_search
from tf_tofu.graph import view
from tf_tofu.layout.tiling import device_coords
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import planners, topology_search

W = "/job:worker/replica:0/task:{}/device:CPU:{}"
NEW_FIELDS = ("link_bytes", "bandwidth", "comm_time", "placement")


def _names(tasks, per_task):
  return tuple(W.format(t, d) for t in range(tasks) for d in range(per_task))


def _view(key):
  step = models.tiny(key, dtype="float64")
  d = Describer()
  return view.from_tofu_graph(tf_tofu.trace(step.fn, *step.input_signature), d), d


class DeviceOrdersTest(absltest.TestCase):

  def test_one_order_per_set_of_network_levels(self):
    topo = topology.Topology()
    orders = topology_search.device_orders(_names(2, 2), (2, 2), topo)
    self.assertEqual([o.network_levels for o in orders], [(0,), (1,)])  # (0,): as given
    self.assertEqual([o.given for o in orders], [True, False])
    self.assertEqual(orders[1].names, (W.format(0, 0), W.format(1, 0), W.format(0, 1),
                                       W.format(1, 1)))
    orders = topology_search.device_orders(_names(2, 4), (2, 2, 2), topo)
    self.assertEqual([o.network_levels for o in orders], [(0,), (1,), (2,)])
    orders = topology_search.device_orders(_names(3, 2), (2, 3), topo)
    self.assertEqual([o.network_levels for o in orders], [None, (1,)])  # 3 tasks: level 2
    self.assertEqual(topology_search.device_orders(_names(3, 2), (3, 2), topo)[0].names,
                     _names(3, 2))
    for order in topology_search.device_orders(_names(2, 4), (2, 2, 2), topo):
      self.assertCountEqual(order.names, _names(2, 4))
      net = order.network_levels
      for i, j in itertools.combinations(range(8), 2):  # same task <=> same network coords
        wi, wj = device_coords(i, (2, 2, 2)), device_coords(j, (2, 2, 2))
        same_task = topo.link_class(order.names[i], order.names[j]) == "local"
        self.assertEqual(same_task, all(wi[l] == wj[l] for l in net))

  def test_only_the_given_order_without_a_choice(self):
    topo = topology.Topology()
    for names, factors in ((_names(1, 4), (2, 2)), (_names(4, 1), (2, 2)),
                           (_names(2, 2)[:3] + (W.format(2, 0),), (2, 2))):
      self.assertLen(topology_search.device_orders(names, factors, topo), 1)

  def test_link_bytes_and_exact_seconds(self):
    topo = topology.Topology({"network": 3e9})
    names = _names(2, 2)
    got = topology_search.link_bytes({(0, 1): 10, (1, 2): 7, (3, 0): 5}, names, topo)
    self.assertEqual(got, {"local": 10, "network": 12})
    self.assertEqual(topology_search.exact_seconds(got, topo),
                     fractions.Fraction(10, 10**10) + fractions.Fraction(12, 3 * 10**9))


class PlaceTest(absltest.TestCase):

  def test_single_link_class_gives_the_bytes_plan_bit_for_bit(self):
    for key in ("mlp", "gpt"):
      g, d = _view(key)
      raw = planners.run("tofu", g, 4, d)
      old = plan_from_search(raw, g, "tofu", _names(1, 4)).to_dict()
      for names, topo in ((_names(1, 4), None),
                          (_names(2, 2), topology.Topology({"network": 1e10}))):
        new = api.plan_view(g, list(names), describer=d, memory=False, topology=topo).to_dict()
        self.assertEqual(new["devices"], list(names), key)  # equal bandwidths: order given
        for field in NEW_FIELDS + ("devices",):
          new.pop(field)
        for field in NEW_FIELDS + ("devices",):
          old.pop(field, None)
        self.assertEqual(new, old, key)

  def test_the_choice_is_the_least_time_of_every_order(self):
    for key, tasks, per_task in (("gpt", 2, 2), ("mlp", 3, 2), ("mlp", 2, 4)):
      g, d = _view(key)
      names = _names(tasks, per_task)
      for bandwidth in ({}, {"network": 1e11, "local": 1e9}):
        topo = topology.Topology(bandwidth)
        plan = api.plan_view(g, list(names), describer=d, memory=False, topology=topo)
        raw = planners.run("tofu", g, len(names), d)
        times = [topology_search.exact_seconds(topology_search.link_bytes(
                     c.evaluation.pair_bytes, o.names, topo), topo)
                 for c in raw.candidates
                 for o in topology_search.device_orders(names, c.factors, topo)]
        self.assertGreater(len(times), len(raw.candidates))  # a device order to choose
        got = topology_search.exact_seconds(plan.link_bytes, topo)
        self.assertEqual(got, min(times), (key, tasks, bandwidth))
        self.assertAlmostEqual(plan.comm_time, float(got))
        self.assertEqual(sum(plan.link_bytes.values()), plan.total_bytes)

  def test_needs_priced_once_under_a_topology(self):
    # needs_once changes each level's objective, not the topology search: the plan it
    # picks is the least-time order of the once-priced candidates, and its link bytes
    # add up to its bytes.
    g, d = _view("mlp")
    names = _names(2, 2)
    topo = topology.Topology({"network": 1e11, "local": 1e9})
    plan = api.plan_view(g, list(names), describer=d, memory=False, topology=topo,
                         needs_once=True)
    self.assertEqual([lvl["needs"] for lvl in plan.level_search], ["once", "once"])
    raw = planners.run("tofu", g, len(names), d, planners.SearchOptions(needs_once=True))
    times = [topology_search.exact_seconds(topology_search.link_bytes(
                 c.evaluation.pair_bytes, o.names, topo), topo)
             for c in raw.candidates
             for o in topology_search.device_orders(names, c.factors, topo)]
    self.assertEqual(topology_search.exact_seconds(plan.link_bytes, topo), min(times))
    self.assertEqual(sum(plan.link_bytes.values()), plan.total_bytes)

  def test_cluster_devices_plan_without_connecting(self):
    devices = cluster.ClusterDevices({"worker": ["h0:1", "h1:1"]}, 2)
    g, d = _view("mlp")
    plan = api.plan_view(g, devices, describer=d, memory=False)
    self.assertCountEqual(plan.devices, _names(2, 2))
    self.assertEqual(set(plan.link_bytes), {"local", "network"})
    self.assertEqual(plan.bandwidth, {"local": 1e10, "network": 1e9})
    self.assertIn("across tasks", plan.placement)


if __name__ == "__main__":
  absltest.main()
