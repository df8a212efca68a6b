"""Which conversions are collectives: all-gather, all-reduce, reduce-scatter of equal blocks.

A conversion is matched as a whole (otherwise it is sent as plain pieces),
and only when the collective form moves exactly the pieces' bytes, so the
plan's prediction stays exact in both forms.

*All-gather* (held or produced boxes -> needs).  A device whose need lies in
its own box is served locally.  Every other device needs a box ``U`` that
the held boxes tile with ``m >= 2`` equal-shape blocks, and holds one of them.
The devices needing ``U`` split into ``r`` groups, group ``i`` made of the
``i``-th holder (by device index) of every block; each group all-gathers,
moving ``|U| (m - 1)``.  For a ``cut -> rep`` conversion this equals the
pieces' ``|U| (m - 1) / m`` per device.

*All-reduce* (partial -> stored ``P`` on every member).  Devices that
produced the same box ``P`` with ``m`` distinct partial keys, each key held by
``r`` replicas: the first holder of every key forms the core, which
all-reduces (``2 |P| (m - 1)``); the ``(r - 1) m`` other devices receive the
sum from the nearest core member (``|P|`` each).  The pieces (reduce-scatter
over all ``r m`` devices, then gather) move ``|P| (m - 1 + r m - 1)``: the same.

*Reduce-scatter* (partial -> blocks of ``P``, ``r = 1``).  The members' stored
boxes cut ``P`` along one dim into equal blocks; rank ``i`` must store block
``i``.  It moves ``|P| (m - 1)``, as the pieces do.  TensorFlow implements it
with NCCL only, so the partitioner allows it on GPU groups alone.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from tf_tofu.layout import transfers
from tf_tofu.core.regions import Region


@dataclasses.dataclass(frozen=True)
class GatherGroup:
  members: tuple[int, ...]  # devices, each holding one block of target
  target: Region


@dataclasses.dataclass(frozen=True)
class GatherRecipe:
  groups: tuple[GatherGroup, ...]

  @property
  def elements(self) -> int:
    return sum(g.target.volume * (len(g.members) - 1) for g in self.groups)


@dataclasses.dataclass(frozen=True)
class ReduceGroup:
  box: Region
  core: tuple[int, ...]               # one holder of every partial key
  copies: tuple[tuple[int, int], ...]  # (destination, core member it copies the sum from)
  scatter: Optional[int] = None        # the dim of a reduce-scatter; None for an all-reduce

  @property
  def elements(self) -> int:
    m = len(self.core)
    if self.scatter is not None:
      return self.box.volume * (m - 1)
    return 2 * self.box.volume * (m - 1) + len(self.copies) * self.box.volume


@dataclasses.dataclass(frozen=True)
class ReduceRecipe:
  groups: tuple[ReduceGroup, ...]

  @property
  def elements(self) -> int:
    return sum(g.elements for g in self.groups)


def _contains(outer: Optional[Region], inner: Region) -> bool:
  return outer is not None and inner.intersect(outer) == inner


def match_gather(have: Sequence[Optional[Region]], need: Sequence[Optional[Region]]
                 ) -> Optional[GatherRecipe]:
  """The all-gather groups that realise ``have -> need``, or None."""
  boxes = transfers.distinct_boxes(have)
  wanting: dict[Region, list[int]] = {}
  for d, n in enumerate(need):
    if n is None or n.volume == 0 or _contains(have[d], n):
      continue
    wanting.setdefault(n, []).append(d)
  groups = []
  for target, devs in wanting.items():
    blocks = [b for b in boxes if b.intersect(target).volume]
    if len(blocks) < 2 or any(b.intersect(target) != b for b in blocks):
      return None
    if sum(b.volume for b in blocks) != target.volume or len({b.shape for b in blocks}) != 1:
      return None
    per_block = [[d for d in devs if have[d] == b] for b in blocks]
    if sum(len(p) for p in per_block) != len(devs):
      return None  # a device needing the target holds none of its blocks
    r = len(per_block[0])
    if any(len(p) != r for p in per_block):
      return None
    for i in range(r):
      groups.append(GatherGroup(tuple(sorted(p[i] for p in per_block)), target))
  return GatherRecipe(tuple(groups))


def _rank_blocks_along(box: Region, blocks: Sequence[Region]) -> Optional[int]:
  """The dim along which ``blocks`` (in order) tile ``box`` in equal, ascending slabs."""
  if len({b.shape for b in blocks}) != 1:
    return None
  for dim in range(box.rank):
    others = [i for i in range(box.rank) if i != dim]
    if any(b.intervals[i] != box.intervals[i] for b in blocks for i in others):
      continue
    pos = box.intervals[dim].lo
    ok = True
    for b in blocks:
      if b.intervals[dim].lo != pos:
        ok = False
        break
      pos = b.intervals[dim].hi
    if ok and pos == box.intervals[dim].hi:
      return dim
  return None


def match_reduce(produced: Sequence[Optional[Region]], keys: Sequence[Optional[tuple]],
                 stored: Sequence[Optional[Region]], factors: Sequence[int],
                 rank_of: Sequence[int], allow_reduce_scatter: bool) -> Optional[ReduceRecipe]:
  """The all-reduce / reduce-scatter groups that realise ``partial -> stored``, or None.

  ``rank_of[d]`` orders devices as TensorFlow ranks a group's members.
  """
  by_box: dict[Region, list[int]] = {}
  for d, r in enumerate(produced):
    if r is not None:
      by_box.setdefault(r, []).append(d)
  covered = set()
  groups = []
  for box, devs in by_box.items():
    holders: dict = {}
    for d in devs:
      holders.setdefault(keys[d], []).append(d)
    if len(holders) < 2:
      return None
    core = tuple(sorted(h[0] for h in holders.values()))
    rest = [d for d in devs if d not in core]
    if all(stored[d] == box for d in devs):
      copies = tuple((d, transfers.nearest(d, core, factors)) for d in rest)
      groups.append(ReduceGroup(box, core, copies))
    elif allow_reduce_scatter and not rest and all(_contains(box, stored[d]) for d in devs):
      ranked = sorted(devs, key=lambda d: rank_of[d])
      dim = _rank_blocks_along(box, [stored[d] for d in ranked])
      if dim is None:
        return None
      groups.append(ReduceGroup(box, core, (), dim))
    else:
      return None
    covered.update(devs)
  # Devices that produced nothing must store nothing that needs these partial sums.
  for d, s in enumerate(stored):
    if d not in covered and s is not None and s.volume:
      return None
  return ReduceRecipe(tuple(groups))
