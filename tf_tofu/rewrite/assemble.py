"""A box from sub-boxes: guillotine recursion over dims, one ConcatV2 per cut.

Given a target box ``T`` and parts that partition it (the device's own slice
and the pieces it receives), find the lowest dim along which ``T`` can be cut
into slabs so that no part straddles a cut; assemble every slab recursively
and concatenate the slabs along that dim.  Parts that come from layouts and
tiles (recursive block cuts, and their intersections with any box) always
admit such a cut; anything else is refused with the boxes in the message.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence, Union

from tf_tofu.core.regions import Interval, Region
from tf_tofu.ops import comm


@dataclasses.dataclass(frozen=True)
class Shard:
  """``tensor`` (a name in the partitioned graph) holds ``box`` of a tensor, on ``device``."""

  box: Region
  tensor: str
  device: int


# A guillotine tree: a leaf is the index of a part; a node is (dim, subtrees).
Tree = Union[int, tuple[int, tuple["Tree", ...]]]


def _check_partition(target: Region, boxes: Sequence[Region]) -> None:
  for b in boxes:
    if b.intersect(target) != b:
      raise ValueError(f"part {b} is not inside the box {target} it should assemble")
  if sum(b.volume for b in boxes) != target.volume:
    raise ValueError(f"parts {list(boxes)} do not partition {target}: "
                     f"{sum(b.volume for b in boxes)} of {target.volume} elements")


def guillotine(target: Region, boxes: Sequence[Region]) -> Tree:
  """The concat tree that builds ``target`` from ``boxes`` (which partition it, volume > 0)."""
  _check_partition(target, boxes)
  return _tree(target, list(range(len(boxes))), boxes)


def _tree(target: Region, idx: list[int], boxes: Sequence[Region]) -> Tree:
  if len(idx) == 1:
    if boxes[idx[0]] != target:  # volumes match and it lies inside, so this cannot happen
      raise ValueError(f"part {boxes[idx[0]]} should be the whole box {target}")
    return idx[0]
  for dim in range(target.rank):
    lo, hi = target.intervals[dim].lo, target.intervals[dim].hi
    cuts = sorted({boxes[i].intervals[dim].lo for i in idx} |
                  {boxes[i].intervals[dim].hi for i in idx})
    valid = [c for c in cuts if lo < c < hi and
             not any(boxes[i].intervals[dim].lo < c < boxes[i].intervals[dim].hi for i in idx)]
    if not valid:
      continue
    edges = [lo] + valid + [hi]
    subs = []
    for a, z in zip(edges, edges[1:]):
      ivs = list(target.intervals)
      ivs[dim] = Interval(a, z)
      slab = Region(tuple(ivs))
      members = [i for i in idx
                 if a <= boxes[i].intervals[dim].lo and boxes[i].intervals[dim].hi <= z]
      subs.append(_tree(slab, members, boxes))
    return (dim, tuple(subs))
  raise ValueError(f"the parts {[boxes[i] for i in idx]} of {target} admit no guillotine cut; "
                   "they cannot be assembled by concatenation")


def build_box(b: comm.GraphBuilder, name: str, target: Region, parts: Sequence[Shard],
              dtype: str, device: str) -> str:
  """The tensor holding ``target``, concatenated on ``device`` from ``parts``."""
  parts = [p for p in parts if p.box.volume > 0]
  if not parts:
    raise ValueError(f"{name}: no parts to assemble {target} from")
  tree = guillotine(target, [p.box for p in parts])
  counter = [0]

  def emit(t: Tree) -> str:
    if isinstance(t, int):
      return parts[t].tensor
    dim, subs = t
    xs = [emit(s) for s in subs]
    counter[0] += 1
    return comm.concat(b, f"{name}/concat{counter[0] if counter[0] > 1 else ''}", xs, dim,
                       dtype, device)

  return emit(tree)
