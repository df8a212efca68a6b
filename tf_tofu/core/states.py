"""The three states of a tensor at one recursion level (docs/method.md section 4).

A tensor at one level, over n workers, is in exactly one state:

* ``Cut(d)`` - split along dim ``d`` into n near-equal blocks (see ``regions.block``);
* ``REP`` - a whole copy on every worker;
* ``PARTIAL`` - every worker holds a full-shape partial value; the value is their sum.

``str(state)`` is the spelling a Plan's JSON uses; :func:`state_from_str`
reads it back.
"""

from __future__ import annotations

import dataclasses
from typing import Union


@dataclasses.dataclass(frozen=True)
class Cut:
  """Split along ``dim`` into n near-equal blocks."""

  dim: int

  def __post_init__(self):
    if not isinstance(self.dim, int) or self.dim < 0:
      raise ValueError(f"Cut needs a dim >= 0, got {self.dim!r}")

  def __str__(self):
    return f"cut({self.dim})"


@dataclasses.dataclass(frozen=True)
class Rep:
  """A whole copy on every worker."""

  def __str__(self):
    return "rep"


@dataclasses.dataclass(frozen=True)
class Partial:
  """Full-shape partial values on every worker; the tensor is their sum."""

  def __str__(self):
    return "partial"


REP = Rep()
PARTIAL = Partial()
State = Union[Cut, Rep, Partial]


def state_from_str(s: str) -> State:
  """Inverse of ``str(state)``: ``"cut(2)"``, ``"rep"``, ``"partial"``."""
  if s == "rep":
    return REP
  if s == "partial":
    return PARTIAL
  if s.startswith("cut(") and s.endswith(")"):
    return Cut(int(s[4:-1]))
  raise ValueError(f"{s!r} is not a state; expected cut(d), rep or partial")
