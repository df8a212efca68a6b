"""The exact bytes of a complete plan: every piece every device sends, per level.

Given the level factors, every tensor's layout and every op's strategy, the
tiles (``tf_tofu.tiling``) say what each device holds and computes, and
``tf_tofu.transfers`` spells out the pieces:

* production: an op's outputs (maybe partial) into the tensor's layout;
* consumption: the tensor's layout into what each consumer's tiles read.
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

from tf_tofu import transfers
from tf_tofu.opdefs.registry import Describer
from tf_tofu.opdefs.strategy import State
from tf_tofu.search.problem import SearchGraph
from tf_tofu.tiling import device_coords, held_regions, op_tiles


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
  """Exact bytes of the plan; see the module docstring."""
  held = {t: held_regions(graph.tensors[t].shape, layouts[t], factors) for t in graph.tensors}
  level_bytes = [0] * len(factors)
  op_bytes: dict[str, int] = collections.defaultdict(int)
  conversions = []
  needs: dict[str, dict[tuple, list[str]]] = collections.defaultdict(dict)

  def account(tensor, what, pieces, ops):
    size = graph.tensors[tensor].itemsize
    lv = [0] * len(factors)
    for p in pieces:
      lv[piece_level(p, factors)] += p.elements * size
    total = sum(lv)
    if total:
      for i, b in enumerate(lv):
        level_bytes[i] += b
      share = total // len(ops)
      for j, o in enumerate(ops):
        op_bytes[o] += share + (total - share * len(ops) if j == 0 else 0)
      conversions.append(Conversion(tensor, what, total, tuple(lv)))

  for op in graph.ops:
    if op.kind not in ("compute", "single"):
      continue
    tiles = op_tiles(op.context, strategies[op.name], factors, describer)
    for o, t in enumerate(op.outputs):
      produced = [tile.outputs[o] if tile else None for tile in tiles]
      keys = [tile.partial_key[o] if tile else None for tile in tiles]
      account(t, f"produce {op.name}", transfers.produce_into(produced, keys, held[t], factors),
              [op.name])
    for i, t in enumerate(op.inputs):
      if t is None:
        continue
      need = tuple(tile.inputs[i] if tile else None for tile in tiles)
      if all(r is None for r in need):
        continue
      needs[t].setdefault(need, []).append(op.name)
  for t, by_need in needs.items():
    for need, ops in by_need.items():
      account(t, "feed " + ", ".join(ops), transfers.gather(held[t], list(need), factors), ops)
  return Evaluation(sum(level_bytes), tuple(level_bytes), dict(op_bytes), tuple(conversions))
