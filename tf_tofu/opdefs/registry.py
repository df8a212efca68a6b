"""The registry of op descriptions, keyed by TensorFlow op type.

Filled at import time by the :func:`describe` decorator in the family modules
(``math_ops``, ``nn_ops``, ``array_ops``) and read-only afterwards.  An op type
with no description has no entry: :func:`lookup` returns None and the op is
left whole (never guessed).
"""

from __future__ import annotations

from typing import Callable, Optional

from tf_tofu.opdefs.description import OpContext, Semantics

Describer = Callable[[OpContext], Semantics]

_REGISTRY: dict[str, Describer] = {}


def describe(*op_types: str) -> Callable[[Describer], Describer]:
  """Registers the decorated function as the description of ``op_types``."""

  def register(fn: Describer) -> Describer:
    for t in op_types:
      if t in _REGISTRY:
        raise ValueError(f"op type {t!r} is described twice ({_REGISTRY[t].__module__}."
                         f"{_REGISTRY[t].__name__} and {fn.__module__}.{fn.__name__})")
      _REGISTRY[t] = fn
    return fn

  return register


def lookup(op_type: str) -> Optional[Describer]:
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
