"""Conversions as nodes: the pieces of ``tf_tofu.layout.transfers``, plain or collective.

A conversion takes per-device shards (what each device holds or produced) to
per-device boxes (what each device must hold or read).  It is computed with
the same functions the search prices it with (``transfers.gather``,
``transfers.reduce_partials``), and every piece becomes

* a ``Slice`` (or ``Identity`` when the piece is the source's whole shard) on
  the source device: a node of its own per piece and conversion, shared by the
  destinations that need the same piece (TensorFlow sends a tensor once per
  destination device, so each (piece, destination) crosses once, as priced, and
  no other conversion's traffic is merged with it);
* on the destination: a ``ConcatV2`` tree (:mod:`assemble`) of its own slice
  and the copies it receives, or an ``AddN`` of its own slice of a partial sum
  and the addends it receives.

With ``comm="collective"`` a conversion that :mod:`collective` recognises as
an all-gather, all-reduce or reduce-scatter moving the same bytes is emitted
as CollectiveGatherV2 / CollectiveReduceV2 / CollectiveReduceScatterV2; all
collectives of a device are chained by control edges in creation order (a
topological order of the data flow), so every device launches them in the
same order, and each gets its device's ordering token.
"""

from __future__ import annotations

from typing import Optional, Sequence

import tensorflow as tf

from tf_tofu.layout import transfers
from tf_tofu.core.regions import Region
from tf_tofu.ops import comm
from tf_tofu.rewrite import collective
from tf_tofu.rewrite.assemble import Shard, build_box

PLAIN = "plain"
COLLECTIVE = "collective"


def sender_name(stem: str, src: int, region: Region) -> str:
  """The node on device ``src`` that sends ``region`` of conversion ``stem`` (to every device
  that needs it: TensorFlow moves it once per destination device)."""
  box = "_".join(f"{i.lo}-{i.hi}" for i in region.intervals)
  return f"{stem}/from{src}/{box}"


