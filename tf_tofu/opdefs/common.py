"""Helpers shared by the op families: index variables for shapes, broadcasting, axes."""

from __future__ import annotations

from typing import Sequence

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.description import OpContext, TensorRef


def index_vars(prefix: str, shape: Sequence[int]) -> tuple[tdl.Var, ...]:
  """One variable per dim: ``prefix0, prefix1, ...`` with the dims' sizes."""
  return tuple(tdl.Var(f"{prefix}{d}", int(s)) for d, s in enumerate(shape))


def broadcast_shape(op: OpContext, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
  """NumPy broadcasting of static shapes; raises naming the op if they do not broadcast."""
  rank = max((len(s) for s in shapes), default=0)
  out = []
  for d in range(rank):
    sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0}
    sizes.discard(1)
    if len(sizes) > 1:
      raise op.fail(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def broadcast_access(x: TensorRef, out_vars: Sequence[tdl.Var]) -> tdl.Access:
  """``x`` read at output coordinates under broadcasting: size-1 dims read index 0."""
  offset = len(out_vars) - x.rank
  idx = []
  for d, size in enumerate(x.shape):
    v = out_vars[offset + d]
    idx.append(0 if size == 1 and v.extent != 1 else v)
  return x[tuple(idx)]


def normalize_axes(op: OpContext, axes, rank: int) -> tuple[int, ...]:
  """Axes as sorted non-negative ints; raises naming the op for one out of range."""
  flat = [int(a) for a in (axes.reshape(-1) if hasattr(axes, "reshape") else
                           (axes if isinstance(axes, (list, tuple)) else [axes]))]
  out = set()
  for a in flat:
    if not -rank <= a < max(rank, 1):
      raise op.fail(f"axis {a} is out of range for rank {rank}")
    out.add(a % rank if rank else 0)
  return tuple(sorted(out))
