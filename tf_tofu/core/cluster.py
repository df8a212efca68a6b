"""TensorFlow clusters: which devices a cluster has, whether it is up, connecting to it.

tf_tofu runs on TensorFlow's own distributed engine (gRPC ``tf.distribute.Server``
processes, ``tf.train.ClusterSpec``, ``TF_CONFIG``, remote devices named
``/job:J/replica:0/task:T/device:D``); this module only names, checks and
starts what that engine needs (docs/design.md section 3):

* :func:`cluster_spec_of` reads a cluster however the user has it: a
  ``tf.train.ClusterSpec``, a dict ``{job: [addresses]}``, a cluster resolver,
  a ``TF_CONFIG`` JSON string, or the ``TF_CONFIG`` environment variable;
* :func:`cluster_devices` names the devices of every task of a cluster;
* :func:`check_reachable` and :func:`connect` check that every server accepts
  connections, with bounded waits (TensorFlow itself waits forever for a
  server that is not up), then connect this process to the cluster;
* :func:`check_in_cluster` refuses a device name the cluster does not have;
* :class:`ClusterDevices` names every device of a cluster without connecting
  (planning needs only names), and :func:`names_of` reads the devices of a
  cluster given as ``devices=`` (``core.devices.resolve``);
  :func:`ensure_connected` connects a process that runs a plan (bounded) and
  checks that its devices exist;
and, in modules of their own, ``local_cluster.LocalCluster`` starts servers
on this machine (tests, demos) and ``topology.Topology`` gives the links
between devices a class and a bandwidth.

A server process exposes ``device_count`` CPU devices
(``tf.compat.v1.ConfigProto(device_count={"CPU": k})``); logical-device
configuration inside a server process is not exposed to its clients.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import socket
import threading
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import tensorflow as tf

from tf_tofu.core import devices as devices_lib
from tf_tofu.core.devices import canonical
from tf_tofu.core.errors import TofuError

JOB_NAME = re.compile(r"[a-zA-Z][_a-zA-Z0-9]*\Z")  # what TensorFlow's device names accept
_HOW = ("pass a tf.train.ClusterSpec, a dict like {'worker': ['host0:2222', 'host1:2222']}, "
        "a cluster resolver, or a TF_CONFIG JSON string like '{\"cluster\": {\"worker\": "
        "[\"host0:2222\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}'")


class ClusterError(TofuError):
  """A cluster that is malformed, not reachable, or lacks a device asked for."""


Cluster = Union[tf.train.ClusterSpec, Mapping[str, Any], str, None,
                "tf.distribute.cluster_resolver.ClusterResolver"]


# ----------------------------------------------------------------------------- cluster specs


def split_address(address: str) -> tuple[str, int]:
  """``"host:port"`` (or ``"[v6 address]:port"``) -> ``(host, port)``."""
  host, sep, port = str(address).rpartition(":")
  if host.startswith("[") and host.endswith("]"):
    host = host[1:-1]
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ClusterError(f"address {address!r} is not 'host:port' with a port in 1..65535; "
                       "write it like '10.0.0.1:2222' or 'localhost:2222'")
  return host, int(port)


def _tasks_of(job: str, tasks: Any) -> dict[int, str]:
  """A job's tasks as ``{task index: address}``, checked."""
  if isinstance(tasks, Mapping):
    out = {}
    for k, v in tasks.items():
      if isinstance(k, str) and k.isdigit():
        k = int(k)
      if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ClusterError(f"job {job!r}: task index {k!r} is not a non-negative int; "
                           "give the tasks as a list of addresses or {index: address}")
      out[k] = v
  elif isinstance(tasks, (list, tuple)):
    out = dict(enumerate(tasks))
  else:
    raise ClusterError(f"job {job!r}: tasks {tasks!r} must be a list of 'host:port' addresses "
                       "(or a dict {task index: address})")
  if not out:
    raise ClusterError(f"job {job!r} has no tasks; list at least one 'host:port' address")
  for task, address in out.items():
    if not isinstance(address, str):
      raise ClusterError(f"job {job!r} task {task}: address {address!r} is not a string; "
                         "write it like 'host:2222'")
    split_address(address)
  return out


