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
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Mapping, Sequence

from tf_tofu.layout import transfers
from tf_tofu.opdefs.registry import Describer, context_key
from tf_tofu.opdefs.strategy import State
from tf_tofu.graph.view import SearchGraph, update_slots
from tf_tofu.opdefs.regions import Region
from tf_tofu.layout.tiling import device_coords, held_regions, num_devices, op_tiles


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


def piece_level(piece: transfers.Piece, factors: Sequence[int]) -> int:
  a, b = device_coords(piece.src, factors), device_coords(piece.dst, factors)
  for lvl, (x, y) in enumerate(zip(a, b)):
    if x != y:
      return lvl
  raise ValueError("a piece from a device to itself")


def evaluate(graph: SearchGraph, factors: Sequence[int], layouts: Mapping[str, Sequence[State]],
             strategies: Mapping[str, Sequence[str]], describer: Describer) -> Evaluation:
  """Exact bytes of the plan; see the module docstring.

  Identical ops (same signature and strategy) share their tiles, and equal
  (layout, need) pairs share their pieces, so repeated blocks are priced once.
  """
  factors = tuple(factors)
  held_cache: dict = {}
  tiles_cache: dict = {}
  pieces_cache: dict = {}

  def held(t):
    key = (graph.tensors[t].shape, tuple(layouts[t]))
    if key not in held_cache:
      held_cache[key] = held_regions(key[0], key[1], factors)
    return key, held_cache[key]

  level_bytes = [0] * len(factors)
  op_bytes: dict[str, int] = collections.defaultdict(int)
  conversions = []
  needs: dict[str, dict[tuple, list[str]]] = collections.defaultdict(dict)

  def account(tensor, what, levels, ops):
    size = graph.tensors[tensor].itemsize
    lv = [x * size for x in levels]
    total = sum(lv)
    if total:
      for i, b in enumerate(lv):
        level_bytes[i] += b
      share = total // len(ops)
      for j, o in enumerate(ops):
        op_bytes[o] += share + (total - share * len(ops) if j == 0 else 0)
      conversions.append(Conversion(tensor, what, total, tuple(lv)))

  def elements_per_level(pieces):
    lv = [0] * len(factors)
    for p in pieces:
      lv[piece_level(p, factors)] += p.elements
    return lv

  k = num_devices(factors)
  for op in graph.ops:
    if op.kind == "update":
      # Runs on every shard; inputs not element-wise with the variable are needed whole.
      for i in update_slots(graph, op)[1]:
        t = op.inputs[i]
        whole = Region.whole(graph.tensors[t].shape)
        needs[t].setdefault(("update", i), ((whole,) * k, []))[1].append(op.name)
      continue
    if op.kind not in ("compute", "single"):
      continue
    tkey = (context_key(op.context), tuple(strategies[op.name]))
    if tkey not in tiles_cache:
      tiles_cache[tkey] = op_tiles(op.context, strategies[op.name], factors, describer)
    tiles = tiles_cache[tkey]
    for o, t in enumerate(op.outputs):
      hkey, h = held(t)
      pkey = ("produce", tkey, o, hkey)
      if pkey not in pieces_cache:
        produced = [tile.outputs[o] if tile else None for tile in tiles]
        keys = [tile.partial_key[o] if tile else None for tile in tiles]
        pieces_cache[pkey] = elements_per_level(transfers.produce_into(produced, keys, h, factors))
      account(t, f"produce {op.name}", pieces_cache[pkey], [op.name])
    for i, t in enumerate(op.inputs):
      if t is None:
        continue
      need = tuple(tile.inputs[i] if tile else None for tile in tiles)
      if all(r is None for r in need):
        continue
      needs[t].setdefault((tkey, i), (need, []))[1].append(op.name)
  for t, by_need in needs.items():
    hkey, h = held(t)
    merged: dict[tuple, list[str]] = {}
    for need, ops in by_need.values():
      merged.setdefault(need, []).extend(ops)
    for need, ops in merged.items():
      pkey = ("feed", hkey, need)
      if pkey not in pieces_cache:
        pieces_cache[pkey] = elements_per_level(transfers.gather(h, list(need), factors))
      account(t, "feed " + ", ".join(ops), pieces_cache[pkey], ops)
  return Evaluation(sum(level_bytes), tuple(level_bytes), dict(op_bytes), tuple(conversions))
