"""Partitioned training steps on a TensorFlow cluster: two local servers, two CPUs each.

This process never connects to a cluster (that changes the process-wide eager context):
it starts the servers (``LocalCluster``) and runs the client in a subprocess, which trains
tiny zoo models in float64 across the four remote devices with ``tf_tofu.function`` (its
first call connects) and reports, as JSON, the mismatches against the unpartitioned step,
the plan's bytes per link class and those counted in the partitioned GraphDef.
"""

import json
import socket
import subprocess
import sys
import time
from unittest import mock

import tensorflow as tf
from absl.testing import absltest

import tf_tofu
from tf_tofu import models
from tf_tofu.core import cluster, local_cluster, topology
from tf_tofu.layout.tiling import device_coords

W = "/job:worker/replica:0/task:{}/device:CPU:{}"
DEVICES = [W.format(t, d) for t in range(2) for d in range(2)]

# argv: cluster spec JSON, model keys. Trains each model 2 steps partitioned on every device
# of the cluster (float64), compares with the unpartitioned step, counts the bytes.
_CLIENT = r"""
import json, sys
import tensorflow as tf
tf.config.set_soft_device_placement(False)
import tf_tofu
from tf_tofu import models
from tf_tofu.core import cluster, topology
from tf_tofu.ops import counting
from tf_tofu.verify import equivalence
spec, keys = json.loads(sys.argv[1]), sys.argv[2].split(",")
# The second gpt run: a network faster than the local links, so the device order changes.
runs = [(k, None) for k in keys] + [("gpt", {"network": 1e11, "local": 1e9})]
out = {}
for key, bandwidth in runs:
  step = models.tiny(key, dtype="float64")
  inputs = [step.example_inputs(seed=i) for i in range(2)]
  ref = equivalence.Reference(step.fn, inputs)
  topo = topology.Topology(bandwidth or {})
  f = tf_tofu.function(step.fn, devices=cluster.ClusterDevices(spec, 2), topology=topo)
  mismatches = [str(m) for m in ref.compare(f)]
  plan = f.plan(*inputs[0])
  counted = counting.transfer_count(f.partitioned_graph_def(*inputs[0]))
  out[key + ("/fast_network" if bandwidth else "")] = {
      "mismatches": mismatches, "plan_links": plan.link_bytes,
      "counted_links": counting.link_bytes(counted, topo), "total": plan.total_bytes,
      "devices": list(plan.devices),
      "shard_devices": sorted({v.device for v in f.shard_variables.values()})}
try:
  tf_tofu.function(step.fn, devices=[%r])(*inputs[0])
  out["missing_device"] = "no error"
except cluster.ClusterError as e:
  out["missing_device"] = str(e)
print("RESULT " + json.dumps(out))
""" % W.format(1, 7)


def _result(run) -> dict:
  lines = [l for l in run.stdout.splitlines() if l.startswith("RESULT ")]
  if run.returncode or len(lines) != 1:
    raise AssertionError(f"client exited with {run.returncode}:\n{run.stderr[-4000:]}")
  return json.loads(lines[0][len("RESULT "):])


class ClusterRunTest(absltest.TestCase):

  def test_zoo_models_train_across_two_servers(self):
    start = time.monotonic()
    with local_cluster.LocalCluster(2, 2, startup_timeout_s=60) as c:
      run = subprocess.run([sys.executable, "-c", _CLIENT,
                            json.dumps(c.cluster_spec.as_dict()), "mlp,gpt,wresnet"],
                           capture_output=True, text=True, timeout=150)
    result = _result(run)
    for key in ("mlp", "gpt", "wresnet", "gpt/fast_network"):
      got = result[key]
      with self.subTest(key):
        self.assertEqual(got["mismatches"], [])  # float64, equivalence.RTOL / ATOL
        self.assertEqual(got["counted_links"], got["plan_links"])
        self.assertEqual(set(got["plan_links"]), {"local", "network"})
        self.assertEqual(sum(got["plan_links"].values()), got["total"])
        self.assertCountEqual(got["devices"], DEVICES)
        self.assertEqual(got["shard_devices"], DEVICES)  # the shards live on the servers
    self.assertEqual(result["gpt"]["devices"], DEVICES)  # task-major: level 1 crosses tasks
    self.assertNotEqual(result["gpt/fast_network"]["devices"], DEVICES)
    self.assertGreater(result["gpt/fast_network"]["plan_links"]["network"],
                       result["gpt"]["plan_links"]["network"])
    self.assertRegex(result["missing_device"],
                     r"task:1/device:CPU:7'\] are not in the cluster; its devices are .*"
                     r"task:1/device:CPU:1")
    print(f"cluster run: {time.monotonic() - start:.1f} s")

  def test_plan_crosses_the_network_with_its_cheapest_level(self):
    devices = cluster.ClusterDevices({"worker": ["h0:2222", "h1:2222"]}, 2)
    topo = topology.Topology()
    for key in ("mlp", "gpt"):
      step = models.tiny(key, dtype="float64")
      g = tf_tofu.trace(step.fn, *step.input_signature)
      plan = tf_tofu.plan(g, devices=devices, topology=topo)
      blind = tf_tofu.plan(g, devices=4)  # one task: the bytes objective
      self.assertEqual(plan.layouts, blind.layouts)
      self.assertEqual(plan.total_bytes, blind.total_bytes)
      # crossing[l]: the bytes of the pieces whose two devices differ at level l.
      ev_pairs = _pair_bytes(g, plan)
      crossing = [sum(b for (i, j), b in ev_pairs.items()
                      if device_coords(i, plan.factors)[l] != device_coords(j, plan.factors)[l])
                  for l in range(len(plan.factors))]
      self.assertEqual(plan.link_bytes["network"], min(crossing), key)
      self.assertEqual(plan.link_bytes["local"], plan.total_bytes - min(crossing))
      self.assertAlmostEqual(plan.comm_time,
                             plan.link_bytes["local"] / 1e10 + plan.link_bytes["network"] / 1e9)
      self.assertIn("bytes per link class: local", plan.report())

  def test_a_server_that_is_not_up_is_named_within_bounds(self):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    step = models.tiny("mlp", dtype="float64")
    f = tf_tofu.function(step.fn, devices=cluster.ClusterDevices(
        {"worker": [f"127.0.0.1:{port}"]}, 2), connect_timeout_s=5)
    self.assertEqual(f.devices, (W.format(0, 0), W.format(0, 1)))  # named, not connected
    start = time.monotonic()
    # The reachability probe refuses first; this process must never actually connect.
    with mock.patch.object(tf.config, "experimental_connect_to_cluster",
                           side_effect=AssertionError("connected")):
      with self.assertRaisesRegex(cluster.ClusterError, rf"cannot reach 127\.0\.0\.1:{port} "
                                  r"\(job 'worker' task 0"):
        f(*step.example_inputs(seed=0))
    self.assertLess(time.monotonic() - start, 10.0)


def _pair_bytes(g, plan):
  from tf_tofu.graph import view
  from tf_tofu.opdefs.registry import Describer
  from tf_tofu.search import evaluate
  d = Describer()
  return evaluate.evaluate(view.from_tofu_graph(g, d), plan.factors, plan.layouts,
                           plan.strategies, d).pair_bytes


if __name__ == "__main__":
  absltest.main()
