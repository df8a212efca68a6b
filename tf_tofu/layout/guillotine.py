"""A box from sub-boxes that partition it: the guillotine tree of concatenations.

Given a target box ``T`` and parts that partition it (what a device holds
of a tensor and the pieces it receives), find the lowest dim along which
``T`` can be cut into slabs so that no part straddles a cut, at every such
cut of that dim; build every slab the same way and concatenate the slabs
along that dim.  Parts that come from layouts and tiles (recursive block
cuts, and their intersections with any box) always admit such a cut;
anything else is refused with the boxes in the message.

The rewrite emits one ``ConcatV2`` per inner node (``rewrite.assemble``,
``rewrite.export``); the memory model sizes one buffer per inner node
(``layout.memory``); each walks the tree with :func:`fold`.
"""

from __future__ import annotations

import bisect
from typing import Callable, Sequence, TypeVar, Union

from tf_tofu.core.regions import Interval, Region

# A leaf is the index of a part; a node is (dim, ((slab, subtree), ...)): the slabs
# along ``dim``, in order, each with the tree that builds it.
Tree = Union[int, tuple[int, tuple[tuple[Region, "Tree"], ...]]]
T = TypeVar("T")


def check_partition(target: Region, boxes: Sequence[Region]) -> None:
  """ValueError unless ``boxes`` lie inside ``target`` and their volumes add up to it."""
  for b in boxes:
    if b.intersect(target) != b:
      raise ValueError(f"part {b} is not inside the box {target} it should assemble")
  if sum(b.volume for b in boxes) != target.volume:
    raise ValueError(f"parts {list(boxes)} do not partition {target}: "
                     f"{sum(b.volume for b in boxes)} of {target.volume} elements")


def tree(target: Region, boxes: Sequence[Region]) -> Tree:
  """The concat tree that builds ``target`` from ``boxes`` (which partition it, volume > 0)."""
  check_partition(target, boxes)
  return _tree(target, list(range(len(boxes))), boxes)


def _tree(target: Region, idx: list[int], boxes: Sequence[Region]) -> Tree:
  if len(idx) == 1:
    # (Intervals compared directly: the slab is a new Region, whose hash a Region
    # comparison would compute.)
    if boxes[idx[0]].intervals != target.intervals:
      raise ValueError(f"part {boxes[idx[0]]} should be the whole box {target}")
    return idx[0]
  for dim in range(target.rank):
    lo, hi = target.intervals[dim].lo, target.intervals[dim].hi
    spans = [(boxes[i].intervals[dim].lo, boxes[i].intervals[dim].hi) for i in idx]
    edges = _edges(lo, hi, spans)
    if len(edges) == 2:
      continue
    members: list[list[int]] = [[] for _ in edges[1:]]
    for i, (a, _) in zip(idx, spans):  # a part lies in the slab its start is in
      members[bisect.bisect_right(edges, a) - 1].append(i)
    subs = []
    for a, z, sub in zip(edges, edges[1:], members):
      ivs = list(target.intervals)
      ivs[dim] = Interval(a, z)
      slab = Region(tuple(ivs))
      subs.append((slab, _tree(slab, sub, boxes)))
    return (dim, tuple(subs))
  raise ValueError(f"the parts {[boxes[i] for i in idx]} of {target} admit no guillotine cut; "
                   "they cannot be assembled by concatenation")


def fold(tree: Tree, box: Region, leaf: Callable[[int], T],
         join: Callable[[int, list, Region], T]) -> T:
  """``box`` built bottom-up from ``tree``: ``leaf(i)`` for part ``i``, and for each inner
  node ``join(dim, the values of its slabs in order, the node's box)``, every node after
  its slabs (post-order).  One module-level walk for every user: a closure that calls
  itself is a reference cycle, which would keep what it holds alive until the cyclic
  collector ran."""
  if isinstance(tree, int):
    return leaf(tree)
  dim, subs = tree
  return join(dim, [fold(sub, slab, leaf, join) for slab, sub in subs], box)


def _edges(lo: int, hi: int, spans: Sequence[tuple[int, int]]) -> list[int]:
  """``[lo, c_1, ..., hi]``: every end ``c`` of a span with ``lo < c < hi`` that no span
  ``[a, z)`` straddles (``a < c < z``), in order.  One sweep of the spans by start: ``c``
  is free when the furthest end of the spans starting before it is at most ``c``."""
  cuts = sorted({x for span in spans for x in span if lo < x < hi})
  starts = sorted(spans)
  edges, reach, j = [lo], lo, 0
  for c in cuts:
    while j < len(starts) and starts[j][0] < c:
      reach = max(reach, starts[j][1])
      j += 1
    if reach <= c:
      edges.append(c)
  edges.append(hi)
  return edges


__all__ = ["Tree", "check_partition", "fold", "tree"]
