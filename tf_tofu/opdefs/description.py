"""What a description receives (an :class:`OpContext`) and returns (:class:`Semantics`).

A description is a Python function of one op's attributes and static input
shapes that returns the op's TDL lambda::

    @describe("MatMul")
    def matmul(op: OpContext) -> Semantics:
      a, b = op.input(0), op.input(1)
      ...
      return Semantics(op, [Output((i, j), Sum(k, a[i, k] * b[k, j]))])

Inputs come in three kinds:

* *data* inputs, read through accesses (``op.input(i)[...]``); the analysis
  derives which region of them each worker needs;
* *replicated* inputs (``op.replicated(i)``), needed whole by every worker
  whatever the strategy (a small table, an unused reserve buffer);
* *meta* inputs (``op.const(i)``): shape-carrying constants such as Reshape's
  shape or a reduction's axes.  They must be known statically, and the
  description's ``shard`` hook recomputes them for each worker's sub-op.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from tf_tofu.core.errors import TofuError
from tf_tofu.opdefs import tdl
from tf_tofu.core.regions import Region


class DescriptionError(TofuError):
  """A description cannot be applied to this op (non-constant meta input, bad attrs)."""


@dataclasses.dataclass(frozen=True)
class TensorInfo:
  """Static facts about one input or output tensor of an op."""

  shape: tuple[int, ...]
  dtype: str
  value: Optional[np.ndarray] = None  # known when the tensor is a constant

  def __post_init__(self):
    if any(d is None or d < 0 for d in self.shape):
      raise DescriptionError(f"tensor has unknown dims {self.shape}")
    object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

  def value_key(self):
    """A hashable stand-in for ``value`` (None without one): :func:`array_key`,
    computed once per TensorInfo (a folded constant can be tens of MB, and
    every description lookup keys on it)."""
    try:
      return self.__dict__["_value_key"]
    except KeyError:
      key = None if self.value is None else array_key(self.value)
      object.__setattr__(self, "_value_key", key)
      return key

  def block(self, region: Region) -> "TensorInfo":
    """The facts of ``region`` of this tensor (its value sliced, if known).  A
    large value's key is derived from this one's and the region, not hashed
    again: equal keys still mean equal values."""
    if self.value is None:
      return TensorInfo(region.shape, self.dtype)
    out = TensorInfo(region.shape, self.dtype, np.asarray(self.value)[region.slices()])
    if out.value.nbytes > DIGEST_ABOVE:
      object.__setattr__(out, "_value_key", ("block", self.value_key(),
                                             tuple((i.lo, i.hi) for i in region.intervals)))
    return out


# Arrays above this many bytes are keyed by a digest of their bytes, not the bytes.
DIGEST_ABOVE = 1024


def array_key(a: np.ndarray) -> tuple:
  """A hashable key equal for two arrays exactly when their dtype, shape and
  elements are equal: the bytes themselves up to ``DIGEST_ABOVE`` bytes, a
  128-bit BLAKE2b digest of them beyond (so that looking a key up never
  compares megabytes; a collision is as likely as a random 128-bit match)."""
  if a.nbytes <= DIGEST_ABOVE:
    return ("nd", a.dtype.str, a.shape, a.tobytes())
  digest = hashlib.blake2b(np.ascontiguousarray(a).data, digest_size=16).digest()
  return ("nd-blake2b", a.dtype.str, a.shape, digest)


class TensorRef:
  """A data input inside a description: ``ref[i, k]`` builds an access."""

  def __init__(self, ctx: "OpContext", index: int):
    self._ctx = ctx
    self.index = index
    self.info = ctx.inputs[index]
    self.name = f"in{index}"

  @property
  def shape(self) -> tuple[int, ...]:
    return self.info.shape

  @property
  def rank(self) -> int:
    return len(self.info.shape)

  def __getitem__(self, items) -> tdl.Access:
    items = items if isinstance(items, tuple) else (items,)
    return tdl.Access(self.index, self.name, self.shape, tdl.index_items(items))

  def at(self, *items, pad: float = 0.0) -> tdl.Access:
    """A guarded access: indices outside the tensor read ``pad``."""
    return tdl.Access(self.index, self.name, self.shape, tdl.index_items(items),
                      guarded=True, pad=pad)


@dataclasses.dataclass
class OpContext:
  """One op as a description sees it: type, attributes, static inputs and outputs."""

  name: str
  op_type: str
  attrs: Mapping[str, Any]
  inputs: Sequence[TensorInfo]
  outputs: Sequence[TensorInfo] = ()
  _meta: set = dataclasses.field(default_factory=set)
  _replicated: set = dataclasses.field(default_factory=set)

  def attr(self, key: str, default: Any = None) -> Any:
    return self.attrs.get(key, default)

  def input(self, i: int) -> TensorRef:
    self._check_index(i)
    return TensorRef(self, i)

  def replicated(self, i: int) -> TensorRef:
    """Declares input ``i`` needed whole by every worker."""
    self._check_index(i)
    self._replicated.add(i)
    return TensorRef(self, i)

  def const(self, i: int) -> np.ndarray:
    """The static value of meta input ``i``; raises if it is not a constant."""
    self._check_index(i)
    value = self.inputs[i].value
    if value is None:
      raise DescriptionError(
          f"op {self.name!r} ({self.op_type}): input {i} must be a constant to describe "
          "the op (fold shapes with Grappler's constfold, or give a static shape)")
    self._meta.add(i)
    return np.asarray(value)

  def fail(self, why: str) -> DescriptionError:
    return DescriptionError(f"op {self.name!r} ({self.op_type}): {why}")

  def _check_index(self, i: int) -> None:
    if not 0 <= i < len(self.inputs):
      raise DescriptionError(f"op {self.name!r} ({self.op_type}) has no input {i}; it has "
                             f"{len(self.inputs)}")


@dataclasses.dataclass(frozen=True)
class WorkerView:
  """What one worker of a strategy computes, as a shard hook sees it.

  ``input_regions[i]`` is the clamped box of input ``i`` the worker reads
  (None for a meta input); ``input_padding[i][d] = (lo, hi)`` is how far the
  unclamped access range reaches below 0 and above the size on dim ``d``
  (what an EXPLICIT padding must supply).  ``var_block`` is the worker's
  range of the cut variable, of ``var_extent`` in all.
  """

  w: int
  n: int
  var: Optional[str]
  var_block: tuple[int, int]
  var_extent: int
  input_regions: tuple[Optional[Region], ...]
  input_padding: tuple[Optional[tuple[tuple[int, int], ...]], ...]
  output_regions: tuple[Region, ...]

  @property
  def output_shapes(self) -> tuple[tuple[int, ...], ...]:
    return tuple(r.shape for r in self.output_regions)


@dataclasses.dataclass(frozen=True)
class ShardSpec:
  """How a worker's sub-op differs from the original op.

  ``attrs`` override attributes, ``meta_inputs`` replace shape-carrying
  constant inputs, and ``output_scale[o]`` (if given) multiplies output ``o``
  of the sub-op, e.g. ``block / total`` for a Mean whose reduction is cut.
  """

  attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  meta_inputs: Mapping[int, np.ndarray] = dataclasses.field(default_factory=dict)
  output_scale: Optional[tuple[float, ...]] = None


ShardHook = Callable[[WorkerView], ShardSpec]


@dataclasses.dataclass(frozen=True, eq=False)
class Semantics:
  """A described op: its output lambdas and how to build a worker's sub-op."""

  op: OpContext
  outputs: tuple[tdl.Output, ...]
  shard: Optional[ShardHook] = None
  # Outputs whose values the kernel leaves unspecified (uninitialised reserve
  # spaces): they keep their shapes and states, but no value is compared.
  undefined_outputs: frozenset = frozenset()

  def __post_init__(self):
    object.__setattr__(self, "outputs", tuple(self.outputs))
    self._check()

  @property
  def meta_inputs(self) -> frozenset:
    return frozenset(self.op._meta)

  @property
  def replicated_inputs(self) -> frozenset:
    return frozenset(self.op._replicated)

  @property
  def accessed_inputs(self) -> frozenset:
    return frozenset(a.input for o in self.outputs for a in tdl.accesses(o.body))

  def for_context(self, op: "OpContext") -> "Semantics":
    """These lambdas and shard hook for ``op``, an op of the same context key
    (``registry.context_key``: type, attributes, input and output facts; a
    description reads nothing else), with ``op`` given the inputs this description
    made constant or replicated."""
    op._meta.update(self.op._meta)
    op._replicated.update(self.op._replicated)
    return dataclasses.replace(self, op=op)

  def shard_spec(self, worker: WorkerView) -> ShardSpec:
    return self.shard(worker) if self.shard else ShardSpec()

  def _check(self) -> None:
    op = self.op
    if op.outputs and len(op.outputs) != len(self.outputs):
      raise op.fail(f"description gives {len(self.outputs)} outputs, the op has "
                    f"{len(op.outputs)}")
    for k, out in enumerate(self.outputs):
      if op.outputs and tuple(op.outputs[k].shape) != out.shape:
        raise op.fail(f"description gives output {k} shape {out.shape}, the op's is "
                      f"{tuple(op.outputs[k].shape)}")
      names = [v.name for v in out.output_vars()]
      if len(set(names)) != len(names):
        raise op.fail(f"output {k} uses an index variable twice: {names}")
      free = _free_vars(out.body)
      stray = free - set(out.output_vars())
      if stray:
        raise op.fail(f"output {k} reads index variables {sorted(v.name for v in stray)} "
                      "that neither index the output nor are reduced")
    described = self.accessed_inputs | self.meta_inputs | self.replicated_inputs
    missing = sorted(set(range(len(op.inputs))) - described)
    if missing:
      raise op.fail(f"inputs {missing} are neither accessed, replicated nor constant")


def _free_vars(v: tdl.Value) -> set:
  """Variables a value depends on that no enclosing reducer binds."""
  if isinstance(v, tdl.Access):
    return set(v.vars())
  if isinstance(v, tdl.Reduce):
    return _free_vars(v.body) - set(v.vars)
  out = set()
  for c in v.children():
    out |= _free_vars(c)
  if isinstance(v, tdl.Opaque):
    out |= set(v.over)
  return out
