"""Tests for tf_tofu.core.local_cluster: server processes started, used and always stopped.

This process never connects to a cluster itself (that changes the process-wide eager
context); the end-to-end test runs its client in a subprocess: a float64 GraphDef placed
on the four CPU devices of two local servers.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tf_tofu.core import cluster, local_cluster

W = "/job:worker/replica:0/task:{}/device:CPU:{}"


class _FailingCluster(local_cluster.LocalCluster):
  """Servers that are a given command instead of TensorFlow."""

  code = "import sys; sys.stderr.write('boom: no server here\\n'); sys.exit(3)"

  def _server_command(self, task):
    return [sys.executable, "-c", self.code]


class _SilentCluster(_FailingCluster):
  code = "import time; time.sleep(60)"


# The client: connect, run a float64 GraphDef placed on every remote device, report.
_CLIENT = r"""
import json, sys
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context
from tf_tofu.core import cluster
spec, graph_path = sys.argv[1], sys.argv[2]
names = cluster.connect(spec, timeout_s=30)
tf.config.set_soft_device_placement(False)
gd = tf.compat.v1.GraphDef()
with open(graph_path, "rb") as f:
  gd.ParseFromString(f.read())
def body(x):
  return tf.graph_util.import_graph_def(gd, input_map={"x:0": x}, return_elements=["y:0"])[0]
fn = tf.compat.v1.wrap_function(body, [tf.TensorSpec([4, 3], tf.float64)])
ctx = context.context()
ctx.enable_run_metadata()
ctx.enable_graph_collection()
y = fn(tf.constant(np.arange(12.0).reshape(4, 3))).numpy()
ran_on = sorted({n.device for g in ctx.export_run_metadata().function_graphs
                 for p in g.partition_graphs for n in p.node})
print("RESULT " + json.dumps({"names": names, "y": y.tolist(), "ran_on": ran_on}))
"""


def _graph_def(devices):
  """``y = sum_i sum(tanh(x) * (i + 1))`` with term i on ``devices[i]``, float64."""
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float64, [4, 3], name="x")
    terms = []
    for i, d in enumerate(devices):
      with tf.device(d):
        terms.append(tf.reduce_sum(tf.tanh(x) * float(i + 1), name=f"term{i}"))
    with tf.device(devices[0]):
      tf.add_n(terms, name="y")
  return g.as_graph_def()


class LocalClusterTest(absltest.TestCase):

  def test_runs_a_graph_on_all_remote_devices_and_cleans_up(self):
    with local_cluster.LocalCluster(2, 2, startup_timeout_s=60) as c:
      devices = [W.format(t, d) for t in range(2) for d in range(2)]
      self.assertEqual(c.devices, tuple(devices))
      self.assertLen(c.addresses, 2)
      self.assertEqual(json.loads(c.tf_config(1))["task"], {"type": "worker", "index": 1})
      self.assertEqual(cluster.cluster_spec_of(c.tf_config(0)).as_dict(), c.cluster_spec.as_dict())
      cluster.check_reachable(c.cluster_spec)
      with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "graph.pb")
        with open(path, "wb") as f:
          f.write(_graph_def(devices).SerializeToString())
        run = subprocess.run([sys.executable, "-c", _CLIENT,
                              json.dumps(c.cluster_spec.as_dict()), path],
                             capture_output=True, text=True, timeout=90)
      processes = c.processes
      self.assertLen(processes, 2)
    self.assertEqual([p.poll() is not None for p in processes], [True, True])
    self.assertEqual(c.processes, ())
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    result = [l for l in run.stdout.splitlines() if l.startswith("RESULT ")]
    self.assertLen(result, 1, run.stdout)
    result = json.loads(result[0][len("RESULT "):])
    self.assertEqual(result["names"], devices)
    self.assertContainsSubset(devices, result["ran_on"])
    x = np.arange(12.0).reshape(4, 3)
    want = sum(np.sum(np.tanh(x) * (i + 1)) for i in range(4))
    np.testing.assert_allclose(result["y"], want, rtol=1e-13)

  def test_a_server_that_exits_is_named_with_its_stderr(self):
    start = time.monotonic()
    c = _FailingCluster(2, 1, startup_timeout_s=20)
    with self.assertRaisesRegex(cluster.ClusterError, r"(?s)task [01] at 127\.0\.0\.1:\d+ "
                                r"exited with code 3.*boom: no server"):
      with c:
        self.fail("the block must not run")
    self.assertEqual(c.processes, ())
    self.assertLess(time.monotonic() - start, 15.0)

  def test_a_server_that_never_listens_times_out_and_is_killed(self):
    c = _SilentCluster(1, 1, startup_timeout_s=1.0)
    start = time.monotonic()
    with self.assertRaisesRegex(cluster.ClusterError, r"127\.0\.0\.1:\d+'\] did not accept "
                                r"connections within 1 s"):
      c.start()
    self.assertLess(time.monotonic() - start, 10.0)
    self.assertEqual(c.processes, ())

  def test_processes_stop_on_an_exception_in_the_block(self):
    c = _SilentCluster(2, 1)
    c._wait_until_up = lambda: None  # "up" at once: the block runs
    with self.assertRaises(KeyboardInterrupt):
      with c:
        processes = c.processes
        self.assertEqual([p.poll() for p in processes], [None, None])
        raise KeyboardInterrupt
    self.assertEqual([p.poll() is not None for p in processes], [True, True])

  def test_bad_arguments(self):
    for args, pattern in (((0, 1), "tasks=0"), ((1, 0), "devices_per_task=0"),
                          ((1, 1, "no job"), "job name")):
      with self.assertRaisesRegex(cluster.ClusterError, pattern):
        local_cluster.LocalCluster(*args)
    with self.assertRaisesRegex(cluster.ClusterError, "not started"):
      local_cluster.LocalCluster(1, 1).devices


if __name__ == "__main__":
  absltest.main()
