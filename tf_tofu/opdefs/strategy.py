"""The partition strategies of an op (docs/method.md section 5).

A tensor at one recursion level is in one state (``tf_tofu.core.states``).

A :class:`Strategy` partitions one index variable of an op n ways and records
what each input must hold and what each output becomes, plus the exact
per-worker regions (halos included) that the cost model prices and the
rewrite slices.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from tf_tofu.opdefs.description import WorkerView
from tf_tofu.core.regions import Region
from tf_tofu.core.states import Cut, Rep, State


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
