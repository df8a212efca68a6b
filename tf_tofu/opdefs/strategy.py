"""States of a tensor and the partition strategies of an op (docs/method.md sections 4-5).

A tensor at one recursion level is in one :data:`State`:

* ``Cut(d)`` - split along dim ``d`` into n near-equal blocks (see ``regions.block``);
* ``REP`` - a whole copy on every worker;
* ``PARTIAL`` - every worker holds a full-shape partial value; the value is their sum.

A :class:`Strategy` partitions one index variable of an op n ways and records
what each input must hold and what each output becomes, plus the exact
per-worker regions (halos included) that the cost model prices and the
rewrite slices.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from tf_tofu.opdefs.description import WorkerView
from tf_tofu.opdefs.regions import Region


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


@dataclasses.dataclass(frozen=True)
class InputNeed:
  """What one input must provide to the workers of a strategy.

  ``state`` is ``Cut(d)`` when every worker needs exactly its canonical block
  along ``d``, ``REP`` when every worker needs the whole tensor, and None for
  any other pattern (halos, shifted or partial ranges): then ``regions`` says
  exactly which box each worker needs.
  """

  state: Optional[Union[Cut, Rep]]
  regions: tuple[Region, ...]


@dataclasses.dataclass(frozen=True)
class Strategy:
  """Partition index variable ``var`` (an ``output`` or ``reduce`` variable) n ways."""

  var: str
  kind: str
  n: int
  inputs: tuple[Optional[InputNeed], ...]  # None for a meta (constant) input
  outputs: tuple[State, ...]
  workers: tuple[WorkerView, ...]

  def __str__(self):
    ins = ", ".join("const" if i is None else (str(i.state) if i.state else "halo")
                    for i in self.inputs)
    outs = ", ".join(map(str, self.outputs))
    return f"{self.kind} {self.var} /{self.n}: ({ins}) -> ({outs})"
