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
import functools
from typing import Optional, Sequence

import numpy as np

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


@functools.lru_cache(maxsize=64)
def level_table(factors: tuple[int, ...]) -> np.ndarray:
  """``[a, b]``: the length of devices a's and b's common coordinate prefix, i.e. the
  level whose link a piece between them crosses (``len(factors)`` on the diagonal)."""
  table = coords_table(factors)
  coords = np.array(table, dtype=np.int64).reshape(len(table), len(factors))
  return np.cumprod(coords[:, None, :] == coords[None, :, :], axis=2).sum(axis=2)


@functools.lru_cache(maxsize=64)
def _closeness(factors: tuple[int, ...]) -> np.ndarray:
  """``[dst, src]``: larger for a source :func:`nearest` prefers (longer common prefix,
  then lower index)."""
  prefix = level_table(factors)
  k = len(prefix)
  return prefix * k + (k - 1 - np.arange(k))[None, :]


def nearest(dst: int, candidates: Sequence[int], factors: Sequence[int]) -> int:
  """The candidate closest to ``dst`` in the device hierarchy (longest common prefix of
  coordinates, lowest index on ties)."""
  if len(candidates) == 1:
    return candidates[0]
  row = _closeness(tuple(factors))[dst]
  return max(candidates, key=lambda c: row[c])


def _bounds(regions: Sequence[Region], rank: int) -> tuple[np.ndarray, np.ndarray]:
  lo = np.array([[iv.lo for iv in r.intervals] for r in regions], dtype=np.int64)
  hi = np.array([[iv.hi for iv in r.intervals] for r in regions], dtype=np.int64)
  return lo.reshape(len(regions), rank), hi.reshape(len(regions), rank)


def _overlaps(alo, ahi, blo, bhi) -> np.ndarray:
  """``[i, j]``: elements that box i of ``a`` and box j of ``b`` have in common."""
  side = np.minimum(ahi[:, None, :], bhi[None, :, :]) - np.maximum(alo[:, None, :],
                                                                   blo[None, :, :])
  return np.prod(np.maximum(side, 0), axis=2)


def _overlapping_pair(lo: np.ndarray, hi: np.ndarray) -> Optional[tuple[int, int]]:
  """The first pair ``(i, j)``, ``i != j``, of boxes (bounds ``lo``, ``hi``) that share an
  element, or None."""
  if len(lo) < 2:
    return None
  common = _overlaps(lo, hi, lo, hi)
  np.fill_diagonal(common, 0)
  if not common.any():
    return None
  i, j = np.argwhere(common)[0]
  return int(i), int(j)


def _held(have: Sequence[Optional[Region]]):
  """``(distinct held boxes -> holders, their lower bounds, upper bounds)``; checks that
  the boxes partition what they cover."""
  boxes: dict[Region, list[int]] = {}
  for dev, r in enumerate(have):
    if r is not None and r.volume > 0:
      boxes.setdefault(r, []).append(dev)
  regs = list(boxes)
  lo, hi = _bounds(regs, regs[0].rank if regs else 0)
  pair = _overlapping_pair(lo, hi)
  if pair is not None:
    i, j = pair
    raise ValueError(f"held boxes {regs[i]} and {regs[j]} overlap without being equal; "
                     "a layout must partition its tensor")
  return boxes, lo, hi


def distinct_boxes(have: Sequence[Optional[Region]]) -> dict[Region, list[int]]:
  """Distinct held boxes with their holders; checks they partition what they cover."""
  return _held(have)[0]


@dataclasses.dataclass(frozen=True)
class Flows:
  """A conversion's pieces as arrays: piece ``i`` sends ``elements[i]`` elements from
  device ``src[i]`` to ``dst[i]`` (what the search counts; :class:`Piece` adds the box)."""

  src: np.ndarray
  dst: np.ndarray
  elements: np.ndarray

  @staticmethod
  def of(pieces: Sequence[Piece]) -> "Flows":
    return Flows(np.array([p.src for p in pieces], dtype=np.int64),
                 np.array([p.dst for p in pieces], dtype=np.int64),
                 np.array([p.elements for p in pieces], dtype=np.int64))

  def __add__(self, other: "Flows") -> "Flows":
    return Flows(*(np.concatenate([a, b]) for a, b in
                   ((self.src, other.src), (self.dst, other.dst),
                    (self.elements, other.elements))))


