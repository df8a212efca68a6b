"""Static per-device peak memory of a schedule: liveness.

A graph runs as a *schedule*: its nodes in one topological order, each on
one device.  On device ``d`` at step ``s`` the live bytes are

    live_d(s) = persistent_d + sum of the buffers on d allocated at or before s
                               and read (on d) at or after s

and ``peak_d = max_s live_d(s)``, where

* *persistent*: variables (or their shards) and constants, for the whole run;
* a node's outputs are allocated on its device when it runs and freed after
  their last reader on that device runs (at once if none reads them there);
* a tensor read on another device is a *received buffer*, counted on the
  receiver from the producer's step (the send starts then) to its last
  reader on the receiver;
* aliasing ops (``ALIAS_OPS``: ``Identity``, ``ReadVariableOp``, ``Reshape``,
  ...) allocate nothing on their own device: their output is their input's
  buffer, which stays live as long as either is read (a read of a variable is
  the variable's buffer, already persistent).

Two schedules use it: a plan's, before any rewrite
(:mod:`tf_tofu.layout.memory`), and a partitioned GraphDef's
(:mod:`tf_tofu.rewrite.memory`).  The *ideal* per-device footprint of a
partition across k devices is the single-device peak over k.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

ALIAS_OPS = frozenset({"Identity", "ReadVariableOp", "Reshape", "Squeeze", "ExpandDims",
                       "Snapshot", "StopGradient", "EnsureShape"})
PERSISTENT_OPS = frozenset({"Const", "VarHandleOp"})


@dataclasses.dataclass(frozen=True)
class Step:
  """One node of a schedule: its device, the tensors it reads, the bytes of its outputs."""

  name: str
  device: str
  op_type: str
  inputs: tuple[str, ...]           # tensor names "node:i"
  output_bytes: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
  """Peak bytes per device of a schedule, and the persistent part of each."""

  peak: dict[str, int]
  persistent: dict[str, int]

  @property
  def worst(self) -> int:
    return max(self.peak.values()) if self.peak else 0

  def ratio_to(self, single_device_peak: int) -> float:
    """Worst device against the ideal ``single_device_peak / k``."""
    ideal = single_device_peak / max(len(self.peak), 1)
    return self.worst / ideal if ideal else 0.0

  def summary(self, single_device_peak: int) -> dict:
    """The Plan's ``memory`` entry: worst, ideal, ratio, per device."""
    k = max(len(self.peak), 1)
    return {"worst": int(self.worst), "ideal": int(single_device_peak // k),
            "single_device": int(single_device_peak),
            "ratio": round(self.ratio_to(single_device_peak), 4),
            "per_device": {d: int(b) for d, b in sorted(self.peak.items())},
            "persistent": {d: int(b) for d, b in sorted(self.persistent.items())}}


def peak_memory(schedule: Sequence[Step], persistent: Mapping[str, int]) -> MemoryEstimate:
  """Liveness over ``schedule`` (module docstring); ``persistent`` bytes per device.

  Buffers are numbered as they appear; each has a device, a size, the step it is born
  at and the last step that reads it, and the live bytes per device are the running sum
  of ``+size`` at birth and ``-size`` after the last read.  The schedule lists a node
  before its readers (both schedules above do; a node's inputs outside the schedule are
  not counted)."""
  step_of = {s.name: i for i, s in enumerate(schedule)}
  nbytes_of: dict[str, int] = {}
  buffer_of: dict[tuple[str, str], int] = {}  # (tensor, device) -> the buffer it uses there
  device, size, born, last = [], [], [], []
  for i, s in enumerate(schedule):
    here = s.device
    for t in s.inputs:
      b = buffer_of.get((t, here))
      if b is None:
        src = step_of.get(t.partition(":")[0])
        if src is None:
          continue  # not a node of the schedule
        b = buffer_of[(t, here)] = len(size)  # read on another device: a received buffer
        device.append(here), size.append(nbytes_of.get(t, 0)), born.append(src)
        last.append(i)
      else:
        last[b] = i
    alias = None
    if s.op_type in ALIAS_OPS and s.inputs:
      alias = buffer_of.get((s.inputs[0], here))
    # A read of a variable is the variable's buffer; constants are persistent.
    own = s.op_type not in PERSISTENT_OPS and s.op_type != "ReadVariableOp"
    for o, nbytes in enumerate(s.output_bytes):
      t = f"{s.name}:{o}"
      nbytes_of[t] = nbytes
      if alias is not None:
        buffer_of[(t, here)] = alias
        last[alias] = i
      else:
        buffer_of[(t, here)] = len(size)
        device.append(here), size.append(nbytes if own else 0), born.append(i), last.append(i)
  devices = sorted({s.device for s in schedule} | set(persistent))
  running = _peak_running_sums(devices, device, size, born, last)
  peak = {d: int(persistent.get(d, 0) + max(0, running.get(d, 0))) for d in devices}
  return MemoryEstimate(peak=peak, persistent={d: int(persistent.get(d, 0)) for d in devices})


def _peak_running_sums(devices: Sequence[str], device: Sequence[str], size: Sequence[int],
                       born: Sequence[int], last: Sequence[int]) -> dict[str, int]:
  """Per device, the largest running sum of ``+size`` at step ``born`` and ``-size`` at
  step ``last + 1`` over its buffers (events at one step are summed first); integers
  throughout, memory in the number of buffers, not steps x devices."""
  size_a = np.asarray(size, np.int64)
  keep = size_a != 0
  if not keep.any():
    return {}
  index = {d: j for j, d in enumerate(devices)}
  rows = np.asarray([index[d] for d in device], np.int64)[keep]
  size_a = size_a[keep]
  span = max(max(last), max(born)) + 2
  keys = np.concatenate([rows * span + np.asarray(born, np.int64)[keep],
                         rows * span + np.asarray(last, np.int64)[keep] + 1])
  uniq, inverse = np.unique(keys, return_inverse=True)
  step_sum = np.zeros(len(uniq), np.int64)
  np.add.at(step_sum, inverse.ravel(), np.concatenate([size_a, -size_a]))
  row = uniq // span
  starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
  total = np.cumsum(step_sum)
  before = np.r_[0, total][starts]  # the running sum where each device's events start
  running = total - np.repeat(before, np.diff(np.r_[starts, len(uniq)]))
  best = np.maximum.reduceat(running, starts)
  return {devices[int(r)]: int(b) for r, b in zip(row[starts], best)}


def tofu_graph_peak(graph) -> int:
  """Single-device peak of an ingested training step (a :class:`tf_tofu.TofuGraph`): its
  ops in their topological order, every tensor sized from the graph's static shapes."""
  schedule = []
  persistent = sum(v.nbytes for v in graph.variables)
  for op in graph.ops.values():
    outs = tuple(graph.tensors[t].nbytes for t in op.outputs)
    if op.op_type in PERSISTENT_OPS:
      persistent += sum(outs)
    schedule.append(Step(op.name, "single", op.op_type, tuple(op.inputs), outs))
  return peak_memory(schedule, {"single": persistent}).worst


__all__ = ["ALIAS_OPS", "PERSISTENT_OPS", "MemoryEstimate", "Step", "peak_memory",
           "tofu_graph_peak"]
