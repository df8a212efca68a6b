"""Representative attribute/shape cases for checking each description against its kernel.

A case names an op type, its inputs in the op's argument order (a list
stands for a list-valued argument such as ConcatV2's ``values``) and its
non-inferred attributes.  ``Rand`` inputs are random data; ``Fixed`` inputs
are constants (shape-carrying inputs, index tensors).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np


@dataclasses.dataclass(frozen=True)
class Rand:
  """A random input: normal floats, or uniform in ``[lo, hi)`` when bounds are given."""

  shape: tuple[int, ...]
  dtype: str = "float32"
  lo: Optional[float] = None
  hi: Optional[float] = None

  def make(self, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(self.dtype)
    if dt == np.bool_:
      return rng.random(self.shape) < 0.5
    if np.issubdtype(dt, np.integer):
      lo = 0 if self.lo is None else int(self.lo)
      hi = 10 if self.hi is None else int(self.hi)
      return rng.integers(lo, hi, size=self.shape).astype(dt)
    if self.lo is None:
      return rng.standard_normal(self.shape).astype(dt)
    return rng.uniform(self.lo, self.hi, size=self.shape).astype(dt)


@dataclasses.dataclass(frozen=True)
class Fixed:
  """A constant input (its value is static to the description)."""

  value: Any
  dtype: Optional[str] = None

  def make(self, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(self.value, dtype=self.dtype)


InputSpec = Union[Rand, Fixed]


@dataclasses.dataclass(frozen=True)
class Case:
  op_type: str
  inputs: Sequence[Union[InputSpec, Sequence[InputSpec]]]
  attrs: dict = dataclasses.field(default_factory=dict)
  label: str = ""

  def flat_inputs(self) -> list[InputSpec]:
    out = []
    for x in self.inputs:
      out.extend(x if isinstance(x, (list, tuple)) else [x])
    return out

  def __str__(self):
    shapes = []
    for x in self.flat_inputs():
      shapes.append(str(list(x.shape)) if isinstance(x, Rand) else f"const{list(np.shape(x.value))}")
    extra = ", ".join(f"{k}={v}" for k, v in sorted(self.attrs.items()))
    s = f"{self.op_type}({', '.join(shapes)}{', ' + extra if extra else ''})"
    return f"{s} [{self.label}]" if self.label else s


def all_cases() -> list[Case]:
  """Every case of every op family, in a fixed order."""
  from tf_tofu.opdefs.cases import array_cases, math_cases, nn_cases, random_cases, volume_cases
  return [*math_cases.CASES, *nn_cases.CASES, *array_cases.CASES, *random_cases.CASES,
          *volume_cases.CASES]
