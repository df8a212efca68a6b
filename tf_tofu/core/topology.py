"""The links between devices: a class per pair of devices, a bandwidth per class.

Devices of one task (one process, one machine) share a ``"local"`` link;
devices of different tasks talk over the ``"network"``.  Bytes moved per link
class become a predicted communication time (:meth:`Topology.seconds`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

from tf_tofu.core import devices as devices_lib
from tf_tofu.core.cluster import ClusterError

LOCAL = "local"      # devices of one task (one process, one machine)
NETWORK = "network"  # devices of different tasks: the link between them is the network

DEFAULT_BANDWIDTH = {LOCAL: 1e10, NETWORK: 1e9}  # bytes per second


def _task_of(name: str) -> tuple:
  """``(job, replica, task)`` of a device name; no job means this process."""
  return devices_lib.identity(name)[:3]


@dataclasses.dataclass(frozen=True)
class Topology:
  """The links between devices: a class per pair of devices, a bandwidth per class.

  Two devices of one task (same job, replica and task; a name without a job is
  this process's) share a ``"local"`` link; devices of different tasks talk
  over the ``"network"``.  Moving ``b`` bytes over a link of class ``c`` takes
  ``b / bandwidth_of(c)`` seconds; a step's communication time is the sum over
  classes (links do not overlap in this model).  The default bandwidths are
  10 GB/s locally and 1 GB/s (ten times slower) over the network, in bytes per
  second; ``Topology(bandwidth={"network": 1.25e9})`` overrides one.  With every
  device in one task there is a single link class, so time is bytes / 10 GB/s.
  """

  # Given as a mapping {class: bytes/s} (the classes not given keep their default);
  # held as sorted (class, bytes/s) pairs, so that a Topology is hashable.
  bandwidth: Mapping[str, float] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    given = dict(self.bandwidth)
    unknown = sorted(set(given) - set(DEFAULT_BANDWIDTH))
    if unknown:
      raise ClusterError(f"link class(es) {unknown} are unknown; the classes are "
                         f"{sorted(DEFAULT_BANDWIDTH)}")
    for cls, bw in given.items():
      if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not 0 < bw < math.inf:
        raise ClusterError(f"bandwidth {bw!r} of link class {cls!r} is not a positive number "
                           "of bytes per second")
    merged = {**DEFAULT_BANDWIDTH, **{k: float(v) for k, v in given.items()}}
    object.__setattr__(self, "bandwidth", tuple(sorted(merged.items())))

  @property
  def classes(self) -> tuple[str, ...]:
    """The link classes, fastest first."""
    return tuple(sorted((c for c, _ in self.bandwidth), key=lambda c: -self.bandwidth_of(c)))

  def bandwidth_of(self, cls: str) -> float:
    """Bytes per second of link class ``cls``."""
    for c, bw in self.bandwidth:
      if c == cls:
        return bw
    raise ClusterError(f"link class {cls!r} is unknown; the classes are {list(self.classes)}")

  def link_class(self, a: str, b: str) -> str:
    """The class of the link between devices ``a`` and ``b``."""
    return LOCAL if _task_of(a) == _task_of(b) else NETWORK

  def link_classes(self, devices: Sequence[str]) -> tuple[str, ...]:
    """The classes of the links between distinct devices of ``devices``, fastest first."""
    groups = self.groups(devices)
    found = ({LOCAL} if any(len(g) > 1 for g in groups) else set()) | (
        {NETWORK} if len(groups) > 1 else set())
    return tuple(c for c in self.classes if c in found)

  def seconds(self, bytes_by_class: Mapping[str, float]) -> float:
    """Predicted time: the sum over classes of bytes / bandwidth."""
    total = 0.0
    for cls, n in bytes_by_class.items():
      if n < 0:
        raise ClusterError(f"bytes {n!r} over link class {cls!r} is negative")
      total += n / self.bandwidth_of(cls)
    return total

  def groups(self, devices: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """``devices`` grouped by task: tasks in order of first appearance, each task's
    devices in the order given."""
    by_task: dict[tuple, list[str]] = {}
    for d in devices:
      by_task.setdefault(_task_of(d), []).append(d)
    return tuple(tuple(g) for g in by_task.values())


__all__ = ["DEFAULT_BANDWIDTH", "LOCAL", "NETWORK", "Topology"]
