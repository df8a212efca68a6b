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
  """Liveness over ``schedule`` (module docstring); ``persistent`` bytes per device."""
  device_of = {s.name: s.device for s in schedule}
  step_of = {s.name: i for i, s in enumerate(schedule)}
  nbytes_of: dict[str, int] = {}
  # The buffer a tensor uses on a device: (tensor that owns it, device).
  buffer_of: dict[tuple[str, str], tuple[str, str]] = {}
  size: dict[tuple[str, str], int] = {}
  born: dict[tuple[str, str], int] = {}
  last: dict[tuple[str, str], int] = {}
  for i, s in enumerate(schedule):
    for t in s.inputs:
      src = t.split(":")[0]
      if src not in device_of:
        continue
      key = (t, s.device)
      if key not in buffer_of:  # read on another device: a received buffer
        buffer_of[key] = key
        size[key], born[key] = nbytes_of.get(t, 0), step_of[src]
      last[buffer_of[key]] = i
    for o, nbytes in enumerate(s.output_bytes):
      t = f"{s.name}:{o}"
      key = (t, s.device)
      nbytes_of[t] = nbytes
      if s.op_type in ALIAS_OPS and s.inputs and (s.inputs[0], s.device) in buffer_of:
        buffer_of[key] = buffer_of[(s.inputs[0], s.device)]
      else:
        buffer_of[key] = key
        # A read of a variable is the variable's buffer; constants are persistent.
        own = s.op_type not in PERSISTENT_OPS and s.op_type != "ReadVariableOp"
        size[key], born[key] = (nbytes if own else 0), i
      last[buffer_of[key]] = max(last.get(buffer_of[key], i), i)
  devices = sorted(set(device_of.values()) | set(persistent))
  delta = {d: np.zeros(len(schedule) + 1, np.int64) for d in devices}
  for key, b in size.items():
    if b:
      delta[key[1]][born[key]] += b
      delta[key[1]][last.get(key, born[key]) + 1] -= b
  peak = {d: int(persistent.get(d, 0) + max(0, int(np.cumsum(delta[d]).max(initial=0))))
          for d in devices}
  return MemoryEstimate(peak=peak, persistent={d: int(persistent.get(d, 0)) for d in devices})


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
