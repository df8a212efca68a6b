"""A box from sub-boxes on one device: one ConcatV2 per node of the guillotine tree
(``tf_tofu.layout.guillotine``) of the parts (the device's own slice and the
pieces it receives)."""

from __future__ import annotations

import dataclasses
import itertools
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
  made = itertools.count(1)

  def concat(dim: int, xs: list, _) -> str:  # named <name>/concat, concat2, ... as made
    c = next(made)
    return comm.concat(b, f"{name}/concat{c if c > 1 else ''}", xs, dim, dtype, device)

  return guillotine.fold(tree, target, lambda i: parts[i].tensor, concat)
