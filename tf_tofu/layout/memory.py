"""Per-device peak memory of a plan, from the graph and the plan alone (no rewrite).

The liveness rules of :mod:`tf_tofu.layout.liveness` over the plan's schedule.
:func:`plan_schedule` derives, from the search view
of the graph and a plan's levels, layouts and strategies, the schedule the
rewrite (:mod:`tf_tofu.rewrite.partition`) gives every device, node for node,
with every buffer sized from boxes instead of from shape inference:

* a tensor's shard on device ``d`` is ``|held_region(t, d)| x itemsize``
  (:mod:`tiling`); a variable's shard is persistent on its device, a feed's
  shard is allocated before the first op, a constant's slice is persistent
  (equal slices on one device once, as the rewrite pools them);
* ops run in the graph's op order (the view's order is topological over data
  and control edges, the order the rewrite chains on every device); an op's
  copy on ``d`` allocates ``|tile.outputs[o]| x itemsize`` per output (times a
  ``Mul`` buffer where the tile's output is scaled), and its shape inputs are
  persistent constants;
* before an op, each distinct need of an input (per-device boxes; consumers
  with the same need share it) is met with the pieces of
  ``transfers.gather``: a piece is cut out on its source (a transient
  ``Slice`` buffer of the piece, or the whole shard itself), is a *received
  buffer* on its destination from the source's step, and the destination
  assembles its need by a guillotine tree of concatenations (each slab a
  buffer), or uses its own slice or the one piece it receives;
* after an op, its outputs go into the stored layout the same way
  (``transfers.produce_into``): addends of a partial sum are received and
  summed (an ``AddN`` buffer of the device's intermediate box), then
  gathered into the stored boxes;
* variable reads and updates run on the shards; an update's inputs that are
  not element-wise with the variable are gathered whole on every device; a
  row scatter on a shard of rows masks, shifts and clips its indices (the
  rewrite's nodes, bool and index buffers included).

This is the liveness of the plain-communication rewrite (``comm="plain"``):
both walk the same steps, so :func:`plan_peak` equals
``tf_tofu.rewrite.memory.partitioned_peak`` on that rewrite wherever the
rewrite sizes every node statically.  Where they differ (the model sizes
from boxes, the GraphDef estimate from TensorFlow's shape functions): an
output TensorFlow cannot size statically counts 0 there and its box here
(``UNSIZED_OUTPUTS`` lists the known ones, counted 0 here too); collective
conversions (``comm="collective"``) and the ``Pad`` of a depthwise
convolution's explicit padding are not modelled.

The schedule of a large plan has millions of nodes (the 256-step RNNLM at k = 64:
about five million), so :func:`schedule_peak` counts the liveness as the nodes are
made (``liveness.Liveness``) without listing them, and the nodes of a conversion or
of an op's copies that repeat an earlier one (every step of an unrolled RNN) are
counted at once (``liveness.Liveness.run``).  :func:`plan_schedule` lists the steps
and replays node by node; both count the same buffers (tested).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

from tf_tofu.core import collector
from tf_tofu.core.plan import PlanError
from tf_tofu.core.regions import Interval, Region
from tf_tofu.graph import view as view_lib
from tf_tofu.graph.view import SearchGraph, update_slots
from tf_tofu.graph.vocabulary import SCATTER_OPS
from tf_tofu.layout import guillotine, tiling, transfers
from tf_tofu.layout.liveness import (NODE_MASK, OUTPUT_SHIFT, Liveness, MemoryEstimate, Program,
                                     Step)
from tf_tofu.opdefs.registry import Describer, context_key

# Outputs TensorFlow's shape functions leave unknown (the GraphDef estimate counts them 0):
# op type -> output indices.
UNSIZED_OUTPUTS = {"FusedBatchNormV3": (5,), "FusedBatchNormGradV3": (3, 4)}


# ------------------------------------------------------------------ the plan's schedule


class _Shard(NamedTuple):
  """Schedule tensor ``tensor`` (a ``Liveness`` id) holds ``box`` of a graph tensor, on
  device ``device``.  (A named tuple: made k at a time where a conversion is first
  emitted.)"""

  box: Region
  tensor: int
  device: int


@functools.lru_cache(maxsize=None)
def _numpy_dtype(dtype: str):
  return tf.as_dtype(dtype).as_numpy_dtype


def _const_key(value, dtype: str) -> tuple[tuple, int]:
  """``((dtype, shape, bytes), nbytes)`` of a constant: what pools it, but the device."""
  arr = np.asarray(value, dtype=_numpy_dtype(dtype))  # no copy when the dtype is right
  return (dtype, arr.shape, arr.tobytes()), arr.nbytes


class _Schedule:
  """The nodes of a plan's rewrite, counted by ``liveness.Liveness`` as they are made,
  with the persistent bytes.  A node's outputs are named by the ints ``Liveness.add``
  gives; ``steps`` (when kept) lists them as liveness Steps, node ``i`` named ``n<i>``.

  A conversion (an input's gather, an output's reduce and gather) emits the same nodes
  for every tensor with the same dtype and boxes; only the names of the shards it reads
  differ.  :meth:`converted` records the nodes the first time and replays them after
  (every layer of a model, every step of an unrolled RNN): same steps, same bytes, no
  box arithmetic."""

  def __init__(self, devices: Sequence[str], keep_steps: bool = False):
    self.devices = tuple(devices)
    self.live = Liveness()
    self.steps: Optional[list[Step]] = [] if keep_steps else None
    self.persistent = [0] * len(self.devices)
    self._pool: dict[tuple, int] = {}
    self._index_keys: dict = {}               # index_const's values -> (pool key, bytes)
    self._log: Optional[list] = None           # the conversion being recorded
    self._templates: dict[tuple, Optional[_Template]] = {}

  def add(self, op_type: str, device: int, inputs: Sequence[int],
          output_bytes: Sequence[int] = ()) -> int:
    """A node; returns its first output's ``Liveness`` id (``output_bytes``: Python ints)."""
    name = self.live.add(device, op_type, inputs, output_bytes)
    if self.steps is not None:
      self.steps.append(Step(f"n{len(self.steps)}", self.devices[device], op_type,
                             tuple(self.step_name(t) for t in inputs), tuple(output_bytes)))
    if self._log is not None:
      self._log.append((name, op_type, device, tuple(inputs), tuple(output_bytes)))
    return name

  def step_name(self, t: int) -> str:
    """The liveness name ``n<step>:<output>`` of tensor ``t``."""
    step = self.live.step_of[t]
    return f"n{step}:{t - self.live.first_output[step]}"

  def const(self, device: int, value, dtype: str, pooled: bool = True) -> int:
    """A constant on ``device`` (persistent; pooled ones once per device and value)."""
    key, nbytes = _const_key(value, dtype)
    return self.keyed_const((device, *key), nbytes, pooled)

  def pooled(self, key: tuple) -> Optional[int]:
    """The pooled constant of ``key`` (:meth:`keyed_const`), if made already."""
    return self._pool.get(key)

  def keyed_const(self, key: tuple, nbytes: int, pooled: bool) -> int:
    """The constant ``key = (device, dtype, shape, bytes)`` (see :meth:`const`)."""
    name = self._pool.get(key) if pooled else None
    if name is None:
      log, self._log = self._log, None  # recorded as the constant, not as its node
      self.persistent[key[0]] += nbytes
      name = self.add("Const", key[0], (), (nbytes,))
      self._log = log
      if pooled:
        self._pool[key] = name
    if self._log is not None:
      self._log.append((name, None, key, nbytes, pooled))
    return name

  def index_const(self, device: int, values: Union[int, Sequence[int]]) -> int:
    """A pooled integer constant on ``device``: a scalar (``values`` an int: a concat's
    axis) or a vector (a slice's begin or size); int32, or int64 where a value needs it.
    Its pool key is made once per distinct ``values`` (the slices and concats of every
    conversion ask for the same few)."""
    key = values if isinstance(values, int) else tuple(values)
    got = self._index_keys.get(key)
    if got is None:
      dt = "int64" if any(abs(int(v)) >= 2**31 for v in np.ravel(key)) else "int32"
      got = self._index_keys[key] = _const_key(np.asarray(key, dtype=dt), dt)
    return self.keyed_const((device, *got[0]), got[1], True)

  def converted(self, key: tuple, reads: Sequence[Optional[int]], emit
                ) -> list[Optional[int]]:
    """``emit()``, a conversion that reads the tensors ``reads`` and returns a name per
    device: recorded under ``key`` (what the nodes depend on besides ``reads``), then
    replayed for every later conversion with the same key."""
    if key in self._templates and self._templates[key] is not None:
      return self._templates[key].replay(self, reads)
    if self._log is not None:
      raise AssertionError("conversions do not nest")
    self._log = []
    try:
      out = emit()
      template = _Template.of(self._log, reads, out)
    finally:
      self._log = None
    self._templates[key] = template
    return out


