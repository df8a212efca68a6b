"""Tests for tf_tofu.core.devices: what devices= means, one device however spelled."""

import tensorflow as tf
from absl.testing import absltest

from tests import cpu_devices
from tf_tofu.core import devices  # noqa: E402


def setUpModule():
  cpu_devices.require()


class ResolveTest(absltest.TestCase):

  def test_a_count_takes_logical_cpus_when_there_are_no_gpus(self):
    names = devices.resolve(3, must_exist=True)
    self.assertLen(names, 3)
    self.assertEqual([tf.DeviceSpec.from_string(n).device_index for n in names], [0, 1, 2])
    self.assertLen(devices.resolve(64), 64)  # planning alone needs only names
    with self.assertRaisesRegex(ValueError, "split the CPU first"):
      devices.resolve(64, must_exist=True)

  def test_names_are_canonical_and_distinct(self):
    self.assertEqual(devices.resolve(["/CPU:0", "/cpu:1"]), ("/device:CPU:0", "/device:CPU:1"))
    self.assertEqual(devices.resolve(["/job:worker/task:1/device:GPU:0"]),
                     ("/job:worker/task:1/device:GPU:0",))
    for same in (["/CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0"],
                 ["/GPU:0", "/gpu:0"]):
      with self.assertRaisesRegex(ValueError, "listed twice"):
        devices.resolve(same)
    devices.resolve(["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"])

  def test_clusters_and_remote_names(self):
    from tf_tofu.core import cluster
    spec = {"worker": ["h0:2222", "h1:2222"]}
    want = tuple(f"/job:worker/replica:0/task:{t}/device:GPU:{d}" for t in (0, 1)
                 for d in (0, 1))
    self.assertEqual(devices.resolve(cluster.ClusterDevices(spec, 2, "GPU")), want)
    self.assertEqual(devices.resolve(list(want), must_exist=True), want)  # checked when run
    with self.assertRaisesRegex(cluster.ClusterError, "not connected to it.*ClusterDevices"):
      devices.resolve(tf.train.ClusterSpec(spec))  # how many devices per task?

  def test_bad_requests(self):
    for bad, error, pattern in ((0, ValueError, "at least one device"),
                                ([], ValueError, "empty list"),
                                (True, TypeError, "int, a list of device names or a "
                                 "cluster"),
                                ([3], TypeError, "device names"),
                                (["/CPU"], ValueError, "type and an index"),
                                (["nonsense"], ValueError, "not a device name")):
      with self.assertRaisesRegex(error, pattern):
        devices.resolve(bad)
    with self.assertRaisesRegex(ValueError, "does not exist here"):
      devices.resolve(["/GPU:5"], must_exist=True)


if __name__ == "__main__":
  absltest.main()
