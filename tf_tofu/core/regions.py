"""Intervals, boxes and the canonical n-way split of a dimension.

A dimension of size ``D`` cut ``n`` ways is split like ``numpy.array_split``:
the first ``D mod n`` blocks hold ``ceil(D / n)`` elements and the rest hold
``floor(D / n)``, so worker ``w`` owns the half-open range

    [w * q + min(w, r), (w + 1) * q + min(w + 1, r)),   q = D // n, r = D % n.

Every module that talks about "block w of n" uses :func:`block`, so the
search's cost model, the op analysis and the rewrite agree on the boundaries.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence


def block(size: int, n: int, w: int) -> tuple[int, int]:
  """Returns the half-open range ``[lo, hi)`` that worker ``w`` of ``n`` owns."""
  if n < 1:
    raise ValueError(f"cannot split into n={n} blocks; n must be >= 1")
  if not 0 <= w < n:
    raise ValueError(f"worker {w} is not one of the {n} workers")
  q, r = divmod(size, n)
  return w * q + min(w, r), (w + 1) * q + min(w + 1, r)


def block_sizes(size: int, n: int) -> tuple[int, ...]:
  """Sizes of the ``n`` blocks of a dimension of ``size`` elements."""
  return tuple(hi - lo for lo, hi in (block(size, n, w) for w in range(n)))


@dataclasses.dataclass(frozen=True)
class Interval:
  """The half-open integer range ``[lo, hi)``; empty when ``hi <= lo``."""

  lo: int
  hi: int

  def __post_init__(self):
    if not isinstance(self.lo, int) or not isinstance(self.hi, int):
      raise TypeError(f"Interval bounds must be ints, got {self.lo!r}, {self.hi!r}")

  @property
  def size(self) -> int:
    return max(0, self.hi - self.lo)

  @property
  def empty(self) -> bool:
    return self.hi <= self.lo

  def clamp(self, size: int) -> "Interval":
    """The part of this interval that lies inside ``[0, size)``."""
    lo, hi = max(0, self.lo), min(size, self.hi)
    return Interval(lo, max(lo, hi)) if lo < size else Interval(size, size)

  def hull(self, other: "Interval") -> "Interval":
    """Smallest interval containing both (an empty side is ignored)."""
    if self.empty:
      return other
    if other.empty:
      return self
    return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

  def intersect(self, other: "Interval") -> "Interval":
    lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
    if hi >= lo:  # an operand that is the result is returned as is (no new object)
      if lo == self.lo and hi == self.hi:
        return self
      if lo == other.lo and hi == other.hi:
        return other
    return Interval(lo, max(lo, hi))


@dataclasses.dataclass(frozen=True)
class Region:
  """A box: one :class:`Interval` per dimension of a tensor."""

  intervals: tuple[Interval, ...]

  def __hash__(self) -> int:
    # Computed once: regions are dictionary keys in every price and piece cache (an
    # attribute read is the fast path, 1.5x faster than a __dict__ lookup).
    try:
      return self._hash
    except AttributeError:
      h = hash(self.intervals)
      object.__setattr__(self, "_hash", h)
      return h

  @classmethod
  def whole(cls, shape: Sequence[int]) -> "Region":
    return cls(tuple(Interval(0, int(d)) for d in shape))

  @classmethod
  def of(cls, bounds: Iterable[tuple[int, int]]) -> "Region":
    return cls(tuple(Interval(int(lo), int(hi)) for lo, hi in bounds))

  @property
  def shape(self) -> tuple[int, ...]:
    try:  # computed once, like the hash and the volume
      return self._shape
    except AttributeError:
      got = tuple(iv.size for iv in self.intervals)
      object.__setattr__(self, "_shape", got)
      return got

  @property
  def volume(self) -> int:
    # Computed once, like the hash: every piece and need is sized many times.
    try:
      return self._volume
    except AttributeError:
      v = 1
      for iv in self.intervals:
        v *= iv.size
      object.__setattr__(self, "_volume", v)
      return v

  @property
  def rank(self) -> int:
    return len(self.intervals)

  def slices(self) -> tuple[slice, ...]:
    """Numpy-style slices that cut this box out of the whole tensor."""
    return tuple(slice(iv.lo, iv.hi) for iv in self.intervals)

  def __eq__(self, other) -> bool:
    if self is other:
      return True
    if not isinstance(other, Region):
      return NotImplemented
    return hash(self) == hash(other) and self.intervals == other.intervals

  def intersect(self, other: "Region") -> "Region":
    """The common box (``Interval.intersect`` per dim; an operand equal to the result
    is returned as is).  Written out per dim: the memory model and the search
    intersect boxes millions of times."""
    if self is other:
      return self
    _check_rank(self, other)
    ivs = []
    mine = theirs = True
    for a, b in zip(self.intervals, other.intervals):
      lo = a.lo if a.lo >= b.lo else b.lo
      hi = a.hi if a.hi <= b.hi else b.hi
      if hi >= lo and lo == a.lo and hi == a.hi:
        iv = a
      elif hi >= lo and lo == b.lo and hi == b.hi:
        iv = b
      else:
        iv = Interval(lo, hi if hi > lo else lo)
      mine = mine and iv is a
      theirs = theirs and iv is b
      ivs.append(iv)
    if mine:
      return self
    if theirs:
      return other
    return Region(tuple(ivs))

  def contains(self, other: "Region") -> bool:
    """Whether every element of ``other`` lies in this box."""
    if self is other:
      return True
    _check_rank(self, other)
    return all(a.lo <= b.lo and b.hi <= a.hi
               for a, b in zip(self.intervals, other.intervals))

  def hull(self, other: "Region") -> "Region":
    _check_rank(self, other)
    return Region(tuple(a.hull(b) for a, b in zip(self.intervals, other.intervals)))

  def is_whole(self, shape: Sequence[int]) -> bool:
    return self == Region.whole(shape)


def _check_rank(a: Region, b: Region) -> None:
  if a.rank != b.rank:
    raise ValueError(f"regions of rank {a.rank} and {b.rank} cannot be combined")


def cut_region(shape: Sequence[int], dim: int, n: int, w: int) -> Region:
  """Worker ``w``'s block of a tensor of ``shape`` cut ``n`` ways along ``dim``."""
  if not 0 <= dim < len(shape):
    raise ValueError(f"dim {dim} is out of range for shape {tuple(shape)}")
  ivs = [Interval(0, int(d)) for d in shape]
  ivs[dim] = Interval(*block(int(shape[dim]), n, w))
  return Region(tuple(ivs))