@dataclasses.dataclass
class _Template:
  """A recorded conversion.  ``instructions``: ``(None, key, nbytes, pooled)`` for a
  constant, ``(op_type, device, refs, output_bytes)`` for a node; a ref ``r >= 0`` is
  output ``r >> OUTPUT_SHIFT`` of instruction ``r & NODE_MASK`` (a constant's, or a
  node's), ``r < 0`` the read tensor ``-1 - r``.  ``outputs``: a ref (or None) per
  output.  ``program``, ``program_outputs``: its nodes as one ``liveness.Program`` and
  its outputs as refs of that program (:meth:`_compile`), made at its first replay
  where no step is listed; ``const_names``: its constants' names (a template belongs
  to one schedule, whose pool only grows), None where one is not pooled."""

  instructions: tuple
  outputs: tuple
  program: Optional[Program] = None
  program_outputs: tuple = ()
  const_names: Optional[list] = None

  @classmethod
  def of(cls, log: list, reads: Sequence[Optional[int]], out: Sequence[Optional[int]]
         ) -> Optional["_Template"]:
    """The template of ``log``, or None where names cannot be told apart (a tensor read
    twice, a pooled constant that is also read): such a conversion is emitted each time."""
    refs: dict[int, int] = {}
    for i, x in enumerate(reads):
      if x is not None:
        if x in refs:
          return None
        refs[x] = -1 - i
    instructions = []
    for j, (name, op_type, *rest) in enumerate(log):
      if op_type is None:
        instructions.append((None, *rest))
      else:
        device, inputs, output_bytes = rest
        if any(x not in refs for x in inputs):
          return None
        instructions.append((op_type, device, tuple(refs[x] for x in inputs), output_bytes))
      if name in refs and (refs[name] < 0 or instructions[refs[name]][0] is not None):
        return None  # (a pooled constant asked for twice is one name, as on replay)
      refs[name] = j
      for o in range(1, len(instructions[-1][3]) if op_type is not None else 1):
        refs[name + o] = j | (o << OUTPUT_SHIFT)
    if any(x is not None and x not in refs for x in out):
      return None
    return cls(tuple(instructions), tuple(None if x is None else refs[x] for x in out))

  def replay(self, s: _Schedule, reads: Sequence[Optional[int]]) -> list[Optional[int]]:
    # Fewer than two instructions (none: every output is a read) cost less replayed in
    # turn than a run's bookkeeping (the same counts).
    if s.steps is None and len(self.instructions) > 1:
      got = self._run(s, reads)
      if got is not None:
        return got
    got: list[int] = []
    for op_type, *rest in self.instructions:
      if op_type is None:
        got.append(s.keyed_const(*rest))
      else:
        device, refs, output_bytes = rest
        got.append(s.add(op_type, device, [got[r & NODE_MASK] + (r >> OUTPUT_SHIFT) if r >= 0
                                           else reads[-1 - r] for r in refs], output_bytes))
    return [None if r is None else reads[-1 - r] if r < 0 else
            got[r & NODE_MASK] + (r >> OUTPUT_SHIFT) for r in self.outputs]

  def _run(self, s: _Schedule, reads: Sequence[Optional[int]]) -> Optional[list[Optional[int]]]:
    """The replay as one ``Liveness.run`` of :attr:`program` (no steps listed), or None
    where it would make a constant (a new one, or one not pooled): replayed node by
    node.  The outside tensors are the reads, then the constants."""
    if self.program is None:
      self.program, self.program_outputs, consts = self._compile(len(reads))
      # Recording pooled each constant the conversion asks for: their names stay.
      self.const_names = None if consts is None else [s.pooled(k) for k in consts]
    if self.const_names is None:
      return None
    ext = [*reads, *self.const_names]
    first = s.live.run(self.program, ext)
    firsts = self.program.first_rel
    return [None if r is None else ext[-1 - r] if r < 0 else
            first + firsts[r & NODE_MASK] + (r >> OUTPUT_SHIFT) for r in self.program_outputs]

  def _compile(self, n_reads: int) -> tuple[Program, tuple, Optional[tuple]]:
    """``(program, its outputs, consts)``: :attr:`program`, whose outside tensors are the
    reads and then the constants; :attr:`outputs` as its refs; the constants' pool keys
    (None when one is not pooled)."""
    nodes, slots, consts = [], [], []  # slots: per instruction, its node or outside ref

    def ref(r: int) -> int:
      """An instruction ref as a ref of the program (a constant's: its outside slot)."""
      if r < 0:
        return r
      slot = slots[r & NODE_MASK]
      return slot if slot < 0 else r - (r & NODE_MASK) + slot

    for op_type, *rest in self.instructions:
      if op_type is None:
        key, _, pooled = rest
        slots.append(-1 - (n_reads + len(consts)))
        consts.append(key if pooled else None)
      else:
        device, refs, output_bytes = rest
        slots.append(len(nodes))
        nodes.append((device, op_type, tuple(ref(r) for r in refs), output_bytes))
    outputs = tuple(None if r is None else ref(r) for r in self.outputs)
    kept = [r for r in outputs if r is not None and r >= 0]  # the nodes' outputs
    keys = None if None in consts else tuple(consts)
    return Liveness.compile(nodes, n_reads + len(consts), kept), outputs, keys


