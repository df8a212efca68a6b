"""The bytes a conversion moves, as explicit pieces: source device, destination, box.

docs/method.md section 5 prices conversions between states; here every conversion is
spelled out piece by piece, so the search can add up exactly what the rewrite
will send.  Two primitives:

*Gather* (from held copies).  The distinct boxes that the devices hold
partition the tensor (each box may be held by several replicas).  A device
that needs box ``N`` and holds ``H`` receives ``N ∩ B`` for every held box
``B != H``, from the replica of ``B`` nearest to it (longest common prefix of
device coordinates, then lowest index).  Its bytes are ``(|N| - |N ∩ H|)``
elements: summed over devices this gives, for n workers and a tensor of S
bytes, ``cut(d) -> cut(d')``: S (n-1)/n, ``cut -> rep``: S (n-1),
``rep -> anything``: 0.

*Reduce* (from partial sums).  Devices whose produced box is the same ``P``
and whose partial keys differ hold the ``m`` addends of ``P``.  Each device of
the group becomes responsible for an intermediate box ``I`` of ``P`` - its
stored box inside ``P`` when those partition ``P``, otherwise the canonical
blocks of ``P`` along its largest dim - and receives the ``m - 1`` other
addends of ``I``: ``(m - 1) |P|`` per group (reduce-scatter).  The
intermediate boxes are then gathered into the stored layout, so
``partial -> cut(d)`` costs S (n-1) and ``partial -> rep`` 2 S (n-1).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from tf_tofu.core.regions import Interval, Region, block
from tf_tofu.layout.tiling import coords_table

COPY = "copy"
REDUCE = "reduce"


@dataclasses.dataclass(frozen=True)
class Piece:
  """``region`` (global box) of a tensor sent from ``src`` to ``dst``.

  ``kind`` is ``copy`` for held data and ``reduce`` for an addend of a
  partial sum that ``dst`` adds to its own.
  """

  src: int
  dst: int
  region: Region
  kind: str

  @property
  def elements(self) -> int:
    return self.region.volume


def _common_prefix(ca: tuple[int, ...], cb: tuple[int, ...]) -> int:
  p = 0
  while p < len(ca) and ca[p] == cb[p]:
    p += 1
  return p


def nearest(dst: int, candidates: Sequence[int], factors: Sequence[int]) -> int:
  """The candidate closest to ``dst`` in the device hierarchy (lowest index on ties)."""
  if len(candidates) == 1:
    return candidates[0]
  coords = coords_table(tuple(factors))
  return min(candidates, key=lambda c: (-_common_prefix(coords[dst], coords[c]), c))


class _Overlaps:
  """Boxes findable by overlap.  Per dim, the boxes grouped by their interval on it; a
  query box meets box ``i`` (positive volume in common) iff it meets ``i``'s interval
  on every dim, so the candidates are the intersection over dims of the boxes whose
  interval meets the query's.  Held layouts are grids of few distinct intervals per
  dim, so a query costs about ``rank x k^(1/levels)`` interval tests instead of one
  box intersection per distinct box."""

  def __init__(self, boxes: Sequence[Region]):
    self.count = len(boxes)
    rank = boxes[0].rank if boxes else 0
    self.by_dim = []
    for dim in range(rank):
      groups: dict[Interval, set[int]] = {}
      for i, b in enumerate(boxes):
        groups.setdefault(b.intervals[dim], set()).add(i)
      self.by_dim.append(list(groups.items()))

  def meeting(self, r: Region) -> list[int]:
    """Indices (ascending) of the boxes that share a positive volume with ``r`` (which
    has a positive volume)."""
    found: Optional[set[int]] = None
    for dim, groups in enumerate(self.by_dim):
      iv = r.intervals[dim]
      hit: set[int] = set()
      for jv, idx in groups:
        if jv.lo < iv.hi and iv.lo < jv.hi:
          hit |= idx
      found = hit if found is None else found & hit
      if not found:
        return []
    return sorted(found) if found is not None else list(range(self.count))


def distinct_boxes(have: Sequence[Optional[Region]]) -> dict[Region, list[int]]:
  """Distinct held boxes with their holders; checks they partition what they cover."""
  boxes: dict[Region, list[int]] = {}
  for dev, r in enumerate(have):
    if r is not None and r.volume > 0:
      boxes.setdefault(r, []).append(dev)
  regs = list(boxes)
  index = _Overlaps(regs)
  for i, a in enumerate(regs):
    for j in index.meeting(a):
      if j != i:
        raise ValueError(f"held boxes {a} and {regs[j]} overlap without being equal; "
                         "a layout must partition its tensor")
  return boxes


def gather(have: Sequence[Optional[Region]], need: Sequence[Optional[Region]],
           factors: Sequence[int]) -> list[Piece]:
  """Pieces that give every device its ``need`` from the devices' ``have``."""
  boxes = distinct_boxes(have)
  regs = list(boxes)
  index = _Overlaps(regs)
  pieces = []
  for dst, n in enumerate(need):
    if n is None or n.volume == 0:
      continue
    own = have[dst]
    for i in index.meeting(n):
      box = regs[i]
      if box == own:
        continue
      pieces.append(Piece(nearest(dst, boxes[box], factors), dst, n.intersect(box), COPY))
  covered = sum(p.elements for p in pieces)
  expected = sum((n.volume - (n.intersect(have[d]).volume if have[d] is not None else 0))
                 for d, n in enumerate(need) if n is not None)
  if covered != expected:
    raise ValueError(f"held boxes do not cover what is needed ({covered} of {expected} elements)")
  return pieces