class Converter:
  """Emits conversions into a GraphBuilder for one plan's devices and factors."""

  def __init__(self, builder: comm.GraphBuilder, devices: Sequence[str], factors: Sequence[int],
               comm_mode: str = PLAIN):
    if comm_mode not in (PLAIN, COLLECTIVE):
      raise ValueError(f"comm={comm_mode!r}; choose {PLAIN!r} or {COLLECTIVE!r}")
    self.b = builder
    self.devices = tuple(devices)
    self.factors = tuple(factors)
    self.mode = comm_mode
    self.keys = comm.CollectiveKeys()
    order = comm.rank_order(self.devices)
    self.rank_of = tuple(order.index(d) for d in self.devices)
    self.allow_reduce_scatter = all(
        (tf.DeviceSpec.from_string(d).device_type or "").upper() == "GPU" for d in self.devices)
    self._tokens: dict[int, str] = {}
    self._last_collective: dict[int, str] = {}
    self.collective_nodes: list[str] = []
    self.collective_conversions = 0
    self.plain_conversions = 0

  # ------------------------------------------------------------ local helpers

  def local(self, shard: Shard, box: Region, name: str, dtype: str) -> Shard:
    """``box`` of ``shard`` on the shard's own device (no node when it is the whole shard)."""
    if box == shard.box:
      return shard
    if box.volume == 0:
      return Shard(box, comm.empty(self.b, name, box.shape, dtype, self.devices[shard.device]),
                   shard.device)
    return Shard(box, comm.slice_box(self.b, name, shard.tensor, shard.box, box, dtype,
                                     self.devices[shard.device]), shard.device)

  def send(self, shard: Shard, box: Region, name: str, dtype: str) -> Shard:
    """A node of its own on the shard's device holding ``box``: one piece to send."""
    dev = self.devices[shard.device]
    if box == shard.box:
      return Shard(box, comm.identity(self.b, name, shard.tensor, dtype, dev), shard.device)
    return Shard(box, comm.slice_box(self.b, name, shard.tensor, shard.box, box, dtype, dev),
                 shard.device)

  def empty(self, box: Region, name: str, dtype: str, device: int) -> str:
    return comm.empty(self.b, name, box.shape, dtype, self.devices[device])

  # ------------------------------------------------------------ conversions

  def gather(self, stem: str, dtype: str, have: Sequence[Optional[Shard]],
             need: Sequence[Optional[Region]]) -> list[Optional[str]]:
    """Per device, a tensor holding ``need[d]`` (None where nothing is needed)."""
    boxes = [None if s is None else s.box for s in have]
    pieces = transfers.gather(boxes, list(need), self.factors)
    if self.mode == COLLECTIVE and pieces:
      recipe = collective.match_gather(boxes, need)
      if recipe is not None and recipe.elements == sum(p.elements for p in pieces):
        self.collective_conversions += 1
        return self._emit_gather(stem, dtype, have, need, recipe)
    if pieces:
      self.plain_conversions += 1
    return self._plain_gather(stem, dtype, have, need, pieces)

  def _plain_gather(self, stem, dtype, have, need, pieces) -> list[Optional[str]]:
    out: list[Optional[str]] = [None] * len(need)
    sent: dict[tuple[int, Region], Shard] = {}  # one sender per piece, whatever its destinations
    by_dst: dict[int, list[transfers.Piece]] = {}
    for p in pieces:
      by_dst.setdefault(p.dst, []).append(p)
    for d, n in enumerate(need):
      if n is None:
        continue
      if n.volume == 0:
        out[d] = self.empty(n, f"{stem}/d{d}/empty", dtype, d)
        continue
      own = have[d]
      parts = []
      if own is not None and n.intersect(own.box).volume:
        parts.append(self.local(own, n.intersect(own.box), f"{stem}/d{d}/own", dtype))
      for p in by_dst.get(d, ()):
        key = (p.src, p.region)
        if key not in sent:
          sent[key] = self.send(have[p.src], p.region, sender_name(stem, p.src, p.region), dtype)
        parts.append(sent[key])
      if len(parts) == 1 and parts[0].box == n:
        # One part: the destination's own, or a piece received whole (kept on d, so that
        # the shard lives where the plan says).
        out[d] = parts[0].tensor if parts[0].device == d else comm.identity(
            self.b, f"{stem}/d{d}/recv", parts[0].tensor, dtype, self.devices[d])
      else:
        out[d] = build_box(self.b, f"{stem}/d{d}", n, parts, dtype, self.devices[d])
    return out

  def produce(self, stem: str, dtype: str, produced: Sequence[Optional[Shard]],
              keys: Sequence[Optional[tuple]], stored: Sequence[Region]) -> list[Shard]:
    """Turns an op's outputs (maybe partial sums) into the stored layout, per device."""
    boxes = [None if s is None else s.box for s in produced]
    if not any(k for k in keys if k):
      got = self.gather(f"{stem}/store", dtype, produced, stored)
      return [Shard(s, t, d) for d, (s, t) in enumerate(zip(stored, got))]
    red, inter = transfers.reduce_partials(boxes, list(keys), list(stored), self.factors)
    after = transfers.gather(inter, list(stored), self.factors)
    if self.mode == COLLECTIVE:
      recipe = collective.match_reduce(boxes, keys, stored, self.factors, self.rank_of,
                                       self.allow_reduce_scatter)
      if recipe is not None and recipe.elements == sum(p.elements for p in red + after):
        self.collective_conversions += 1
        return self._emit_reduce(stem, dtype, produced, stored, recipe)
    self.plain_conversions += 1
    summed: list[Optional[Shard]] = [None] * len(produced)
    by_dst: dict[int, list[transfers.Piece]] = {}
    for p in red:
      by_dst.setdefault(p.dst, []).append(p)
    for d, box in enumerate(inter):
      if box is None:
        continue
      mine = self.local(produced[d], box, f"{stem}/reduce/d{d}/own", dtype)
      addends = [self.send(produced[p.src], p.region, f"{stem}/reduce/d{d}/from{p.src}", dtype)
                 for p in by_dst.get(d, ())]
      if addends:
        t = comm.add_n(self.b, f"{stem}/reduce/d{d}/sum",
                       [mine.tensor] + [a.tensor for a in addends], dtype, self.devices[d])
        summed[d] = Shard(box, t, d)
      else:
        summed[d] = mine
    got = self._plain_gather(f"{stem}/store", dtype, summed, stored, after)
    return [Shard(s, t, d) for d, (s, t) in enumerate(zip(stored, got))]

  # ------------------------------------------------------------ collectives

  def _token(self, d: int) -> str:
    if d not in self._tokens:
      self._tokens[d] = comm.ordering_token(self.b, f"tofu_collective/ordering_token_d{d}",
                                            self.devices[d])
    return self._tokens[d]

  def _chain(self, d: int, node: str) -> None:
    self._last_collective[d] = node.split(":")[0]
    self.collective_nodes.append(node.split(":")[0])

  def _after(self, d: int) -> list[str]:
    return [self._last_collective[d]] if d in self._last_collective else []

  def _group(self, members: Sequence[int]) -> tuple[list[int], int]:
    ranked = sorted(members, key=lambda d: self.rank_of[d])
    return ranked, self.keys.group([self.devices[d] for d in ranked])

  def _emit_gather(self, stem, dtype, have, need, recipe) -> list[Optional[str]]:
    out: list[Optional[str]] = [None] * len(need)
    for d, n in enumerate(need):  # local needs first
      if n is None:
        continue
      if n.volume == 0:
        out[d] = self.empty(n, f"{stem}/d{d}/empty", dtype, d)
      elif have[d] is not None and n.intersect(have[d].box) == n:
        out[d] = self.local(have[d], n, f"{stem}/d{d}/own", dtype).tensor
    for gi, g in enumerate(recipe.groups):
      ranked, gkey = self._group(g.members)
      blocks = [have[d].box for d in ranked]
      direct = collective._rank_blocks_along(g.target, blocks) == 0
      shape = blocks[0].shape
      ikey = self.keys.instance(f"gather|{stem}|{g.target}|{[self.devices[d] for d in ranked]}"
                                f"|{dtype}|{shape}")
      for d in ranked:
        dev = self.devices[d]
        name = f"{stem}/allgather{gi}/d{d}"
        x = have[d].tensor if direct else comm.expand_dims(self.b, f"{name}/expand", have[d].tensor,
                                                           0, dtype, dev)
        y = comm.collective_gather(self.b, name, x, dtype, dev, len(ranked), gkey, ikey,
                                   [self._token(d)], self._after(d))
        self._chain(d, y)
        # TF's shape function leaves the gathered dim unknown; pin it for what follows.
        gathered = ((len(ranked) * shape[0],) + shape[1:] if direct
                    else (len(ranked),) + shape)
        y = comm.ensure_shape(self.b, f"{name}/shape", y, gathered, dtype, dev)
        if direct:
          out[d] = y
        else:
          rows = comm.unstack(self.b, f"{name}/unstack", y, len(ranked), dtype, dev)
          parts = [Shard(box, t, d) for box, t in zip(blocks, rows)]
          out[d] = build_box(self.b, f"{name}/assemble", g.target, parts, dtype, dev)
    return out

  def _emit_reduce(self, stem, dtype, produced, stored, recipe) -> list[Shard]:
    out: list[Optional[Shard]] = [None] * len(stored)
    for gi, g in enumerate(recipe.groups):
      ranked, gkey = self._group(g.core)
      kind = "allreduce" if g.scatter is None else "reducescatter"
      ikey = self.keys.instance(f"{kind}|{stem}|{g.box}|{[self.devices[d] for d in ranked]}"
                                f"|{dtype}|{g.box.shape}")
      for d in ranked:
        dev = self.devices[d]
        name = f"{stem}/{kind}{gi}/d{d}"
        x = produced[d].tensor
        if g.scatter is None:
          y = comm.collective_all_reduce(self.b, name, x, dtype, dev, len(ranked), gkey, ikey,
                                         [self._token(d)], self._after(d))
          self._chain(d, y)
          out[d] = Shard(g.box, y, d)
        else:
          perm = [g.scatter] + [i for i in range(g.box.rank) if i != g.scatter]
          inv = [perm.index(i) for i in range(g.box.rank)]
          if g.scatter:
            x = comm.transpose(self.b, f"{name}/to_front", x, perm, dtype, dev)
          y = comm.collective_reduce_scatter(self.b, name, x, dtype, dev, len(ranked), gkey, ikey,
                                             [self._token(d)], self._after(d))
          self._chain(d, y)
          if g.scatter:
            y = comm.transpose(self.b, f"{name}/back", y, inv, dtype, dev)
          out[d] = Shard(stored[d], y, d)
      for dst, src in g.copies:
        piece = self.send(out[src], g.box, f"{stem}/{kind}{gi}/d{dst}/from{src}", dtype)
        out[dst] = Shard(g.box, comm.identity(self.b, f"{stem}/{kind}{gi}/d{dst}/recv",
                                              piece.tensor, dtype, self.devices[dst]), dst)
    for d, s in enumerate(stored):
      if out[d] is None:
        out[d] = Shard(s, self.empty(s, f"{stem}/store/d{d}/empty", dtype, d), d)
    return out
