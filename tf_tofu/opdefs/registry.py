"""The registry of op descriptions, keyed by TensorFlow op type.

Filled at import time by the :func:`describe` decorator in the family modules
(``math_ops``, ``nn_ops``, ``array_ops``) and read-only afterwards.  An op type
with no description has no entry: :func:`lookup` returns None and the op is
left whole (never guessed).
"""

from __future__ import annotations

from typing import Callable, Optional

from tf_tofu.core.regions import Pool
from tf_tofu.opdefs.description import OpContext, Semantics, array_key

DescribeFn = Callable[[OpContext], Semantics]

_REGISTRY: dict[str, DescribeFn] = {}


def describe(*op_types: str) -> Callable[[DescribeFn], DescribeFn]:
  """Registers the decorated function as the description of ``op_types``."""

  def register(fn: DescribeFn) -> DescribeFn:
    for t in op_types:
      if t in _REGISTRY:
        raise ValueError(f"op type {t!r} is described twice ({_REGISTRY[t].__module__}."
                         f"{_REGISTRY[t].__name__} and {fn.__module__}.{fn.__name__})")
      _REGISTRY[t] = fn
    return fn

  return register


def lookup(op_type: str) -> Optional[DescribeFn]:
  """The description of ``op_type``, or None when the op is not described."""
  return _REGISTRY.get(op_type)


def described_op_types() -> tuple[str, ...]:
  return tuple(sorted(_REGISTRY))


def semantics_of(op: OpContext) -> Optional[Semantics]:
  """Applies the registered description to ``op``; None if there is none.

  Raises ``DescriptionError`` when a description exists but cannot be applied
  (a meta input that is not constant, say): callers leave such ops whole too,
  and report why.
  """
  fn = lookup(op.op_type)
  return fn(op) if fn else None


def _freeze(x):
  """A hashable, order-stable form of an attribute or constant value."""
  import numpy as np
  if isinstance(x, np.ndarray):
    return array_key(x)
  if isinstance(x, dict):
    return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
  if isinstance(x, (list, tuple)):
    return tuple(_freeze(v) for v in x)
  return x


def frozen_attrs(op: OpContext) -> tuple:
  """``op``'s attributes in hashable, order-stable form, computed once per context (a
  sub-op that keeps its op's attributes is given them by ``tiling``)."""
  got = op.__dict__.get("_frozen_attrs")
  if got is None:
    got = op.__dict__["_frozen_attrs"] = _freeze(dict(op.attrs))
  return got


def context_key(op: OpContext) -> tuple:
  """What a description depends on: type, attributes, input and output facts.

  Computed once per OpContext and kept on it (contexts are not modified once
  built; the search keys every op's context at every level of every planner).
  """
  key = op.__dict__.get("_context_key")
  if key is None:
    key = _HashedOnce((op.op_type, frozen_attrs(op),
                       tuple((t.shape, t.dtype, t.value_key()) for t in op.inputs),
                       tuple((t.shape, t.dtype) for t in op.outputs)))
    op.__dict__["_context_key"] = key
  return key


class _HashedOnce(tuple):
  """A tuple that computes its (deep) hash once: context keys are parts of the keys of
  every description, price, tile and piece cache."""

  def __hash__(self) -> int:
    h = self.__dict__.get("h")
    if h is None:
      h = self.__dict__["h"] = tuple.__hash__(self)
    return h


class Describer:
  """Applies descriptions with a cache keyed by :func:`context_key`.

  Ops of identical type, attributes and shapes (the repeated blocks of a
  model, the equal shards of a cut) share one Semantics and one analysis.
  The strategies' boxes come from one ``regions.Pool`` (``pool``): equal boxes
  of different ops are one object, so the caches keyed by them compare by
  identity.  ``steps`` and ``sub_ops`` keep what the tiling derives from them
  (``tiling.descend``), and ``tiles`` every device's tile of an op under a
  strategy (``tiling.op_tiles``), which the exact count, the memory estimate and
  the rewrite of a plan all read.  The caches belong to the Describer object,
  never to the module.
  """

  def __init__(self):
    self._cache: dict = {}
    self._strategies: dict = {}
    self.pool = Pool()
    # tiling.descend's steps, keyed by (context key, decision, n, worker), and their
    # sub-ops, one object per context key.
    self.steps: dict = {}
    self.sub_ops: dict = {}
    # tiling.op_tiles, keyed by (context key, strategy, factors).
    self.tiles: dict = {}
    self.hits = 0

  def strategies(self, sem: Semantics, n: int) -> tuple:
    """``analysis.strategies(sem, n)``, computed once per Semantics and n."""
    from tf_tofu.opdefs import analysis
    key = (id(sem), n)
    got = self._strategies.get(key)
    if got is None:
      # Element-wise ops of one structure (a model's Mul, Sub, RealDiv on one shape)
      # share their strategies (analysis.elementwise_key).
      shared = (("elementwise", analysis.elementwise_key(sem), n)
                if self.elementwise(sem) else None)
      every = self._strategies.get(shared) if shared else None
      if every is None:
        every = analysis.strategies(sem, n, self.pool)
        if shared:
          self._strategies[shared] = every
      got = (sem, every)  # keeps sem alive, so its id stays unique
      self._strategies[key] = got
    return got[1]

  def elementwise(self, sem: Semantics) -> bool:
    """``analysis.is_elementwise(sem)`` (cached)."""
    from tf_tofu.opdefs import analysis
    key = (id(sem), "elementwise")
    got = self._strategies.get(key)
    if got is None:
      got = (sem, analysis.is_elementwise(sem))
      self._strategies[key] = got
    return got[1]

  def strategy(self, sem: Semantics, var: str, n: int):
    """The strategy cutting index variable ``var`` n ways, or None (cached; taken from
    :meth:`strategies` when those of ``sem`` and n are known: the search prices every
    strategy of a sub-op before the tiling cuts it by one)."""
    from tf_tofu.opdefs import analysis
    key = (id(sem), var, n)
    got = self._strategies.get(key)
    if got is None:
      every = self._strategies.get((id(sem), n))
      if every is not None:
        got = (sem, next((s for s in every[1] if s.var == var), None))
      else:
        v = next((x for x in analysis.all_vars(sem) if x.name == var), None)
        got = (sem, analysis.strategy_for(sem, v, n, pool=self.pool) if v is not None else None)
      self._strategies[key] = got
    return got[1]

  def adopt(self, sem: Semantics) -> None:
    """Keeps ``sem``, a description of its own context ``sem.op`` made elsewhere
    (ingestion describes every op), as the description of that context's key,
    unless one is kept already: a description is a function of the key."""
    self._cache.setdefault(context_key(sem.op), (sem, None, sem.op.name))

  def __call__(self, op: OpContext):
    """Returns ``(semantics or None, reason or None)`` for ``op``."""
    from tf_tofu.opdefs.description import DescriptionError
    key = context_key(op)
    got = self._cache.get(key)
    if got is not None:
      self.hits += 1
      sem, reason, first = got
      return sem, (reason.replace(repr(first), repr(op.name)) if reason else None)
    fn = lookup(op.op_type)
    if fn is None:
      got = (None, f"no description for {op.op_type}")
    else:
      try:
        got = (fn(op), None)
      except DescriptionError as e:
        got = (None, str(e))
    self._cache[key] = (*got, op.name)
    return got