def _split_box(p: Region, parts: int) -> list[Region]:
  """``parts`` canonical blocks of ``p`` along its largest dim (lowest dim on ties)."""
  if p.rank == 0:
    return [p] + [None] * (parts - 1)  # a scalar is not split
  d = max(range(p.rank), key=lambda i: (p.intervals[i].size, -i))
  out = []
  for w in range(parts):
    lo, hi = block(p.intervals[d].size, parts, w)
    ivs = list(p.intervals)
    ivs[d] = Interval(p.intervals[d].lo + lo, p.intervals[d].lo + hi)
    out.append(Region(tuple(ivs)))
  return out


def reduce_partials(produced: Sequence[Optional[Region]], keys: Sequence[Optional[tuple]],
                    stored: Sequence[Optional[Region]], factors: Sequence[int]
                    ) -> tuple[list[Piece], list[Optional[Region]]]:
  """Reduce-scatter pieces and the intermediate boxes each device then holds, final.

  ``produced[d]``/``keys[d]``: the box device ``d`` computed and its partial
  key (None where it computed nothing).  ``stored[d]``: the box it must end
  up holding; it shapes the intermediate split.
  """
  groups: dict[Region, list[int]] = {}
  for dev, r in enumerate(produced):
    if r is not None:
      groups.setdefault(r, []).append(dev)
  pieces: list[Piece] = []
  inter: list[Optional[Region]] = [None] * len(produced)
  for box, devs in groups.items():
    key_holders: dict = {}
    for d in devs:
      key_holders.setdefault(keys[d], []).append(d)
    if len(key_holders) == 1:
      # Replicas of one final value: each keeps what it has.
      for d in devs:
        inter[d] = box if d == min(devs) else None
      continue
    cand = [None if stored[d] is None else stored[d].intersect(box) for d in devs]
    if _partitions(cand, box):
      mine = cand
    else:
      mine = _split_box(box, len(devs))
    for d, i_box in zip(devs, mine):
      inter[d] = i_box if i_box is not None and i_box.volume else None
      if inter[d] is None:
        continue
      for key, holders in key_holders.items():
        if key == keys[d]:
          continue
        pieces.append(Piece(nearest(d, holders, factors), d, inter[d], REDUCE))
  return pieces, inter


def _partitions(boxes: Sequence[Optional[Region]], whole: Region) -> bool:
  regs = [b for b in boxes if b is not None and b.volume]
  if sum(b.volume for b in regs) != whole.volume:
    return False
  return all(not a.intersect(b).volume for i, a in enumerate(regs) for b in regs[i + 1:])


def produce_into(produced: Sequence[Optional[Region]], keys: Sequence[Optional[tuple]],
                 stored: Sequence[Optional[Region]], factors: Sequence[int]) -> list[Piece]:
  """Pieces that turn an op's outputs (maybe partial) into the tensor's stored layout."""
  partial = any(k for k in keys if k)
  if not partial:
    return gather(produced, stored, factors)
  red, inter = reduce_partials(produced, keys, stored, factors)
  return red + gather(inter, stored, factors)

