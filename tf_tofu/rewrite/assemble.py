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
  return _concat_tree(b, name, parts, tree, dtype, device, [0])


def _concat_tree(b: comm.GraphBuilder, name: str, parts: Sequence[Shard], tree: guillotine.Tree,
                 dtype: str, device: str, counter: list) -> str:
  """The concats of guillotine (sub)tree ``tree``, named ``<name>/concat``, ``concat2``, ...
  in the order they are made (``counter``: how many so far).  A function, not a recursive
  closure: a closure that calls itself is a reference cycle, which would keep the builder
  alive until the cyclic collector ran."""
  if isinstance(tree, int):
    return parts[tree].tensor
  dim, subs = tree
  xs = [_concat_tree(b, name, parts, s, dtype, device, counter) for _, s in subs]
  counter[0] += 1
  return comm.concat(b, f"{name}/concat{counter[0] if counter[0] > 1 else ''}", xs, dim,
                     dtype, device)
