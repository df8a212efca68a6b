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
from typing import Mapping, Optional, Sequence

import numpy as np

ALIAS_OPS = frozenset({"Identity", "ReadVariableOp", "Reshape", "Squeeze", "ExpandDims",
                       "Snapshot", "StopGradient", "EnsureShape"})
PERSISTENT_OPS = frozenset({"Const", "VarHandleOp"})
_NOT_OWN = PERSISTENT_OPS | {"ReadVariableOp"}  # outputs that allocate no buffer of their own


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


# A buffer is keyed by ``tensor << DEVICE_BITS | device``: at most 2**20 devices.
DEVICE_BITS = 20
# In a Program, a ref ``r >= 0`` names output ``r >> OUTPUT_SHIFT`` of node ``r & NODE_MASK``.
OUTPUT_SHIFT = 32
NODE_MASK = (1 << OUTPUT_SHIFT) - 1


class Liveness:
  """The rules above, applied node by node as a schedule is made: tensors and devices
  are small ints, so a schedule of millions of nodes (a plan's rewrite at k = 64) is
  counted without a name or an object per node.

  :meth:`add` takes a node's device (an index), op type, the tensors it reads
  (ids from earlier :meth:`add` calls; None for a tensor outside the schedule,
  not counted) and its outputs' bytes, and returns the id of its first output
  (output ``o`` is that id + o; -1 for a node without outputs, which has none).
  Each buffer has a device, a size, the step it is born at and the last step that
  reads it: a node's own outputs are born at its step on its device; a tensor read
  on another device is a received buffer there, born at its producer's step; an
  aliasing node's outputs are its first input's buffer on its device.
  """

  def __init__(self):
    # A tensor's buffer on its own device is _own[t]; on another, _received[t << DEVICE_BITS
    # | device].
    self._home: list[int] = []            # tensor -> the device that makes it
    self._own: list[int] = []             # tensor -> its buffer there
    self._received: dict[int, int] = {}
    self._nbytes: list[int] = []          # tensor -> its bytes
    self.step_of: list[int] = []          # tensor -> the step that makes it
    self.first_output: list[int] = []     # step -> the id of its first output
    self.device: list[int] = []  # buffer -> its device
    self.size: list[int] = []    # buffer -> its bytes
    self.born: list[int] = []    # buffer -> the step it is born at
    self.last: list[int] = []    # buffer -> the last step reading it

  def _read(self, t: int, device: int) -> int:
    """The buffer of tensor ``t`` on ``device``: its own there, or the copy it receives
    there (made by the first read: a received buffer, born at its producer's step)."""
    if self._home[t] == device:
      return self._own[t]
    key = (t << DEVICE_BITS) | device
    b = self._received.get(key)
    if b is None:
      b = self._received[key] = len(self.last)
      self.device.append(device)
      self.size.append(self._nbytes[t])
      self.born.append(self.step_of[t])
      self.last.append(-1)
    return b

  def add(self, device: int, op_type: str, inputs: Sequence[Optional[int]],
          output_bytes: Sequence[int]) -> int:
    i = len(self.first_output)
    last = self.last
    for t in inputs:
      if t is not None:
        last[self._read(t, device)] = i
    alias = -1
    if op_type in ALIAS_OPS and inputs and inputs[0] is not None:
      alias = self._read(inputs[0], device)
    first = len(self._nbytes)
    self.first_output.append(first)
    if not output_bytes:
      return -1
    # A read of a variable is the variable's buffer; constants are persistent.
    own = op_type not in _NOT_OWN
    for nbytes in output_bytes:
      if alias >= 0:
        self._own.append(alias)
        last[alias] = i
      else:
        self._own.append(len(last))
        self.device.append(device)
        self.size.append(nbytes if own else 0)
        self.born.append(i)
        last.append(i)
      self._nbytes.append(nbytes)
      self.step_of.append(i)
      self._home.append(device)
    return first

  @staticmethod
  def compile(nodes: Sequence[tuple], n_ext: int, kept: Sequence[int]) -> "Program":
    """A run of nodes whose effect :meth:`run` applies at once: ``nodes[j] = (device,
    op_type, refs, output_bytes)``, a ref ``r >= 0`` naming output ``r >> OUTPUT_SHIFT``
    of node ``r & NODE_MASK`` and ``r < 0`` the outside tensor ``-1 - r`` (one of
    ``n_ext``).  What the nodes do among themselves is worked out here, once; only
    their reads of outside tensors depend on what came before.  Two slots may name one
    tensor (a constant used twice, a read that is also a constant): :meth:`run` keeps
    its buffer's latest reader.
    ``kept``: the refs of the outputs that nodes after the run may read; the others are
    never looked up again, so :meth:`run` does not file their buffers by tensor."""
    first_rel, nbytes_rel, step_rel, home_rel, own_rel = [], [], [], [], []
    buffers, last = [], []
    received: dict = {}       # (inside tensor, device) -> inside buffer
    ext_last: dict = {}       # (slot, device) -> the last node reading it there
    ext_own: dict = {}        # inside tensor -> (slot, device): it aliases that buffer

    def read(ref: int, device: int, j: int):
      """The buffer ``ref`` names on ``device`` (an int, or ``(slot, device)`` outside),
      read by node j."""
      if ref < 0:
        ext_last[(-1 - ref, device)] = j
        return (-1 - ref, device)
      u = first_rel[ref & NODE_MASK] + (ref >> OUTPUT_SHIFT)
      if home_rel[u] == device:
        b = ext_own.get(u)
        if b is not None:
          ext_last[b] = j
          return b
        b = own_rel[u]
      else:
        b = received.get((u, device))
        if b is None:
          b = received[(u, device)] = len(last)
          buffers.append((device, nbytes_rel[u], step_rel[u]))
          last.append(j)
          return b
      last[b] = j
      return b

    for j, (device, op_type, refs, output_bytes) in enumerate(nodes):
      for r in refs:
        read(r, device, j)
      alias = read(refs[0], device, j) if op_type in ALIAS_OPS and refs else None
      first = len(nbytes_rel)
      first_rel.append(first)
      own = op_type not in _NOT_OWN
      for o, nbytes in enumerate(output_bytes):
        if alias is None:
          own_rel.append(len(last))
          buffers.append((device, nbytes if own else 0, j))
          last.append(j)
        elif isinstance(alias, tuple):
          own_rel.append(-1)
          ext_own[first + o] = alias
        else:
          own_rel.append(alias)
      nbytes_rel.extend(output_bytes)
      step_rel.extend([j] * len(output_bytes))
      home_rel.extend([device] * len(output_bytes))
    kept_rel = {first_rel[r & NODE_MASK] + (r >> OUTPUT_SHIFT) for r in kept}
    filed = [((u << DEVICE_BITS) | d, b) for (u, d), b in received.items() if u in kept_rel]
    return Program(n_ext=n_ext, first_rel=tuple(first_rel), nbytes_rel=tuple(nbytes_rel),
                   step_rel=tuple(step_rel), home_rel=tuple(home_rel), own_rel=tuple(own_rel),
                   buffer_device=tuple(b[0] for b in buffers),
                   buffer_size=tuple(b[1] for b in buffers),
                   buffer_born=tuple(b[2] for b in buffers), last_rel=tuple(last),
                   received_keys=tuple(k for k, _ in filed),
                   received_buffers=tuple(b for _, b in filed),
                   ext_reads=tuple((s, d, j) for (s, d), j in ext_last.items()),
                   ext_aliases=tuple((u, s, d) for u, (s, d) in ext_own.items()
                                     if u in kept_rel))

  def run(self, program: "Program", ext: Sequence[int]) -> int:
    """Applies ``program`` (:meth:`compile`) to the outside tensors ``ext``: the same
    steps, tensor ids and buffers (device, size, born, last; numbered in another order)
    as :meth:`add` of each of its nodes in turn, and the same buffer for every later
    read of a kept output.  Returns the id of its first node's first output (node j's
    is that + ``first_rel[j]``)."""
    if len(ext) != program.n_ext:
      raise ValueError(f"a run of {program.n_ext} outside tensors given {len(ext)}")
    i0, t0, b0 = len(self.first_output), len(self._nbytes), len(self.last)
    self.first_output.extend([t0 + f for f in program.first_rel])
    self._nbytes.extend(program.nbytes_rel)
    self.step_of.extend([i0 + j for j in program.step_rel])
    self._home.extend(program.home_rel)
    self._own.extend([b0 + b if b >= 0 else -1 for b in program.own_rel])
    self.device.extend(program.buffer_device)
    self.size.extend(program.buffer_size)
    self.born.extend([i0 + j for j in program.buffer_born])
    last = self.last
    last.extend([i0 + j for j in program.last_rel])
    base = t0 << DEVICE_BITS
    self._received.update(zip([base + k for k in program.received_keys],
                              [b0 + b for b in program.received_buffers]))
    home, own = self._home, self._own
    for slot, device, j in program.ext_reads:
      t = ext[slot]
      b = own[t] if home[t] == device else self._read(t, device)
      if last[b] < i0 + j:  # (two outside slots may name one tensor)
        last[b] = i0 + j
    for u, slot, device in program.ext_aliases:
      t = ext[slot]
      own[t0 + u] = own[t] if home[t] == device else self._read(t, device)
    return t0

  def estimate(self, devices: Sequence[str], persistent: Mapping[str, int]) -> MemoryEstimate:
    """Peak bytes per device (device index ``j`` is ``devices[j]``; a device with only
    ``persistent`` bytes counts them) and the persistent part of each."""
    running = _peak_running_sums(len(devices), self.device, self.size, self.born, self.last)
    names = sorted(set(devices) | set(persistent))
    index = {d: j for j, d in enumerate(devices)}
    peak = {d: int(persistent.get(d, 0) + max(0, running[index[d]] if d in index else 0))
            for d in names}
    return MemoryEstimate(peak=peak, persistent={d: int(persistent.get(d, 0)) for d in names})