def _checked_spec(jobs: Any, source: str) -> tf.train.ClusterSpec:
  """``jobs`` (``{job: tasks}``) as a ClusterSpec, every name and address checked."""
  if not isinstance(jobs, Mapping):
    raise ClusterError(f"{source}: the cluster {jobs!r} is not a mapping from job names to "
                       f"addresses; {_HOW}")
  if not jobs:
    raise ClusterError(f"{source}: the cluster has no jobs; {_HOW}")
  checked = {}
  for job, tasks in jobs.items():
    if not isinstance(job, str) or not JOB_NAME.match(job):
      raise ClusterError(f"{source}: job name {job!r} is not a letter followed by letters, "
                         "digits or '_' (like 'worker')")
    checked[job] = _tasks_of(job, tasks)
  return tf.train.ClusterSpec(checked)


def _from_json(text: str, source: str) -> tf.train.ClusterSpec:
  """A TF_CONFIG string (``{"cluster": {...}, "task": {...}}``) or a bare ``{job: tasks}``."""
  try:
    value = json.loads(text)
  except ValueError as e:
    raise ClusterError(f"{source} is not JSON ({e}): {text[:200]!r}; {_HOW}") from None
  if isinstance(value, Mapping) and "cluster" in value:
    value = value["cluster"]
  return _checked_spec(value, source)


def cluster_spec_of(cluster: Cluster = None) -> tf.train.ClusterSpec:
  """The ``tf.train.ClusterSpec`` of ``cluster``.

  ``cluster`` is a ``tf.train.ClusterSpec``; a dict ``{job: [addresses]}``
  (or ``{job: {task index: address}}``); a
  ``tf.distribute.cluster_resolver.ClusterResolver`` (its ``cluster_spec()``);
  a ``TF_CONFIG`` JSON string (its ``"cluster"``, or a bare ``{job: ...}``
  object); or None, for the ``TF_CONFIG`` environment variable.  Every job
  name and ``host:port`` address is checked.
  """
  if isinstance(cluster, tf.train.ClusterSpec):
    return _checked_spec(cluster.as_dict(), "the ClusterSpec")
  if isinstance(cluster, tf.distribute.cluster_resolver.ClusterResolver):
    return _checked_spec(cluster.cluster_spec().as_dict(),
                         f"the cluster resolver {type(cluster).__name__}")
  if isinstance(cluster, Mapping):
    return _checked_spec(cluster, "the cluster dict")
  if isinstance(cluster, str):
    return _from_json(cluster, "the cluster string")
  if cluster is None:
    text = os.environ.get("TF_CONFIG")
    if not text:
      raise ClusterError(f"no cluster given and the TF_CONFIG environment variable is not set; "
                         f"set TF_CONFIG or {_HOW}")
    return _from_json(text, "the TF_CONFIG environment variable")
  raise ClusterError(f"cluster {cluster!r} (a {type(cluster).__name__}) is not a cluster; {_HOW}")


def _jobs(spec: tf.train.ClusterSpec, job: Union[str, Sequence[str], None]) -> list[str]:
  """The jobs asked for: ``job`` (a name or names), or every job of ``spec``."""
  if job is None:
    return list(spec.jobs)
  names = [job] if isinstance(job, str) else list(job)
  for name in names:
    if name not in spec.jobs:
      raise ClusterError(f"job {name!r} is not in the cluster; its jobs are {list(spec.jobs)}")
  return names


def _count(devices_per_task: Union[int, Mapping], job: str, task: int) -> int:
  """How many devices task ``task`` of ``job`` has (module ``cluster_devices``)."""
  n = devices_per_task
  if isinstance(devices_per_task, Mapping):
    n = devices_per_task.get((job, task), devices_per_task.get(job))
    if n is None:
      raise ClusterError(f"devices_per_task {dict(devices_per_task)!r} gives no count for job "
                         f"{job!r} task {task}; add {job!r}: <devices per task>")
  if isinstance(n, bool) or not isinstance(n, int) or n < 0:
    raise ClusterError(f"devices per task {n!r} (job {job!r} task {task}) is not a "
                       "non-negative int")
  return n


