"""Tests for tf_tofu.core.cluster: reading clusters, naming their devices, bounded
reachability checks, refusing devices a cluster does not have."""

import json
import os
import socket
import time
from unittest import mock

import tensorflow as tf
from absl.testing import absltest

from tf_tofu.core import cluster
from tf_tofu.core.errors import TofuError

SPEC = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"], "ps": ["10.0.0.3:2222"]}
TF_CONFIG = json.dumps({"cluster": SPEC, "task": {"type": "worker", "index": 0}})
W = "/job:worker/replica:0/task:{}/device:CPU:{}"


def _closed_port() -> int:
  """A port on 127.0.0.1 nobody listens on (bound and released)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class ClusterSpecOfTest(absltest.TestCase):

  def test_every_form_gives_the_same_spec(self):
    want = tf.train.ClusterSpec(SPEC).as_dict()
    forms = (tf.train.ClusterSpec(SPEC), SPEC, TF_CONFIG, json.dumps(SPEC),
             tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(SPEC)))
    for form in forms:
      spec = cluster.cluster_spec_of(form)
      self.assertIsInstance(spec, tf.train.ClusterSpec)
      self.assertEqual(spec.as_dict(), want, form)
    with mock.patch.dict(os.environ, {"TF_CONFIG": TF_CONFIG}):
      self.assertEqual(cluster.cluster_spec_of(None).as_dict(), want)
      self.assertEqual(cluster.cluster_spec_of().as_dict(), want)
      resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
      self.assertEqual(cluster.cluster_spec_of(resolver).as_dict(), want)

  def test_sparse_tasks(self):
    spec = cluster.cluster_spec_of('{"worker": {"1": "h:1", "3": "h:3"}}')
    self.assertEqual(spec.task_indices("worker"), [1, 3])
    self.assertEqual(cluster.cluster_devices(spec, 1), (W.format(1, 0), W.format(3, 0)))

  def test_malformed_inputs_name_the_value(self):
    for bad, pattern in (({}, "no jobs"),
                         ({"worker": []}, "job 'worker' has no tasks"),
                         ({"worker": "h:1"}, "must be a list"),
                         ({"worker": ["nocolon"]}, "'nocolon' is not 'host:port'"),
                         ({"worker": ["h:99999"]}, "'h:99999' is not 'host:port'"),
                         ({"worker": [7]}, "address 7 is not a string"),
                         ({"wor ker": ["h:1"]}, "job name 'wor ker'"),
                         ({"worker": {"x": "h:1"}}, "task index 'x'"),
                         ("{not json", "not JSON"),
                         ('["h:1"]', "not a mapping"),
                         ('{"cluster": {}}', "no jobs"),
                         (42, "42 \\(a int\\) is not a cluster"),
                         (tf.distribute.cluster_resolver.SimpleClusterResolver(
                             tf.train.ClusterSpec({})), "SimpleClusterResolver: the cluster has")):
      with self.assertRaisesRegex(cluster.ClusterError, pattern):
        cluster.cluster_spec_of(bad)
    with mock.patch.dict(os.environ, clear=True):
      with self.assertRaisesRegex(cluster.ClusterError, "TF_CONFIG environment variable is not"):
        cluster.cluster_spec_of(None)
    with mock.patch.dict(os.environ, {"TF_CONFIG": "{oops"}):
      with self.assertRaisesRegex(cluster.ClusterError, "TF_CONFIG environment variable is not"
                                  " JSON"):
        cluster.cluster_spec_of(None)
    self.assertTrue(issubclass(cluster.ClusterError, TofuError))

  def test_split_address(self):
    self.assertEqual(cluster.split_address("h:2222"), ("h", 2222))
    self.assertEqual(cluster.split_address("[::1]:2222"), ("::1", 2222))
    with self.assertRaisesRegex(cluster.ClusterError, "host:port"):
      cluster.split_address(":2222")


class ClusterDevicesTest(absltest.TestCase):

  def test_task_order_then_device_order(self):
    self.assertEqual(cluster.cluster_devices(SPEC, 2, job="worker"),
                     (W.format(0, 0), W.format(0, 1), W.format(1, 0), W.format(1, 1)))
    self.assertEqual(cluster.cluster_devices(SPEC, 1, device_type="GPU", job="ps"),
                     ("/job:ps/replica:0/task:0/device:GPU:0",))
    self.assertLen(cluster.cluster_devices(SPEC, 2), 6)  # every job

  def test_counts_per_job_and_per_task(self):
    names = cluster.cluster_devices(SPEC, {"worker": 2, ("worker", 1): 1, "ps": 0})
    self.assertEqual(names, (W.format(0, 0), W.format(0, 1), W.format(1, 0)))
    with self.assertRaisesRegex(cluster.ClusterError, "no count for job 'ps'"):
      cluster.cluster_devices(SPEC, {"worker": 2})
    with self.assertRaisesRegex(cluster.ClusterError, "job 'chief' is not in the cluster"):
      cluster.cluster_devices(SPEC, 2, job="chief")
    with self.assertRaisesRegex(cluster.ClusterError, "not a non-negative int"):
      cluster.cluster_devices(SPEC, -1)

  def test_check_in_cluster(self):
    available = cluster.cluster_devices(SPEC, 2, job="worker")
    self.assertEqual(cluster.check_in_cluster(["/job:worker/task:1/cpu:0"], available),
                     (W.format(1, 0),))
    with self.assertRaisesRegex(cluster.ClusterError,
                                r"\['/job:worker/task:2/device:CPU:0'\] are not in the cluster; "
                                r"its devices are \['/job:worker/replica:0/task:0/device:CPU:0'"):
      cluster.check_in_cluster(["/job:worker/task:0/device:CPU:1",
                                "/job:worker/task:2/device:CPU:0"], available)
    with self.assertRaisesRegex(cluster.ClusterError, "'/CPU:0'"):
      cluster.check_in_cluster(["/CPU:0"], available)  # this process's device, not the cluster's


class DevicesOfAClusterTest(absltest.TestCase):

  def test_cluster_devices_without_connecting(self):
    d = cluster.ClusterDevices(SPEC, 2)
    self.assertEqual(d.names(), tuple(W.format(t, i) for t in (0, 1) for i in (0, 1)))  # no ps
    self.assertEqual(cluster.ClusterDevices(SPEC, 1, job="ps").names(),
                     ("/job:ps/replica:0/task:0/device:CPU:0",))
    with mock.patch.dict(os.environ, {"TF_CONFIG": TF_CONFIG}):
      self.assertEqual(cluster.ClusterDevices(None, 2).names(), d.names())
      self.assertEqual(cluster.spec_of_devices("TF_CONFIG").as_dict(), SPEC)
    self.assertEqual(cluster.compute_jobs(tf.train.ClusterSpec(SPEC)), ["worker"])
    self.assertEqual(cluster.compute_jobs(tf.train.ClusterSpec({"ps": ["h:1"]})), ["ps"])

  def test_what_counts_as_a_cluster(self):
    for value in (SPEC, tf.train.ClusterSpec(SPEC), TF_CONFIG, "TF_CONFIG",
                  cluster.ClusterDevices(SPEC, 1)):
      self.assertTrue(cluster.is_cluster(value), value)
    for value in (4, ["/CPU:0"], "/CPU:0"):
      self.assertFalse(cluster.is_cluster(value), value)
      self.assertIsNone(cluster.spec_of_devices(value))

  def test_a_bare_cluster_needs_a_connection_to_count_devices(self):
    with self.assertRaisesRegex(cluster.ClusterError, r"not connected to it, so how many "
                                r"devices each task has is unknown; pass devices="):
      cluster.names_of(SPEC)

  def test_ensure_connected(self):
    local = ("/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1")
    self.assertEqual(cluster.ensure_connected(local), local)  # local devices need nothing
    with mock.patch.dict(os.environ, {}, clear=True):
      with self.assertRaisesRegex(cluster.ClusterError, r"are remote and this process is not "
                                  r"connected to a cluster; pass the cluster"):
        cluster.ensure_connected([W.format(0, 0)])
    port = _closed_port()
    with mock.patch.object(tf.config, "experimental_connect_to_cluster",
                           side_effect=AssertionError("must not connect")):
      with self.assertRaisesRegex(cluster.ClusterError, rf"cannot reach 127.0.0.1:{port}"):
        cluster.ensure_connected([W.format(0, 0)], {"worker": [f"127.0.0.1:{port}"]},
                                 timeout_s=2)


class ReachableTest(absltest.TestCase):

  def test_nobody_listening_fails_fast_naming_the_address(self):
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with self.assertRaisesRegex(cluster.ClusterError,
                                f"cannot reach {address} \\(job 'worker' task 0: .*start the "
                                "tf.distribute.Server.*TF_CONFIG"):
      cluster.check_reachable({"worker": [address]}, timeout_s=2.0)
    self.assertLess(time.monotonic() - start, 5.0)

  def test_a_listening_port_is_reachable(self):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      s.listen(1)
      cluster.check_reachable({"worker": [f"127.0.0.1:{s.getsockname()[1]}"]}, timeout_s=2.0)
      down = f"127.0.0.1:{_closed_port()}"
      with self.assertRaisesRegex(cluster.ClusterError, f"cannot reach {down} \\(job 'worker' "
                                  "task 1"):
        cluster.check_reachable({"worker": [f"127.0.0.1:{s.getsockname()[1]}", down]})


if __name__ == "__main__":
  absltest.main()