class Pool:
  """One object per distinct interval and box made through it.

  Prices, tiles and pieces are cached under keys that hold boxes; keys built from
  pooled boxes compare by identity (Python's tuple comparison tries ``is`` first)
  instead of interval by interval.  Boxes are given as ``(lo, hi)`` pairs, which
  hash in C.
  """

  __slots__ = ("_intervals", "_regions", "_offsets")

  def __init__(self):
    self._intervals: dict[tuple[int, int], Interval] = {}
    self._regions: dict[tuple, Region] = {}
    self._offsets: dict[tuple[int, int], tuple] = {}

  def interval(self, lo: int, hi: int) -> Interval:
    key = (lo, hi)
    iv = self._intervals.get(key)
    if iv is None:
      iv = self._intervals[key] = Interval(lo, hi)
    return iv

  def region(self, bounds: tuple[tuple[int, int], ...]) -> Region:
    """The box of half-open ``bounds`` per dim."""
    r = self._regions.get(bounds)
    if r is None:
      r = self._regions[bounds] = Region(tuple(self.interval(lo, hi) for lo, hi in bounds))
    return r

  def whole(self, shape: Sequence[int]) -> Region:
    return self.region(tuple((0, int(d)) for d in shape))

  def offset(self, region: Region, origin: Region) -> Region:
    """``region``, given in the coordinates of the box ``origin``, in the coordinates
    ``origin`` is given in: ``[origin.lo + lo, origin.lo + hi)`` per dim."""
    key = (id(region), id(origin))
    got = self._offsets.get(key)
    if got is None:  # the entry holds both boxes, so their ids name them while it lives
      got = self._offsets[key] = (region, origin, self.region(tuple(
          (o.lo + r.lo, o.lo + r.hi) for r, o in zip(region.intervals, origin.intervals))))
    return got[2]