def cluster_devices(cluster: Cluster, devices_per_task: Union[int, Mapping],
                    device_type: str = "CPU",
                    job: Union[str, Sequence[str], None] = None) -> tuple[str, ...]:
  """The device names ``/job:J/replica:0/task:T/device:TYPE:D`` of the cluster.

  Every task of ``job`` (a name, names, or every job of the cluster), jobs in
  the cluster's order, tasks in index order, devices ``0..n-1`` of each.
  ``devices_per_task`` is one count for every task, or a dict from job name
  (or ``(job, task)``, which wins) to count.
  """
  spec = cluster_spec_of(cluster)
  names = []
  for j in _jobs(spec, job):
    for task in spec.task_indices(j):
      for d in range(_count(devices_per_task, j, task)):
        names.append(canonical(f"/job:{j}/replica:0/task:{task}/device:{device_type}:{d}"))
  return tuple(names)


def addresses_of(cluster: Cluster) -> dict[tuple[str, int], str]:
  """``{(job, task): "host:port"}`` for every task of the cluster, in order."""
  spec = cluster_spec_of(cluster)
  return {(j, t): spec.task_address(j, t) for j in spec.jobs for t in spec.task_indices(j)}


# ----------------------------------------------------------------------------- reachability


def probe(address: str, timeout_s: float) -> Optional[str]:
  """None when ``address`` accepts a TCP connection within ``timeout_s``, else why not."""
  host, port = split_address(address)
  try:
    with socket.create_connection((host, port), timeout=timeout_s):
      return None
  except TimeoutError:
    return f"no answer within {timeout_s:g} s"
  except OSError as e:
    return e.strerror or type(e).__name__


def check_reachable(cluster: Cluster = None, timeout_s: float = 3.0,
                    skip: Sequence[tuple[str, int]] = ()) -> None:
  """Opens a TCP connection to every task's address (all at once, each bounded by
  ``timeout_s``); raises :class:`ClusterError` naming every address that did not
  accept one.  ``skip``: ``(job, task)`` pairs not to check (this process's own)."""
  targets = {k: a for k, a in addresses_of(cluster).items() if k not in set(skip)}
  if not targets:
    return
  with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(targets))) as pool:
    why = dict(zip(targets, pool.map(lambda a: probe(a, timeout_s), targets.values())))
  down = [f"{targets[k]} (job {k[0]!r} task {k[1]}: {why[k]})" for k in targets if why[k]]
  if down:
    raise ClusterError(f"cannot reach {', '.join(down)}; start the tf.distribute.Server of "
                       "each such task (or wait until it is up), or fix the addresses in the "
                       "cluster spec / TF_CONFIG")