def _gather(have: Sequence[Optional[Region]], need: Sequence[Optional[Region]],
            factors: Sequence[int]):
  """``(distinct held boxes, flows, box index per flow)`` of :func:`gather`.

  Where every device already holds what it needs (most conversions of a good
  plan) nothing moves, and no box list or overlap table is built."""
  empty = np.zeros(0, dtype=np.int64)
  if all(n is None or n.volume == 0 or (h is not None and h.contains(n))
         for h, n in zip(have, need)):
    return [], Flows(empty, empty, empty), empty
  boxes, blo, bhi = _held(have)
  regs = list(boxes)
  dsts = [d for d, n in enumerate(need) if n is not None and n.volume > 0]
  rank = need[dsts[0]].rank
  if not regs:
    raise ValueError(f"held boxes do not cover what is needed (0 of "
                     f"{sum(need[d].volume for d in dsts)} elements)")
  if blo.shape[1] != rank:
    raise ValueError(f"regions of rank {blo.shape[1]} and {rank} cannot be combined")
  index = {r: j for j, r in enumerate(regs)}
  own = np.array([index.get(have[d], -1) if have[d] is not None else -1 for d in dsts])
  nlo, nhi = _bounds([need[d] for d in dsts], rank)
  common = _overlaps(nlo, nhi, blo, bhi)                      # [needing device, box]
  needed = np.prod(nhi - nlo, axis=1)
  kept = np.where(own >= 0, common[np.arange(len(dsts)), np.maximum(own, 0)], 0)
  common[own >= 0, own[own >= 0]] = 0                          # what a device holds stays
  if common.sum() != (needed - kept).sum():
    raise ValueError(f"held boxes do not cover what is needed ({int(common.sum())} of "
                     f"{int((needed - kept).sum())} elements)")
  row, j = np.nonzero(common)                                  # device-major, boxes ascending
  dst = np.array(dsts, dtype=np.int64)[row]
  holders = np.zeros((len(regs), len(need)), dtype=bool)
  for b, devs in enumerate(boxes.values()):
    holders[b, devs] = True
  src = np.argmax(np.where(holders[j], _closeness(tuple(factors))[dst], -1), axis=1)
  return regs, Flows(src.astype(np.int64), dst, common[row, j].astype(np.int64)), j


def gather(have: Sequence[Optional[Region]], need: Sequence[Optional[Region]],
           factors: Sequence[int]) -> list[Piece]:
  """Pieces that give every device its ``need`` from the devices' ``have``."""
  regs, flows, box = _gather(have, need, factors)
  return [Piece(int(s), int(d), need[d].intersect(regs[b]), COPY)
          for s, d, b in zip(flows.src, flows.dst.tolist(), box.tolist())]


def gather_flows(have: Sequence[Optional[Region]], need: Sequence[Optional[Region]],
                 factors: Sequence[int]) -> Flows:
  """:func:`gather`'s pieces as :class:`Flows` (no boxes built)."""
  return _gather(have, need, factors)[1]


def gather_elements(have: Sequence[Optional[Region]], need: Sequence[Optional[Region]]) -> int:
  """The elements :func:`gather` moves, ``sum_d |N_d| - |N_d ∩ H_d|``, without its pieces.

  Exact when the distinct held boxes partition a region that covers every
  need, as the held blocks of a ``Cut`` or ``REP`` state (``tiling.held_regions``)
  partition the whole tensor: device ``d`` then receives every element of
  ``N_d`` outside its own box ``H_d``, once.  :func:`gather` checks that
  premise; this count, priced millions of times by the search, assumes it.
  """
  return sum(n.volume - (n.intersect(h).volume if h is not None else 0)
             for h, n in zip(have, need) if n is not None)


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
  """Whether the non-empty ``boxes`` (inside ``whole``) cover it without overlapping: their
  volumes sum to its volume and no two share an element (one overlap table)."""
  regs = [b for b in boxes if b is not None and b.volume]
  if sum(b.volume for b in regs) != whole.volume:
    return False
  return _overlapping_pair(*_bounds(regs, whole.rank)) is None


def produce_into(produced: Sequence[Optional[Region]], keys: Sequence[Optional[tuple]],
                 stored: Sequence[Optional[Region]], factors: Sequence[int]) -> list[Piece]:
  """Pieces that turn an op's outputs (maybe partial) into the tensor's stored layout."""
  partial = any(k for k in keys if k)
  if not partial:
    return gather(produced, stored, factors)
  red, inter = reduce_partials(produced, keys, stored, factors)
  return red + gather(inter, stored, factors)


def produce_flows(produced: Sequence[Optional[Region]], keys: Sequence[Optional[tuple]],
                  stored: Sequence[Optional[Region]], factors: Sequence[int]) -> Flows:
  """:func:`produce_into`'s pieces as :class:`Flows`."""
  partial = any(k for k in keys if k)
  if not partial:
    return gather_flows(produced, stored, factors)
  red, inter = reduce_partials(produced, keys, stored, factors)
  return Flows.of(red) + gather_flows(inter, stored, factors)