class _Model:
  """Walks a plan the way ``rewrite.partition._Partitioner`` emits it (module docstring)."""

  def __init__(self, graph: SearchGraph, factors: Sequence[int],
               layouts: Mapping[str, Sequence], strategies: Mapping[str, Sequence[str]],
               describer: Describer, devices: Sequence[str], keep_steps: bool = False):
    self.g, self.factors = graph, tuple(factors)
    self.strategies, self.describer = strategies, describer
    self.k = tiling.num_devices(self.factors)
    self.s = _Schedule(devices, keep_steps)
    self._ids: dict[tuple, int] = {}       # interned box tuples (intern)
    held_cache: dict = {}
    self.held: dict[str, tuple[Region, ...]] = {}
    self._held_ids: dict[str, int] = {}    # tensor -> intern of its boxes (held_id)
    for t, st in graph.tensors.items():
      if t in layouts:
        key = (st.shape, tuple(layouts[t]))
        got = held_cache.get(key)
        if got is None:
          boxes = tiling.held_regions(st.shape, key[1], self.factors)
          got = held_cache[key] = (boxes, self.intern(boxes))
        self.held[t], self._held_ids[t] = got
    # Per tensor and device, the schedule tensor (a Liveness id) holding boxes(t)[d]: every
    # way of making a tensor's shards holds those boxes (held_id), so a _Shard is made
    # only where a conversion is first emitted (shards).
    self.stored: dict[str, list[int]] = {}
    self.sources = {t: op for op in graph.ops if op.kind == "source" for t in op.outputs}
    self.needs: dict[str, dict[int, list[Optional[int]]]] = {}
    self._tiles: dict = {}
    self._pieces: dict = {}
    self._scalar_ops: dict[tuple, object] = {}
    self._controls: dict[str, tuple[str, ...]] = {}
    self.by_name = {op.name: op for op in graph.ops}

  def boxes(self, t: str) -> tuple[Region, ...]:
    """The box of ``t`` each device holds."""
    if t not in self.held:
      raise PlanError(f"the plan has no layout for tensor {t!r}; give it one state per level "
                      "('cut(d)' or 'rep')")
    return self.held[t]

  def nbytes(self, t: str, box: Optional[Region]) -> int:
    return 0 if box is None else box.volume * self.g.tensors[t].itemsize

  # ---------------------------------------------------------------- sources

  def feed(self, op) -> None:
    t = op.outputs[0]
    self.stored[t] = [self.s.add("Placeholder", d, (), (self.nbytes(t, box),))
                      for d, box in enumerate(self.boxes(t))]

  def variable(self, op) -> None:
    h = op.outputs[0]
    for d, box in enumerate(self.boxes(h)):
      self.s.persistent[d] += self.nbytes(h, box)

  def const(self, op) -> None:
    t = op.outputs[0]
    value = op.context.attrs.get("value")
    if value is None:
      raise ValueError(f"op {op.name!r} (Const) has no value attribute")
    value = np.asarray(value).reshape(self.g.tensors[t].shape)
    dtype = self.g.tensors[t].dtype
    keys: dict[Region, tuple] = {}  # a box's constant (every device holding it: one key)
    names = []
    for d, box in enumerate(self.boxes(t)):
      got = keys.get(box)
      if got is None:
        got = keys[box] = _const_key(value[box.slices()], dtype)
      names.append(self.s.keyed_const((d, *got[0]), got[1], True))
    self.stored[t] = names

  def stored_of(self, t: str) -> list[int]:
    """Per device, the schedule tensor holding its box of ``t`` (:attr:`stored`)."""
    if t not in self.stored:
      if t in self.g.variables:  # the value shards of a variable read through its handle
        self.stored[t] = [self.s.add("ReadVariableOp", d, (), (self.nbytes(t, box),))
                          for d, box in enumerate(self.boxes(t))]
      elif t in self.sources:
        self.const(self.sources[t])
      else:
        raise ValueError(f"tensor {t!r} is read before any op produces it")
    return self.stored[t]

  def shards(self, t: str, names: Sequence[int]) -> list[_Shard]:
    """The shards of ``t`` held by ``names`` (:attr:`stored`), for a conversion's first
    emission."""
    return [_Shard(box, n, d) for d, (box, n) in enumerate(zip(self.boxes(t), names))]

  # ---------------------------------------------------------------- conversions

  def local(self, t: str, shard: _Shard, box: Region) -> _Shard:
    """``box`` of ``shard`` on its own device: the shard itself, or a ``Slice``."""
    if box == shard.box:
      return shard
    return self.slice(t, shard, box)

  def slice(self, t: str, shard: _Shard, box: Region) -> _Shard:
    d = shard.device
    if box.volume == 0:
      return _Shard(box, self.s.const(d, np.zeros(box.shape), self.g.tensors[t].dtype,
                                      pooled=False), d)
    begin = [r.lo - o.lo for r, o in zip(box.intervals, shard.box.intervals)]
    b, n = self.s.index_const(d, begin), self.s.index_const(d, box.shape)
    return _Shard(box, self.s.add("Slice", d, (shard.tensor, b, n), (self.nbytes(t, box),)), d)

  def send(self, t: str, shard: _Shard, box: Region) -> _Shard:
    """A node of its own on the shard's device holding ``box``: one piece to send."""
    if box == shard.box:
      return _Shard(box, self.s.add("Identity", shard.device, (shard.tensor,),
                                    (self.nbytes(t, box),)), shard.device)
    return self.slice(t, shard, box)

  def build_box(self, t: str, d: int, target: Region, parts: Sequence[_Shard]) -> int:
    """``target`` on ``d``, concatenated from ``parts`` by the guillotine tree."""
    parts = [p for p in parts if p.box.volume > 0]
    key = ("tree", target, tuple(p.box for p in parts))
    if key not in self._pieces:
      self._pieces[key] = guillotine.tree(target, key[2])
    return guillotine.fold(
        self._pieces[key], target, lambda i: parts[i].tensor,
        lambda dim, xs, box: self.s.add("ConcatV2", d, (*xs, self.s.index_const(d, dim)),
                                        (self.nbytes(t, box),)))

  def pieces(self, have: Sequence[Optional[Region]], need: Sequence[Optional[Region]]):
    key = ("gather", tuple(have), tuple(need))
    if key not in self._pieces:
      self._pieces[key] = transfers.gather(list(have), list(need), self.factors)
    return self._pieces[key]

  def gather(self, t: str, have: Sequence[Optional[_Shard]], need: Sequence[Optional[Region]],
             pieces=None) -> list[Optional[int]]:
    """Per device, a tensor holding ``need[d]`` (``Converter._plain_gather``)."""
    if pieces is None:
      pieces = self.pieces([None if s is None else s.box for s in have], need)
    out: list[Optional[int]] = [None] * len(need)
    sent: dict[tuple, _Shard] = {}
    by_dst: dict[int, list] = {}
    for p in pieces:
      by_dst.setdefault(p.dst, []).append(p)
    for d, n in enumerate(need):
      if n is None:
        continue
      if n.volume == 0:
        out[d] = self.s.const(d, np.zeros(n.shape), self.g.tensors[t].dtype, pooled=False)
        continue
      own, parts = have[d], []
      kept = None if own is None else n.intersect(own.box)
      if kept is not None and kept.volume:
        parts.append(self.local(t, own, kept))
      for p in by_dst.get(d, ()):
        if (p.src, p.region) not in sent:
          sent[(p.src, p.region)] = self.send(t, have[p.src], p.region)
        parts.append(sent[(p.src, p.region)])
      if len(parts) == 1 and parts[0].box == n:
        out[d] = parts[0].tensor if parts[0].device == d else self.s.add(
            "Identity", d, (parts[0].tensor,), (self.nbytes(t, n),))
      else:
        out[d] = self.build_box(t, d, n, parts)
    return out

  def produce(self, t: str, tiles, o: int, names: Sequence[Optional[int]], keys: Sequence,
              made_id: int) -> list[int]:
    """Output ``o`` of an op (maybe partial sums; ``names``: per device, its copy's output,
    None where ``tiles`` has no tile) into ``t``'s stored layout, per device the tensor
    holding its box (``Converter.produce``; ``made_id``: :meth:`intern` of the produced
    boxes and ``keys``)."""
    key = ("out", self.g.tensors[t].dtype, made_id, self.held_id(t))
    return self.s.converted(key, names, lambda: self._produce(
        t, [None if tile is None else _Shard(tile.outputs[o], n, d)
            for d, (tile, n) in enumerate(zip(tiles, names))], keys, self.boxes(t)))

  def _produce(self, t: str, produced: Sequence[Optional[_Shard]], keys: Sequence,
               stored: Sequence[Region]) -> list[Optional[int]]:
    if not any(k for k in keys if k):
      return self.gather(t, produced, stored)
    boxes = tuple(None if s is None else s.box for s in produced)
    key = ("reduce", boxes, tuple(keys), tuple(stored))
    if key not in self._pieces:
      red, inter = transfers.reduce_partials(list(boxes), list(keys), list(stored), self.factors)
      self._pieces[key] = (red, inter, transfers.gather(inter, list(stored), self.factors))
    red, inter, after = self._pieces[key]
    summed: list[Optional[_Shard]] = [None] * len(produced)
    by_dst: dict[int, list] = {}
    for p in red:
      by_dst.setdefault(p.dst, []).append(p)
    for d, box in enumerate(inter):
      if box is None:
        continue
      mine = self.local(t, produced[d], box)
      addends = [self.send(t, produced[p.src], p.region) for p in by_dst.get(d, ())]
      summed[d] = mine if not addends else _Shard(box, self.s.add(
          "AddN", d, (mine.tensor, *(a.tensor for a in addends)), (self.nbytes(t, box),)), d)
    return self.gather(t, summed, stored, after)

  def input(self, t: str, need: tuple, need_id: Optional[int] = None) -> list[Optional[int]]:
    """Per device, a tensor holding ``need[d]`` of ``t`` (``need_id``: its :meth:`intern`);
    gathered once per tensor and need."""
    need_id = self.intern(need) if need_id is None else need_id
    by_need = self.needs.setdefault(t, {})
    got = by_need.get(need_id)
    if got is None:
      have = self.stored_of(t)
      key = ("in", self.g.tensors[t].dtype, self.held_id(t), need_id)
      got = by_need[need_id] = self.s.converted(
          key, have, lambda: self.gather(t, self.shards(t, have), need))
    return got

  # ---------------------------------------------------------------- ops

  def tiles(self, op):
    """``(key, tiles, needs, made)`` of the op: per data input the boxes the devices read
    and their :meth:`intern` id (None for a constant shape input), per output the
    partial keys and the :meth:`intern` id of (the boxes made, the keys); once per tiles
    key."""
    key = (context_key(op.context), tuple(self.strategies[op.name]))
    got = self._tiles.get(key)
    if got is None:
      tiles = tiling.op_tiles(op.context, self.strategies[op.name], self.factors,
                              self.describer)
      needs = []
      for i in range(len(op.inputs)):
        need = tuple(tile.inputs[i] if tile else None for tile in tiles)
        needs.append(None if all(r is None for r in need) else (need, self.intern(need)))
      made = []
      for o in range(len(op.outputs)):
        boxes = tuple(tile.outputs[o] if tile else None for tile in tiles)
        keys = tuple(tile.partial_key[o] if tile else None for tile in tiles)
        made.append((keys, self.intern((boxes, keys))))
      got = self._tiles[key] = (key, tiles, needs, made)
    return got

  def intern(self, boxes: tuple) -> int:
    """A small int naming ``boxes`` (per-device boxes, or any tuple of them): the keys of
    conversions hold it rather than hash k boxes again."""
    return self._ids.setdefault(boxes, len(self._ids))

  def held_id(self, t: str) -> int:
    """:meth:`intern` of :meth:`boxes` of ``t``, the boxes its shards hold (every way of
    making them, :meth:`feed`, :meth:`const`, :meth:`read`, :meth:`produce`, holds
    those; a scalar op's shards shared by another scalar hold equal ones); interned once
    per distinct (shape, layout), when the model is made."""
    if t not in self._held_ids:
      self.boxes(t)  # raises: the plan gives t no layout
    return self._held_ids[t]

  def scalar_replicated(self, op, tiles) -> bool:
    """Stateless, scalar outputs, computed whole everywhere: the rewrite shares such an op's
    nodes with an earlier identical one (``_Partitioner._scalar_replicated``)."""
    if not op.outputs or any(self.g.tensors[t].shape != () for t in op.outputs):
      return False
    op_def = op_def_registry.get(op.op_type)
    return (op_def is not None and not op_def.is_stateful and all(tiles)
            and all(s == 1.0 for tile in tiles for s in tile.output_scale)
            and not any(k for tile in tiles for k in tile.partial_key))

  def op(self, op) -> None:
    if op.name not in self.strategies:
      raise PlanError(f"the plan has no strategy for op {op.name!r} ({op.op_type}); plan the "
                      "graph again")
    key, tiles, needs, made = self.tiles(op)
    wired: list[list[Optional[int]]] = []
    for i, t in enumerate(op.inputs):
      if needs[i] is None:
        wired.append([None] * self.k)  # a constant shape input, made per device below
      elif t is None:
        raise ValueError(f"op {op.name!r}: data input {i} is not connected")
      else:
        wired.append(self.input(t, *needs[i]))
    if self.scalar_replicated(op, tiles):
      first = self._scalar_ops.setdefault(("op", key, tuple(tuple(w) for w in wired)), op)
      if first is not op:
        for t, u in zip(op.outputs, first.outputs):
          self.stored[t] = self.stored[u]
        return
    # The copies are a function of the tiles (of the context key, which has the outputs'
    # dtypes), given what they read: equal ops (the steps of an unrolled RNN) replay them.
    names = self.s.converted(("op", key), [x for w in wired for x in w],
                             lambda: self.copies(op, tiles, wired))
    for o, t in enumerate(op.outputs):
      self.stored[t] = self.produce(t, tiles, o, names[o * self.k:(o + 1) * self.k], *made[o])

  def copies(self, op, tiles, wired: list[list[Optional[int]]]) -> list[Optional[int]]:
    """Every device's copy of ``op`` (its tile; ``wired``: per input, the tensor each device
    reads) with its outputs scaled where the tile says: output o of device d at
    ``o * k + d``."""
    names: list[Optional[int]] = [None] * (len(op.outputs) * self.k)
    for d, tile in enumerate(tiles):
      if tile is None:
        continue
      inputs = []
      for i, info in enumerate(tile.context.inputs):
        if tile.inputs[i] is None:
          if info.value is None:
            raise ValueError(f"op {op.name!r}: input {i} is a shape input without a value")
          inputs.append(self.s.const(d, info.value, info.dtype))
        else:
          inputs.append(wired[i][d])
      unsized = UNSIZED_OUTPUTS.get(tile.context.op_type, ())
      sizes = [0 if o in unsized else self.nbytes(t, tile.outputs[o])
               for o, t in enumerate(op.outputs)]
      name = self.copy(tile.context, d, inputs, sizes)
      for o, t in enumerate(op.outputs):
        out = name + o
        if tile.output_scale[o] != 1.0:
          factor = self.s.const(d, tile.output_scale[o], self.g.tensors[t].dtype)
          out = self.s.add("Mul", d, (out, factor), (sizes[o],))
        names[o * self.k + d] = out
    return names

  def copy(self, ctx, d: int, inputs: list[int], sizes: Sequence[int]) -> int:
    """One device's copy of an op; a ``ConcatV2`` drops its empty blocks, as the rewrite's
    ``_copy`` does (one block left: an ``Identity``)."""
    if ctx.op_type == "ConcatV2":
      keep = [i for i, info in enumerate(ctx.inputs[:-1]) if math.prod(info.shape) > 0] or [0]
      if len(keep) == 1 and len(ctx.inputs) > 2:
        return self.s.add("Identity", d, (inputs[keep[0]],), sizes)
      inputs = [inputs[i] for i in keep] + [inputs[-1]]
    return self.s.add(ctx.op_type, d, inputs, sizes)

  def controls(self, name: str, seen: frozenset = frozenset()) -> tuple[str, ...]:
    """The ops (that emit nodes) ``name`` must follow: its control inputs, seen through
    ignored ops (``rewrite.partition.control_sources``)."""
    if name in self._controls:
      return self._controls[name]
    out: list[str] = []
    for c in self.by_name[name].control_inputs:
      op = self.by_name.get(c)
      if op is None or op.kind == "source" or c in seen:
        continue
      found = (c,) if op.kind != "ignored" else self.controls(c, seen | {c})
      out.extend(x for x in found if x not in out)
    if self.by_name[name].kind == "ignored":
      self._controls[name] = tuple(out)
    return tuple(out)

  def read(self, op) -> None:
    h = op.outputs[0] if op.outputs else None
    if h and self.g.tensors[op.inputs[0]].shape == ():
      # Reads of a scalar after the same control inputs share one node per device.
      key = ("read", op.inputs[0], op.context.attrs.get("dtype"), self.controls(op.name))
      first = self._scalar_ops.setdefault(key, op)
      if first is not op:
        self.stored[h] = self.stored[first.outputs[0]]
        return
    names = [self.s.add("ReadVariableOp", d, (), (self.nbytes(op.inputs[0], box),) if h else ())
             for d, box in enumerate(self.boxes(op.inputs[0]))]
    if h:
      self.stored[h] = names

  def update(self, op) -> None:
    h = op.inputs[0]
    _, whole = update_slots(self.g, op)
    gathered = {i: self.input(op.inputs[i], (Region.whole(self.g.tensors[op.inputs[i]].shape),)
                              * self.k) for i in whole}
    for d, box in enumerate(self.boxes(h)):
      if op.op_type in SCATTER_OPS:
        if box.volume:
          self.scatter(op, d, box, gathered[1][d], gathered[2][d])
        continue
      inputs = []
      for i, t in enumerate(op.inputs[1:], 1):
        if i in gathered:
          inputs.append(gathered[i][d])
        elif t is not None and t not in self.g.variables:
          inputs.append(self.stored_of(t)[d])
      self.s.add(op.op_type, d, inputs)

  def scatter(self, op, d: int, box: Region, indices: int, updates: int) -> None:
    """A row scatter on the shard ``box`` (``_Partitioner._scatter``, node for node)."""
    var_shape = self.g.tensors[op.inputs[0]].shape
    idx_t, upd_t = op.inputs[1], op.inputs[2]
    idx_shape, idx_dtype = self.g.tensors[idx_t].shape, self.g.tensors[idx_t].dtype
    upd_shape = self.g.tensors[upd_t].shape
    upd_whole = Region.whole(upd_shape)
    upd_box = Region(upd_whole.intervals[:len(idx_shape)] + box.intervals[1:])
    if upd_box != upd_whole:
      updates = self.slice(upd_t, _Shard(upd_whole, updates, d), upd_box).tensor
    rows = box.intervals[0]
    if rows != Interval(0, var_shape[0]):
      n_idx = math.prod(idx_shape)
      idx_bytes = n_idx * self.g.tensors[idx_t].itemsize
      upd_bytes = self.nbytes(upd_t, upd_box)
      first = self.s.const(d, rows.lo, idx_dtype)
      ge = self.s.add("GreaterEqual", d, (indices, first), (n_idx,))
      lt = self.s.add("Less", d, (indices, self.s.const(d, rows.hi, idx_dtype)), (n_idx,))
      inside = self.s.add("LogicalAnd", d, (ge, lt), (n_idx,))
      shifted = self.s.add("Sub", d, (indices, first), (idx_bytes,))
      indices = self.s.add("ClipByValue", d, (shifted, self.s.const(d, 0, idx_dtype),
                                               self.s.const(d, rows.size - 1, idx_dtype)),
                           (idx_bytes,))
      shape = self.s.const(d, np.array(list(idx_shape) + [1] * (len(var_shape) - 1)), "int32")
      mask = self.s.add("Reshape", d, (inside, shape), (n_idx,))
      zeros = self.s.add("ZerosLike", d, (updates,), (upd_bytes,))
      updates = self.s.add("SelectV2", d, (mask, updates, zeros), (upd_bytes,))
    self.s.add(op.op_type, d, (indices, updates))

  def run(self) -> _Schedule:
    for op in self.g.ops:
      if op.kind == "source" and op.outputs and op.outputs[0] in self.g.variables:
        self.variable(op)
      elif op.kind == "source" and op.op_type == "Placeholder":
        self.feed(op)
    emit = {"compute": self.op, "single": self.op, "read": self.read, "update": self.update}
    for op in self.g.ops:
      if op.kind in emit:
        emit[op.kind](op)
    return self.s