def _bounded(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
  """``fn()`` run in a helper thread; a :class:`ClusterError` if it has not returned
  within ``timeout_s`` (TensorFlow's own waits for a server have no bound)."""
  out = {}

  def run():
    try:
      out["value"] = fn()
    except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
      out["error"] = e

  thread = threading.Thread(target=run, name="tf_tofu-cluster", daemon=True)
  thread.start()
  thread.join(timeout_s)
  if thread.is_alive():
    raise ClusterError(f"{what} did not finish within {timeout_s:g} s: a server accepts TCP "
                       "connections but does not answer as a TensorFlow server (a different "
                       "program on that port, or one still starting); check the addresses, "
                       "then retry in a new process (this one's TensorFlow context is stuck)")
  if "error" in out:
    raise out["error"]
  return out["value"]


def connect(cluster: Cluster = None, timeout_s: float = 30.0, job_name: str = "localhost",
            task_index: int = 0) -> list[str]:
  """Connects this process to the cluster; returns the cluster's device names as
  TensorFlow reports them (``tf.config.list_logical_devices()`` of the cluster's
  jobs), in job, task and device order.

  First :func:`check_reachable` (bounded), then
  ``tf.config.experimental_connect_to_cluster`` and the device listing, bounded
  by ``timeout_s`` together.  This changes the process-wide eager context: from
  then on ops may be placed on the remote devices.  ``job_name``/``task_index``
  name this process when the cluster lists it (otherwise TensorFlow adds a
  ``localhost`` job for it).
  """
  spec = cluster_spec_of(cluster)
  if not tf.executing_eagerly():
    raise ClusterError("connect() must be called eagerly, not inside a tf.function or graph")
  check_reachable(spec, timeout_s=min(timeout_s, 5.0), skip=[(job_name, task_index)])

  def go():
    tf.config.experimental_connect_to_cluster(spec, job_name=job_name, task_index=task_index)
    return tf.config.list_logical_devices()

  try:
    listed = _bounded(go, timeout_s, f"connecting to the cluster {spec.as_dict()}")
  except tf.errors.OpError as e:
    raise ClusterError(f"TensorFlow could not connect to the cluster {spec.as_dict()}: "
                       f"{e.message}; check that every server runs this cluster spec") from None
  return _in_cluster_order(spec, listed)


def _in_cluster_order(spec: tf.train.ClusterSpec, listed) -> list[str]:
  """The names of the logical devices ``listed`` that belong to ``spec``'s jobs,
  canonical, in job, task and device order."""
  order = {j: i for i, j in enumerate(spec.jobs)}
  names = [canonical(d.name) for d in listed]
  names = [n for n in names if tf.DeviceSpec.from_string(n).job in order]
  return sorted(names, key=lambda n: (order[tf.DeviceSpec.from_string(n).job],
                                      devices_lib.identity(n)))


def check_in_cluster(devices: Sequence[str], available: Sequence[str]) -> tuple[str, ...]:
  """``devices`` spelled as in ``available`` (a cluster's device names, e.g. from
  :func:`cluster_devices` or :func:`connect`); a :class:`ClusterError` names each
  device that is not there and lists what is."""
  known = {devices_lib.identity(a): a for a in available}
  out, missing = [], []
  for d in devices:
    key = devices_lib.identity(d)
    if key in known:
      out.append(known[key])
    else:
      missing.append(d)
  if missing:
    raise ClusterError(f"device(s) {missing} are not in the cluster; its devices are "
                       f"{list(available)}")
  return tuple(out)


# ----------------------------------------------------------------------------- devices=


# Jobs that hold no compute by convention; a whole cluster's devices leave them out.
NON_COMPUTE_JOBS = ("ps", "evaluator")


def compute_jobs(spec: tf.train.ClusterSpec) -> list[str]:
  """The jobs whose devices a plan uses when it is given a whole cluster: every job
  but ``ps`` and ``evaluator`` (all of them if that leaves none)."""
  jobs = [j for j in spec.jobs if j not in NON_COMPUTE_JOBS]
  return jobs or list(spec.jobs)


@dataclasses.dataclass(frozen=True)
class ClusterDevices:
  """Every device of a cluster, by name, without connecting to it.

  ``ClusterDevices(spec, devices_per_task=4, device_type="GPU")`` names
  ``/job:J/replica:0/task:T/device:GPU:D`` for every task of ``job`` (a name,
  names, or None: :func:`compute_jobs`) and ``D < devices_per_task`` (one count,
  or a dict by job or ``(job, task)``).  ``cluster`` is anything
  :func:`cluster_spec_of` reads (None: the ``TF_CONFIG`` environment variable).
  Pass it as ``devices=`` to ``tf_tofu.plan`` / ``tf_tofu.function``.
  """

  cluster: Any = None
  devices_per_task: Union[int, Mapping] = 1
  device_type: str = "CPU"
  job: Union[str, Sequence[str], None] = None

  @property
  def spec(self) -> tf.train.ClusterSpec:
    return cluster_spec_of(self.cluster)

  def names(self) -> tuple[str, ...]:
    spec = self.spec
    return cluster_devices(spec, self.devices_per_task, self.device_type,
                           self.job if self.job is not None else compute_jobs(spec))


def is_cluster(value: Any) -> bool:
  """Whether ``devices=value`` gives a cluster rather than a count or device names: a
  ClusterSpec, a resolver, a dict, :class:`ClusterDevices`, a TF_CONFIG JSON string, or
  the string ``"TF_CONFIG"`` (the environment variable)."""
  return (isinstance(value, (tf.train.ClusterSpec, ClusterDevices, Mapping,
                             tf.distribute.cluster_resolver.ClusterResolver))
          or (isinstance(value, str) and (value.lstrip().startswith("{")
                                           or value == "TF_CONFIG")))


def spec_of_devices(value: Any) -> Optional[tf.train.ClusterSpec]:
  """The ClusterSpec a ``devices=`` value carries, or None for a count or names."""
  if not is_cluster(value):
    return None
  if isinstance(value, ClusterDevices):
    return value.spec
  return cluster_spec_of(None if value == "TF_CONFIG" else value)


def connected_devices(spec: tf.train.ClusterSpec) -> list[str]:
  """The devices of ``spec``'s jobs that this process sees (it is connected), in job,
  task and device order; [] when it is not connected."""
  from tensorflow.python.eager import context
  if context.context().get_server_def() is None:
    return []
  return _in_cluster_order(spec, tf.config.list_logical_devices())


def names_of(value: Any) -> tuple[str, ...]:
  """The device names of a cluster given as ``devices=`` (see :func:`is_cluster`).

  :class:`ClusterDevices` names them without connecting.  Any other cluster:
  the devices this process sees in its :func:`compute_jobs` (it must be
  connected: the number of devices per task is not in a cluster spec),
  accelerators when there are any, else CPUs.
  """
  if isinstance(value, ClusterDevices):
    return value.names()
  spec = spec_of_devices(value)
  jobs = compute_jobs(spec)
  seen = [n for n in connected_devices(spec) if tf.DeviceSpec.from_string(n).job in jobs]
  kinds = [tf.DeviceSpec.from_string(n).device_type for n in seen]
  accel = [n for n, t in zip(seen, kinds) if t not in ("CPU",)]
  chosen = accel or [n for n, t in zip(seen, kinds) if t == "CPU"]
  if not chosen:
    raise ClusterError(
        f"devices=<the cluster {spec.as_dict()}>: this process is not connected to it, so "
        "how many devices each task has is unknown; pass devices=tf_tofu.core.cluster."
        "ClusterDevices(cluster, devices_per_task=N, device_type='GPU') (planning needs no "
        "connection), the device names, or connect first (tf_tofu.core.cluster.connect)")
  return tuple(chosen)


def ensure_connected(devices: Sequence[str], cluster: Cluster = None,
                     timeout_s: float = 30.0) -> tuple[str, ...]:
  """Makes sure this process can run ops on ``devices`` (names); returns them as the
  cluster spells them.

  Local devices need nothing.  For remote ones (a job other than ``localhost``):
  when the process is not connected yet, :func:`connect` (bounded, every address
  probed first) to ``cluster`` (None: the ``TF_CONFIG`` environment variable);
  then :func:`check_in_cluster` against the devices the cluster reports.
  """
  remote = [d for d in devices if devices_lib.identity(d)[0] != "localhost"]
  if not remote:
    return tuple(devices)
  from tensorflow.python.eager import context
  if context.context().get_server_def() is None:
    if cluster is None and not os.environ.get("TF_CONFIG"):
      raise ClusterError(f"device(s) {remote[:3]} are remote and this process is not "
                         "connected to a cluster; pass the cluster (devices=a "
                         "tf.train.ClusterSpec / ClusterDevices / TF_CONFIG), set TF_CONFIG, "
                         "or call tf_tofu.core.cluster.connect(cluster) first")
    available = connect(cluster, timeout_s=timeout_s)
  else:
    available = [canonical(d.name) for d in tf.config.list_logical_devices()]
  return check_in_cluster(devices, available)


__all__ = ["ClusterDevices", "ClusterError", "JOB_NAME", "addresses_of", "check_in_cluster",
           "check_reachable", "cluster_devices", "cluster_spec_of", "compute_jobs", "connect",
           "connected_devices", "ensure_connected", "is_cluster", "names_of", "probe",
           "spec_of_devices", "split_address"]