@dataclasses.dataclass(frozen=True)
class Program:
  """A run of nodes compiled by :meth:`Liveness.compile`, in offsets from where it runs:
  per node the offset of its first output id; per output id its bytes, node, device
  and own buffer (-1: none, or an outside one); the buffers made inside (device, size,
  node born) with their last readers; the kept tensors' copies received inside, by
  (tensor, device) key; per outside tensor and device the last node reading it there;
  and the kept tensors that alias an outside tensor's buffer."""

  n_ext: int
  first_rel: tuple
  nbytes_rel: tuple
  step_rel: tuple
  home_rel: tuple
  own_rel: tuple
  buffer_device: tuple
  buffer_size: tuple
  buffer_born: tuple
  last_rel: tuple
  received_keys: tuple
  received_buffers: tuple
  ext_reads: tuple
  ext_aliases: tuple


def peak_memory(schedule: Sequence[Step], persistent: Mapping[str, int]) -> MemoryEstimate:
  """Liveness over ``schedule`` (module docstring; :class:`Liveness`); ``persistent``
  bytes per device.  The schedule lists a node before its readers (both schedules
  above do); an input that no earlier node of the schedule makes (a later node's, an
  output a node does not have, a node outside the schedule) is not counted, and an
  aliasing node whose first input is such an input holds a buffer of its own."""
  live = Liveness()
  index: dict[str, int] = {}
  made: dict[str, tuple[int, int]] = {}  # node -> (id of its first output, its outputs)
  for s in schedule:
    ins: list[Optional[int]] = []
    for t in s.inputs:
      node, _, o = t.partition(":")
      got = made.get(node)
      o = int(o) if o else 0
      ins.append(got[0] + o if got is not None and o < got[1] else None)
    device = index.setdefault(s.device, len(index))
    made[s.name] = (live.add(device, s.op_type, ins, s.output_bytes), len(s.output_bytes))
  return live.estimate(list(index), persistent)


