"""Device lists: an int means the first k local accelerators, or logical CPUs."""

from __future__ import annotations

import functools
from typing import Any, Sequence, Union

import tensorflow as tf
from tf_tofu.core.errors import TofuError

# An int, device names, or a cluster (tf.train.ClusterSpec, resolver, dict, TF_CONFIG JSON,
# "TF_CONFIG", core.cluster.ClusterDevices: see core.cluster.names_of).
Devices = Union[int, Sequence[str], Any]


def canonical(name: str) -> str:
  """``"/GPU:0"`` -> ``"/device:GPU:0"``; full names (with job/task) are kept as they are."""
  try:
    spec = tf.DeviceSpec.from_string(name)
  except ValueError as e:
    raise TofuError(f"device {name!r} is not a device name ({e}); write it like '/GPU:0' or "
                     "'/job:worker/task:1/device:GPU:0'") from None
  if spec.device_type is None or spec.device_index is None:
    raise TofuError(f"device {name!r} must name a type and an index, like '/GPU:0'")
  return spec.to_string()


def split_cpu(k: int) -> None:
  """Splits the host CPU into ``k`` logical devices, if TensorFlow has not started yet
  (afterwards the split is fixed; :func:`resolve` says when there are too few)."""
  cpus = tf.config.list_physical_devices("CPU")
  try:
    tf.config.set_logical_device_configuration(cpus[0],
                                               [tf.config.LogicalDeviceConfiguration()] * k)
  except RuntimeError:
    pass


@functools.lru_cache(maxsize=4096)
def identity(name: str) -> tuple:
  """What makes two spellings the same device: a name without job, replica and task is
  local (``/CPU:0`` is ``/job:localhost/replica:0/task:0/device:CPU:0``).  Kept per
  name: a plan's link classes ask it for both ends of every pair of devices."""
  spec = tf.DeviceSpec.from_string(name)
  local = spec.job is None and spec.replica is None and spec.task is None
  job = "localhost" if local else spec.job
  return (job, spec.replica or 0, spec.task or 0, spec.device_type.upper(), spec.device_index)


def resolve(devices: Devices, must_exist: bool = False) -> tuple[str, ...]:
  """The device names a plan uses.

  ``devices`` as an int k: the first k local GPUs when there are that many,
  otherwise the first k logical CPU devices (``tf.config`` must have split
  the CPU into at least k when ``must_exist``; planning alone only needs the
  names).  As a list: those names, canonicalised, without duplicates (remote
  names, ``/job:worker/replica:0/task:1/device:GPU:0``, too: planning needs
  no connection).  A cluster (``tf.train.ClusterSpec``, a cluster resolver, a
  ``{job: [addresses]}`` dict, a ``TF_CONFIG`` JSON string or ``"TF_CONFIG"``,
  ``core.cluster.ClusterDevices``): its devices (``core.cluster.names_of``).
  ``must_exist`` checks local names only; remote ones are checked when the
  plan runs (``core.cluster.ensure_connected``).
  """
  from tf_tofu.core import cluster as cluster_lib  # cluster imports this module
  if cluster_lib.is_cluster(devices):
    return resolve(list(cluster_lib.names_of(devices)))
  if isinstance(devices, bool) or not isinstance(devices, (int, list, tuple)):
    raise TypeError(f"devices must be an int, a list of device names or a cluster (a "
                    f"tf.train.ClusterSpec, resolver, dict or TF_CONFIG), got {devices!r}")
  if isinstance(devices, int):
    if devices < 1:
      raise TofuError(f"devices={devices}: need at least one device")
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) >= devices:
      return tuple(canonical(d.name) for d in gpus[:devices])
    cpus = tf.config.list_logical_devices("CPU")
    if len(cpus) >= devices:
      return tuple(canonical(d.name) for d in cpus[:devices])
    if must_exist:
      raise TofuError(
          f"devices={devices}: this machine has {len(gpus)} GPUs and {len(cpus)} logical CPU "
          f"devices; split the CPU first with tf.config.set_logical_device_configuration("
          f"cpu, [tf.config.LogicalDeviceConfiguration()] * {devices}) or pass fewer devices")
    return tuple(f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(devices))
  if not devices:
    raise TofuError("devices is an empty list; name at least one device")
  if not all(isinstance(d, str) for d in devices):
    raise TypeError(f"devices must be device names (strings), got {list(devices)!r}")
  names = tuple(canonical(d) for d in devices)
  seen = {}
  for raw, name in zip(devices, names):
    key = identity(name)
    if key in seen:
      raise TofuError(f"device {raw!r} is listed twice (also as {seen[key]!r}); each device "
                       "may appear once")
    seen[key] = raw
  if must_exist:
    names_local = [(raw, n) for raw, n in zip(devices, names) if identity(n)[0] == "localhost"]
    known = {canonical(d.name) for d in tf.config.list_logical_devices()}
    short = {tf.DeviceSpec.from_string(k).replace(job=None, replica=None, task=None).to_string()
             for k in known}
    for raw, name in names_local:
      bare = tf.DeviceSpec.from_string(name).replace(job=None, replica=None, task=None).to_string()
      if name not in known and bare not in short:
        raise TofuError(f"device {raw!r} does not exist here; known devices: {sorted(known)}")
  return names
