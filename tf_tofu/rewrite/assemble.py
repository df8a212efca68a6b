"""A box from sub-boxes on one device: one ConcatV2 per node of the guillotine tree
(``tf_tofu.layout.guillotine``) of the parts (the device's own slice and the
pieces it receives)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from tf_tofu.core.regions import Region
from tf_tofu.layout import guillotine
from tf_tofu.ops import comm


@dataclasses.dataclass(frozen=True)
class Shard:
  """``tensor`` (a name in the partitioned graph) holds ``box`` of a tensor, on ``device``."""

  box: Region
  tensor: str
  device: int


def build_box(b: comm.GraphBuilder, name: str, target: Region, parts: Sequence[Shard],
              dtype: str, device: str) -> str:
  """The tensor holding ``target``, concatenated on ``device`` from ``parts``."""
  parts = [p for p in parts if p.box.volume > 0]
  if not parts:
    raise ValueError(f"{name}: no parts to assemble {target} from")
  tree = guillotine.tree(target, [p.box for p in parts])
  counter = [0]

  def emit(t: guillotine.Tree) -> str:
    if isinstance(t, int):
      return parts[t].tensor
    dim, subs = t
    xs = [emit(s) for _, s in subs]
    counter[0] += 1
    return comm.concat(b, f"{name}/concat{counter[0] if counter[0] > 1 else ''}", xs, dim,
                       dtype, device)

  return emit(tree)