def _peak_running_sums(n_devices: int, device: Sequence[int], size: Sequence[int],
                       born: Sequence[int], last: Sequence[int]) -> list[int]:
  """Per device index, the largest running sum of ``+size`` at step ``born`` and ``-size``
  at step ``last + 1`` over its buffers (events at one step are summed first; 0 for a
  device without any); integers throughout, memory in the number of buffers, not steps
  x devices.

  The events sorted by (device, step): the running sum after the last event of each
  (device, step) is a live total; the largest of those per device is its peak.  The
  sort is stable (timsort): a schedule makes each device's buffers in step order, so
  the keys come in long ascending runs, which it merges in far fewer comparisons than
  a sort of random keys needs."""
  out = [0] * n_devices
  size_a = np.asarray(size, np.int64)
  if not size_a.any():
    return out
  rows, born_a, last_a = (np.asarray(x, np.int64) for x in (device, born, last))
  span = int(max(last_a.max(), born_a.max())) + 2
  keys = np.concatenate([rows * span + born_a, rows * span + last_a + 1])
  order = np.argsort(keys, kind="stable")
  keys = keys[order]
  total = np.cumsum(np.concatenate([size_a, -size_a])[order])
  ends = np.flatnonzero(np.r_[keys[1:] != keys[:-1], True])  # last event of each step
  row = keys[ends] // span
  starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])  # each device's first step
  # The running sum before each device's events: the total after the previous device's.
  before = np.r_[0, total[ends]][starts]
  running = total[ends] - np.repeat(before, np.diff(np.r_[starts, len(ends)]))
  best = np.maximum.reduceat(running, starts)
  for r, b in zip(row[starts], best):
    out[int(r)] = int(b)
  return out


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


__all__ = ["ALIAS_OPS", "PERSISTENT_OPS", "Liveness", "MemoryEstimate", "Program", "Step",
           "peak_memory", "tofu_graph_peak"]
