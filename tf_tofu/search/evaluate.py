"""The exact bytes of a complete plan: every piece every device sends, per level.

Given the level factors, every tensor's layout and every op's strategy, the
tiles (``tf_tofu.layout.tiling``) say what each device holds and computes, and
``tf_tofu.layout.transfers`` spells out the pieces:

* production: an op's outputs (maybe partial) into the tensor's layout;
* consumption: the tensor's layout into what each consumer's tiles read (an
  update op reads its slots element-wise with the variable on the shards,
  its others whole: ``graph.view.update_slots``);
  Consumers that need exactly the same boxes share one conversion (the
  rewrite sends such a piece once).

A piece belongs to level ``l`` when its two devices first differ at level
``l`` (device coordinates, level 1 most significant).  This is what the
rewritten graph moves between devices, so it is the plan's prediction.

``pair_bytes[(src, dst)]`` is the same total split by the devices (indices)
each piece goes between: the bytes over each link, so that a topology prices
them per link class (``search.topology_search``) for any assignment of device
names to indices.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from tf_tofu.layout import transfers
from tf_tofu.opdefs.registry import Describer, context_key
from tf_tofu.core.states import State
from tf_tofu.graph.view import SearchGraph, update_slots
from tf_tofu.layout.tiling import held_regions, num_devices, op_tiles


@dataclasses.dataclass(frozen=True)
class Conversion:
  tensor: str
  what: str            # "produce <op>" or "feed <op>[, <op>...]"
  bytes: int
  level_bytes: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Evaluation:
  total_bytes: int
  level_bytes: tuple[int, ...]
  op_bytes: dict[str, int]      # bytes of the conversions an op causes (its inputs and outputs)
  conversions: tuple[Conversion, ...]
  # (source device, destination device) -> bytes; sums to total_bytes.
  pair_bytes: Mapping[tuple[int, int], int] = dataclasses.field(default_factory=dict)


class EvalCache:
  """Blocks and pieces of plans with one factor order, each a pure function of its key.

  ``held[(shape, layout)]``: every device's block; ``pieces[...]``: the elements a
  conversion moves, per level and per device pair.  One cache may serve every
  plan of a search with these factors (the planners of one ``planners.run``
  agree on most tensors and ops), and never changes a result.

  Every device's tile of an op (``tiling.op_tiles``) is kept by the describer, whose
  ``regions.Pool`` makes equal boxes of different ops' tiles the same object.
  ``needs[(tiles key, input)]`` is what the devices' tiles read of an input and a
  small int naming that need (``need_ids``: equal needs of different ops, one int),
  which keys the feed pieces: a need is a tuple of k boxes, hashed once here rather
  than at every reader of every tensor.
  """

  def __init__(self, factors: Sequence[int]):
    self.factors = tuple(factors)
    self.held: dict = {}
    self.pieces: dict = {}
    self.needs: dict = {}
    self.need_ids: dict = {}

  def need(self, tkey, tiles, i: int) -> tuple[int, Optional[tuple]]:
    """``(need id, per-device box)`` the tiles ``tiles`` (of key ``tkey``) read of input
    ``i``; the box tuple is None when no device reads it."""
    got = self.needs.get((tkey, i))
    if got is None:
      boxes = tuple(tile.inputs[i] if tile else None for tile in tiles)
      got = (-1, None) if all(r is None for r in boxes) else (self.need_id(boxes), boxes)
      self.needs[(tkey, i)] = got
    return got

  def need_id(self, boxes: tuple) -> int:
    """The small int naming the per-device boxes ``boxes`` (equal boxes, one int)."""
    return self.need_ids.setdefault(boxes, len(self.need_ids))

  def op_tiles(self, ctx, strategy: tuple[str, ...], describer: Describer) -> tuple:
    """``(tiles key, tiling.op_tiles of the op)``; the tiles are kept by the describer."""
    return (context_key(ctx), strategy), op_tiles(ctx, strategy, self.factors, describer)


def evaluate(graph: SearchGraph, factors: Sequence[int], layouts: Mapping[str, Sequence[State]],
             strategies: Mapping[str, Sequence[str]], describer: Describer,
             cache: Optional[EvalCache] = None) -> Evaluation:
  """Exact bytes of the plan; see the module docstring.

  Identical ops (same signature and strategy) share their tiles, and equal
  (layout, need) pairs share their pieces, so repeated blocks are priced once;
  ``cache`` (for these ``factors``) carries them over from other plans.
  """
  cache = cache if cache is not None else EvalCache(factors)
  if cache.factors != tuple(factors):
    raise ValueError(f"an EvalCache of factors {cache.factors} used for factors {tuple(factors)}")
  pricer = PlanPricer(graph, tuple(factors), layouts, strategies, describer, cache)
  for op in graph.ops:
    pricer.add_op(op)
  pricer.add_feeds()
  return pricer.result()


class PlanPricer:
  """The accumulators and caches of one :func:`evaluate`; after :meth:`record` (or
  :meth:`add_op`) of every op, :meth:`tensor_elements` prices one tensor in any layout
  (``search.improve``)."""

  def __init__(self, graph: SearchGraph, factors: tuple[int, ...],
               layouts: Mapping[str, Sequence[State]], strategies: Mapping[str, Sequence[str]],
               describer: Describer, cache: EvalCache):
    self.graph, self.factors, self.layouts = graph, factors, layouts
    self.strategies, self.describer = strategies, describer
    self.k = num_devices(factors)
    self.cache = cache
    self.held_cache = cache.held
    self.pieces_cache = cache.pieces
    self.held_of: dict[str, tuple] = {}
    self.level_bytes = [0] * len(factors)
    self.op_bytes: dict[str, int] = collections.defaultdict(int)
    self.conversions: list[Conversion] = []
    # tensor -> need id -> (per-device need, ops needing it)
    self.needs: dict[str, dict[int, tuple]] = collections.defaultdict(dict)
    # tensor -> (its producer's tiles key, the tiles, the output index)
    self.producer: dict[str, tuple] = {}
    # id of a pieces' pairs tuple -> [the pairs, the item sizes summed over its uses]
    self.pair_uses: dict[int, list] = {}

  def held(self, t: str):
    """``((shape, layout), every device's block)`` of tensor ``t``, looked up once per
    tensor (its producer and its readers ask)."""
    got = self.held_of.get(t)
    if got is None:
      got = self.held_of[t] = self.held_in(self.graph.tensors[t].shape, self.layouts[t])
    return got

  def held_in(self, shape: tuple, layout: Sequence[State]):
    """``((shape, layout), every device's block)`` of a tensor of ``shape`` in ``layout``."""
    key = (shape, tuple(layout))
    got = self.held_cache.get(key)
    if got is None:
      got = self.held_cache[key] = held_regions(shape, key[1], self.factors)
    return key, got

  def account(self, tensor: str, verb: str, counted: tuple, ops: Sequence[str]) -> None:
    """Adds a conversion of ``levels[l]`` elements at level l (``pairs``: the elements
    between two devices, as :meth:`elements_per_level` gives them; ``counted = (levels,
    pairs)``), its bytes shared by ``ops``; it is reported as ``"<verb> <ops>"``."""
    levels, pairs = counted
    if any(levels):
      size = self.graph.tensors[tensor].itemsize
      lv = [x * size for x in levels]
      total = sum(lv)
      for i, b in enumerate(lv):
        self.level_bytes[i] += b
      use = self.pair_uses.get(id(pairs))  # expanded per device pair in result()
      if use is None:
        self.pair_uses[id(pairs)] = [pairs, size]
      else:
        use[1] += size
      share = total // len(ops)
      for j, o in enumerate(ops):
        self.op_bytes[o] += share + (total - share * len(ops) if j == 0 else 0)
      self.conversions.append(Conversion(tensor, f"{verb} {', '.join(ops)}", total, tuple(lv)))

  def elements_per_level(self, flows: transfers.Flows) -> tuple[list[int], tuple]:
    """``(elements per level, (pair ids, elements per pair))`` of ``flows``, the pair
    ``(src, dst)`` named ``src * k + dst``."""
    if not len(flows.elements):
      return [0] * len(self.factors), ()
    level = transfers.level_table(self.factors)[flows.src, flows.dst]
    if (level == len(self.factors)).any():
      raise ValueError("a piece from a device to itself")
    lv = np.zeros(len(self.factors), dtype=np.int64)   # integer sums: bytes stay exact
    np.add.at(lv, level, flows.elements)
    ids, where = np.unique(flows.src * self.k + flows.dst, return_inverse=True)
    sums = np.zeros(len(ids), dtype=np.int64)
    np.add.at(sums, where.ravel(), flows.elements)
    return [int(x) for x in lv], (ids, sums)

  def add_op(self, op) -> None:
    """Prices what ``op`` produces and records what it needs (priced by :meth:`add_feeds`)."""
    for t in self.record(op):
      self.account(t, "produce", self.produced(t, *self.held(t)), [op.name])

  def record(self, op) -> tuple[str, ...]:
    """Records what ``op`` needs of each input and, as their producer, its tiles for each
    of its outputs; returns those outputs (none for an op that runs no tiles)."""
    graph = self.graph
    if op.kind == "update":
      # Runs on every shard; inputs not element-wise with the variable are needed whole.
      for i in update_slots(graph, op)[1]:
        t = op.inputs[i]
        whole = (self.describer.pool.whole(graph.tensors[t].shape),) * self.k
        self.needs[t].setdefault(self.cache.need_id(whole), (whole, []))[1].append(op.name)
      return ()
    if op.kind not in ("compute", "single"):
      return ()
    tkey, tiles = self.cache.op_tiles(op.context, tuple(self.strategies[op.name]),
                                      self.describer)
    for o, t in enumerate(op.outputs):
      self.producer[t] = (tkey, tiles, o)
    for i, t in enumerate(op.inputs):
      if t is None:
        continue
      need_id, boxes = self.cache.need(tkey, tiles, i)
      if boxes is not None:
        self.needs[t].setdefault(need_id, (boxes, []))[1].append(op.name)
    return tuple(op.outputs)

  def produced(self, t: str, hkey, held) -> tuple:
    """The counted pieces (:meth:`elements_per_level`) of producing ``t`` (its producer's
    tiles, as :meth:`record` kept them) into the blocks ``held`` (of key ``hkey``)."""
    tkey, tiles, o = self.producer[t]
    pkey = ("produce", tkey, o, hkey)
    got = self.pieces_cache.get(pkey)
    if got is None:
      produced = [tile.outputs[o] if tile else None for tile in tiles]
      keys = [tile.partial_key[o] if tile else None for tile in tiles]
      got = self.pieces_cache[pkey] = self.elements_per_level(
          transfers.produce_flows(produced, keys, held, self.factors))
    return got

  def fed(self, hkey, held, need_id: int, need) -> tuple:
    """The counted pieces of gathering the per-device boxes ``need`` (named ``need_id``)
    from the blocks ``held`` (of key ``hkey``)."""
    pkey = ("feed", hkey, need_id)
    got = self.pieces_cache.get(pkey)
    if got is None:
      got = self.pieces_cache[pkey] = self.elements_per_level(
          transfers.gather_flows(held, list(need), self.factors))
    return got

  def add_feeds(self) -> None:
    """Prices every tensor's needs, each distinct need once for all the ops sharing it."""
    for t, by_need in self.needs.items():
      hkey, h = self.held(t)
      for need_id, (need, ops) in by_need.items():
        self.account(t, "feed", self.fed(hkey, h, need_id, need), ops)

  def tensor_elements(self, t: str, layout: Sequence[State]) -> int:
    """The elements of every conversion of ``t`` (its production and its distinct needs,
    as :meth:`record` kept them) were it held in ``layout``: with the ops'
    strategies fixed, a tensor's share of the plan's bytes depends on its own layout
    alone (``search.improve``)."""
    hkey, h = self.held_in(self.graph.tensors[t].shape, layout)
    total = sum(self.produced(t, hkey, h)[0]) if t in self.producer else 0
    for need_id, (need, _) in self.needs.get(t, {}).items():
      total += sum(self.fed(hkey, h, need_id, need)[0])
    return total

  def result(self) -> Evaluation:
    by_pair = np.zeros(self.k * self.k, dtype=np.int64)  # integer sums: bytes stay exact
    for (ids, sums), size in self.pair_uses.values():
      np.add.at(by_pair, ids, sums * size)
    pair_bytes = {(int(i) // self.k, int(i) % self.k): int(by_pair[i])
                  for i in np.flatnonzero(by_pair)}
    return Evaluation(sum(self.level_bytes), tuple(self.level_bytes), dict(self.op_bytes),
                      tuple(self.conversions), pair_bytes)