# ------------------------------------------------------------------ public


def _search_graph(graph, describer: Describer) -> SearchGraph:
  if isinstance(graph, SearchGraph):
    return graph
  return view_lib.from_tofu_graph(graph, describer)


def _model(graph, factors: Sequence[int], layouts: Mapping[str, Sequence],
           strategies: Mapping[str, Sequence[str]], describer: Optional[Describer],
           devices: Optional[Sequence[str]], keep_steps: bool) -> _Schedule:
  """The schedule of the plan (:func:`plan_schedule`'s arguments), walked."""
  describer = describer or Describer()
  graph = _search_graph(graph, describer)
  k = tiling.num_devices(factors)
  devices = tuple(devices) if devices is not None else tuple(str(d) for d in range(k))
  if len(devices) != k:
    raise PlanError(f"{len(devices)} device names for levels {list(factors)} ({k} devices); "
                    "name one device per worker")
  return _Model(graph, factors, layouts, strategies, describer, devices, keep_steps).run()


@collector.bulk()
def plan_schedule(graph, factors: Sequence[int], layouts: Mapping[str, Sequence],
                  strategies: Mapping[str, Sequence[str]], describer: Optional[Describer] = None,
                  devices: Optional[Sequence[str]] = None) -> tuple[list[Step], dict[str, int]]:
  """The schedule every device runs under a plan, and the persistent bytes per device.

  Args:
    graph: the search view (``tf_tofu.graph.view.SearchGraph``) or a TofuGraph.
    factors: the level factors ``(n_1, ..., n_L)`` (``()``: one device).
    layouts: each laid-out tensor's state per level.
    strategies: each compute op's decision per level.
    describer: the Describer the plan was priced with (its cache is reused).
    devices: the device names (default ``"0" .. "k-1"``).

  Returns:
    ``(steps, persistent)`` for ``liveness.peak_memory`` (see the module docstring); it gives
    what :func:`schedule_peak` counts without listing the steps.
  """
  s = _model(graph, factors, layouts, strategies, describer, devices, keep_steps=True)
  return s.steps, dict(zip(s.devices, s.persistent))


