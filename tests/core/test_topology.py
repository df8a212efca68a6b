"""Tests for tf_tofu.core.topology: link classes from device names, bandwidths, time."""

from absl.testing import absltest

from tf_tofu.core import cluster, topology

SPEC = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"], "ps": ["10.0.0.3:2222"]}
W = "/job:worker/replica:0/task:{}/device:CPU:{}"


class TopologyTest(absltest.TestCase):

  def test_link_classes_from_names(self):
    t = topology.Topology()
    self.assertEqual(t.link_class(W.format(0, 0), W.format(0, 1)), "local")
    self.assertEqual(t.link_class(W.format(0, 0), W.format(1, 0)), "network")
    self.assertEqual(t.link_class("/CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"),
                     "local")
    self.assertEqual(t.link_class("/job:worker/task:0/device:GPU:0",
                                  "/job:ps/task:0/device:CPU:0"), "network")
    two_by_two = cluster.cluster_devices(SPEC, 2, job="worker")
    self.assertEqual(t.link_classes(two_by_two), ("local", "network"))
    self.assertEqual(t.link_classes(two_by_two[:2]), ("local",))  # one task: one class
    self.assertEqual(t.link_classes(["/CPU:0", "/CPU:1", "/CPU:2"]), ("local",))
    self.assertEqual(t.link_classes([W.format(0, 0), W.format(1, 0)]), ("network",))

  def test_bandwidths_and_seconds(self):
    t = topology.Topology()
    self.assertEqual(t.bandwidth_of("local"), 1e10)
    self.assertEqual(t.bandwidth_of("network"), 1e9)
    self.assertEqual(t.classes, ("local", "network"))
    self.assertAlmostEqual(t.seconds({"local": 2e10, "network": 3e9}), 5.0)
    self.assertEqual(t.seconds({}), 0.0)
    slow = topology.Topology(bandwidth={"network": 1.25e8})
    self.assertEqual(slow.bandwidth_of("network"), 1.25e8)
    self.assertEqual(slow.bandwidth_of("local"), 1e10)
    self.assertAlmostEqual(slow.seconds({"network": 2.5e8}), 2.0)
    self.assertEqual(topology.Topology({"network": 1e9}), topology.Topology())
    self.assertEqual(hash(topology.Topology({"network": 1e9})), hash(topology.Topology()))
    with self.assertRaises(Exception):
      t.bandwidth = ()  # frozen
    for bad, pattern in (({"nvlink": 1e11}, "'nvlink'"), ({"network": 0}, "positive"),
                         ({"local": float("inf")}, "positive")):
      with self.assertRaisesRegex(cluster.ClusterError, pattern):
        topology.Topology(bandwidth=bad)
    with self.assertRaisesRegex(cluster.ClusterError, "'rack' is unknown"):
      t.seconds({"rack": 1})
    with self.assertRaisesRegex(cluster.ClusterError, "negative"):
      t.seconds({"local": -1})

  def test_groups_by_task_in_order(self):
    t = topology.Topology()
    devices = [W.format(1, 0), W.format(0, 0), W.format(1, 1), W.format(0, 1)]
    self.assertEqual(t.groups(devices), ((W.format(1, 0), W.format(1, 1)),
                                         (W.format(0, 0), W.format(0, 1))))
    self.assertEqual(t.groups(["/CPU:0", "/CPU:1"]), (("/CPU:0", "/CPU:1"),))


if __name__ == "__main__":
  absltest.main()