@collector.bulk()
def schedule_peak(graph, factors: Sequence[int], layouts: Mapping[str, Sequence],
                  strategies: Mapping[str, Sequence[str]], describer: Optional[Describer] = None,
                  devices: Optional[Sequence[str]] = None) -> MemoryEstimate:
  """``liveness.peak_memory(*plan_schedule(...))`` (same arguments), counted as the schedule is
  made: no step is listed."""
  s = _model(graph, factors, layouts, strategies, describer, devices, keep_steps=False)
  return s.live.estimate(s.devices, dict(zip(s.devices, s.persistent)))


@collector.bulk()
def plan_peak(graph, plan, describer: Optional[Describer] = None) -> MemoryEstimate:
  """Peak bytes per device (named as ``plan.devices``) of a :class:`tf_tofu.Plan`, from the
  graph and the plan alone; equal to the liveness estimate of its plain rewrite
  (``tf_tofu.rewrite.memory.partitioned_peak``), see the module docstring."""
  return schedule_peak(graph, plan.factors, plan.layouts, plan.strategies, describer,
                       plan.devices)


@collector.bulk()
def single_device_peak(graph, describer: Optional[Describer] = None) -> int:
  """The peak of the whole step on one device: the plan model with no levels (every op
  whole, every tensor whole, nothing moved).

  It differs from ``liveness.tofu_graph_peak`` (measured 0.60-0.99x of it on the tiny zoo,
  0.99995x on LSTM-10): that one walks the ingested graph, where every folded shape
  constant is a tensor of its own and constants are not pooled; this one walks the
  view the plans are made for, as the rewrite would emit it on one device."""
  describer = describer or Describer()
  graph = _search_graph(graph, describer)
  layouts = {t: () for t in graph.tensors}
  strategies = {op.name: () for op in graph.ops if op.kind in ("compute", "single")}
  return schedule_peak(graph, (), layouts, strategies, describer, ("single",)).worst


@collector.bulk()
def plan_memory(graph, plan, describer: Optional[Describer] = None,
                single_device: Optional[int] = None) -> dict:
  """The Plan report's memory entry (``MemoryEstimate.summary``) without a rewrite; the
  ideal is ``single_device / k`` (default :func:`single_device_peak` of ``graph``)."""
  describer = describer or Describer()
  graph = _search_graph(graph, describer)
  if single_device is None:
    single_device = single_device_peak(graph, describer)
  return plan_peak(graph, plan, describer).summary(single_device)


__all__ = ["UNSIZED_OUTPUTS", "plan_memory", "plan_peak", "plan_schedule", "schedule_peak",
           "single_device_peak"]
