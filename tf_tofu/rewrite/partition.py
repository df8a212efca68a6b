"""Plan + SearchGraph -> a partitioned GraphDef that moves exactly the plan's bytes.

For ``k`` devices (``plan.devices``, levels ``plan.factors``):

* *Tensors.*  Device ``d`` holds ``tiling.held_region(shape, layout, factors,
  d)`` of every tensor.  Feeds (``Placeholder``) become one placeholder per
  device, ``<name>/tofu_shard_<d>``, of the held box (the host feeds slices,
  ``Partitioned.feeds``); constants become one ``Const`` per device holding
  its slice of the value (made only where something reads it).
* *Ops.*  A ``compute`` op becomes one copy per device,
  ``<op>/tofu_d<d>``, from its tile (``tiling.op_tiles``): the attributes of
  the tile's context (the shard hook's overrides), its constant shape inputs
  rebuilt per device from the tile's context, its data inputs the per-device
  tensors holding exactly the tile's input boxes, and a ``Mul`` by the tile's
  output scale where it is not 1.  A ``single`` op runs once, on device 0.
* *Conversions.*  An op's outputs go into the stored layout with exactly the
  pieces of ``transfers.produce_into``; each distinct need of a tensor (the
  same boxes on every device; consumers that agree share it) is met with the
  pieces of ``transfers.gather``.  These are the conversions
  ``search.evaluate`` prices, so with no fetch traffic
  ``ops.count_transfer_bytes(graph_def) == plan.total_bytes``, in both comm
  forms (see :mod:`tf_tofu.rewrite.convert`).
* *Fetches.*  Nothing is assembled on a device: ``Partitioned.fetches`` names,
  for each fetched tensor, one shard per distinct held box, and the host
  concatenates them (``rewrite.execute.assemble_fetches``).  Fetching adds no
  device-to-device bytes, so the byte check needs no correction.
* *Targets.*  A collective must run on every member even where only one
  member's result is fetched, or the others wait forever; a ``NoOp``
  (``tofu/collectives``, on device 0) with a control input from every
  collective is listed in ``Partitioned.targets`` and must run with every
  step (control edges move no bytes).

Every node carries a device; copied attributes lose ``_class``,
``_output_shapes`` and ``_Xla*`` (all ``_``-prefixed attributes), and nothing
is marked for XLA.

Variables (``read``/``update`` ops, ``VarHandleOp`` sources) come with the
ingestion step: a variable will be one ``VarHandleOp`` per device of its held
box, and its reads and updates will run per device on the shards (the read's
value tensor is tied to the variable's layout, so it needs no conversion).
Until then a graph with variables raises NotImplementedError.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
from absl import logging
from tensorflow.core.framework import graph_pb2

from tf_tofu import tiling
from tf_tofu.opdefs.regions import Region
from tf_tofu.opdefs.registry import Describer, context_key
from tf_tofu.ops import comm
from tf_tofu.plans import Plan, PlanError
from tf_tofu.rewrite.assemble import Shard
from tf_tofu.rewrite.convert import PLAIN, Converter
from tf_tofu.search.problem import SearchGraph, SOp

FEED_OPS = frozenset({"Placeholder"})
CONST_OPS = frozenset({"Const"})


@dataclasses.dataclass(frozen=True)
class FeedShard:
  """Device ``device`` reads ``box`` of a feed through placeholder ``placeholder``."""

  device: int
  box: Region
  placeholder: str


@dataclasses.dataclass(frozen=True)
class FetchShard:
  """Tensor ``tensor`` of the partitioned graph holds ``box`` of a fetch, on ``device``."""

  device: int
  box: Region
  tensor: str


@dataclasses.dataclass
class Partitioned:
  """The partitioned GraphDef with its feed and fetch maps."""

  graph_def: graph_pb2.GraphDef
  devices: tuple[str, ...]
  feeds: dict[str, tuple[FeedShard, ...]]    # original feed tensor -> one shard per device
  fetches: dict[str, tuple[FetchShard, ...]]  # original tensor -> one shard per distinct box
  shapes: dict[str, tuple[int, ...]]          # of the feeds and fetches
  dtypes: dict[str, str]
  comm: str
  targets: tuple[str, ...] = ()               # ops every step must run (see module docstring)
  collective_conversions: int = 0
  plain_conversions: int = 0


def tensor_stem(tensor: str) -> str:
  """A node-name prefix for a tensor: ``"a/b:0"`` -> ``"a/b"``, ``"a:2"`` -> ``"a/tofu_out2"``."""
  node, _, idx = tensor.partition(":")
  return node if idx in ("", "0") else f"{node}/tofu_out{idx}"


def _check_supported(graph: SearchGraph) -> None:
  for op in graph.ops:
    if op.kind in ("read", "update") or (op.kind == "source" and op.op_type not in
                                         FEED_OPS | CONST_OPS):
      raise NotImplementedError(
          f"op {op.name!r} ({op.op_type}): variables and {op.op_type} sources are rewritten "
          "with the ingestion step (sharded VarHandleOps, per-device reads and updates); "
          "this graph cannot be partitioned yet")
  if graph.variables:
    raise NotImplementedError(f"graph has variables {sorted(graph.variables.values())[:3]}; "
                              "sharded variables are not rewritten yet")


def _topological(graph: SearchGraph) -> list[SOp]:
  """Compute and single ops, producers first (ties keep the graph's order)."""
  work = [op for op in graph.ops if op.kind in ("compute", "single")]
  producer = {t: op.name for op in work for t in op.outputs}
  by_name = {op.name: op for op in work}
  done: set[str] = set()
  active: set[str] = set()
  order: list[SOp] = []
  for root in work:
    stack = [(root, False)]
    while stack:
      op, expanded = stack.pop()
      if expanded:
        active.discard(op.name)
        done.add(op.name)
        order.append(op)
        continue
      if op.name in done:
        continue
      if op.name in active:
        raise ValueError(f"the graph has a cycle through op {op.name!r}")
      active.add(op.name)
      stack.append((op, True))
      for t in reversed([t for t in op.inputs if t]):
        p = producer.get(t)
        if p is not None and p not in done:
          if p in active:
            raise ValueError(f"the graph has a cycle through op {p!r}")
          stack.append((by_name[p], False))
  return order


class _Partitioner:

  def __init__(self, graph: SearchGraph, plan: Plan, describer: Describer, comm_mode: str):
    self.g = graph
    self.plan = plan
    self.describer = describer
    self.factors = tuple(plan.factors)
    self.k = tiling.num_devices(self.factors)
    self.devices = tuple(plan.devices)
    self.b = comm.GraphBuilder()
    self.conv = Converter(self.b, self.devices, self.factors, comm_mode)
    self.held = {t: tiling.held_regions(s.shape, plan.layouts[t], self.factors)
                 for t, s in graph.tensors.items()}
    self.shards: dict[str, list[Shard]] = {}
    self.sources = {t: op for op in graph.ops if op.kind == "source" for t in op.outputs}
    self.needs: dict[str, dict[tuple, list[Optional[str]]]] = {}
    self.feeds: dict[str, tuple[FeedShard, ...]] = {}
    self._tiles: dict = {}

  def dtype(self, t: str) -> str:
    return self.g.tensors[t].dtype

  # ---------------------------------------------------------------- sources

  def _feed(self, op: SOp) -> None:
    t = op.outputs[0]
    shards, feeds = [], []
    for d in range(self.k):
      box = self.held[t][d]
      name = comm.placeholder(self.b, f"{op.name}/tofu_shard_{d}", self.dtype(t), box.shape,
                              self.devices[d])
      shards.append(Shard(box, name, d))
      feeds.append(FeedShard(d, box, name))
    self.shards[t] = shards
    self.feeds[t] = tuple(feeds)

  def _const(self, op: SOp) -> None:
    t = op.outputs[0]
    value = op.context.attrs.get("value")
    if value is None:
      raise ValueError(f"op {op.name!r} (Const) has no value attribute")
    value = np.asarray(value).reshape(self.g.tensors[t].shape)
    self.shards[t] = [
        Shard(box, comm.const(self.b, f"{op.name}/tofu_d{d}", value[box.slices()], self.dtype(t),
                              self.devices[d]), d)
        for d, box in enumerate(self.held[t])]

  def shards_of(self, t: str) -> list[Shard]:
    if t not in self.shards:
      src = self.sources.get(t)
      if src is None:
        raise ValueError(f"tensor {t!r} is read before any op produces it")
      self._const(src)
    return self.shards[t]

  # ---------------------------------------------------------------- ops

  def _input(self, t: str, need: tuple) -> list[Optional[str]]:
    by_need = self.needs.setdefault(t, {})
    if need not in by_need:
      stem = f"{tensor_stem(t)}/tofu_need{len(by_need)}"
      by_need[need] = self.conv.gather(stem, self.dtype(t), self.shards_of(t), list(need))
    return by_need[need]

  def _op(self, op: SOp) -> None:
    strategy = self.plan.strategies.get(op.name)
    if strategy is None:
      raise PlanError(f"the plan has no strategy for op {op.name!r}")
    # Identical ops (repeated blocks) share their tiles, as in search.evaluate.
    key = (context_key(op.context), tuple(strategy))
    if key not in self._tiles:
      self._tiles[key] = tiling.op_tiles(op.context, strategy, self.factors, self.describer)
    tiles = self._tiles[key]
    wired: list[list[Optional[str]]] = []
    for i, t in enumerate(op.inputs):
      need = tuple(tile.inputs[i] if tile else None for tile in tiles)
      if all(r is None for r in need):
        wired.append([None] * self.k)  # a constant shape input, rebuilt per device below
      elif t is None:
        raise ValueError(f"op {op.name!r}: data input {i} is not connected")
      else:
        wired.append(self._input(t, need))
    produced: list[list[Optional[Shard]]] = [[None] * self.k for _ in op.outputs]
    for d, tile in enumerate(tiles):
      if tile is None:
        continue
      dev = self.devices[d]
      node = f"{op.name}/tofu_d{d}"
      inputs = []
      for i, info in enumerate(tile.context.inputs):
        if tile.inputs[i] is None:
          if info.value is None:
            raise ValueError(f"op {op.name!r}: input {i} is a shape input without a value")
          inputs.append(comm.const(self.b, f"{node}/in{i}", info.value, info.dtype, dev))
        else:
          inputs.append(wired[i][d])
      name = self.b.add(tile.context.op_type, node, inputs, dev, tile.context.attrs)
      for o, t in enumerate(op.outputs):
        out = comm.tensor_ref(name, o)
        if tile.output_scale[o] != 1.0:
          out = comm.scale(self.b, f"{node}/scale{o}", out, tile.output_scale[o], self.dtype(t),
                           dev)
        produced[o][d] = Shard(tile.outputs[o], out, d)
    for o, t in enumerate(op.outputs):
      keys = [tile.partial_key[o] if tile else None for tile in tiles]
      self.shards[t] = self.conv.produce(tensor_stem(t) + "/tofu", self.dtype(t), produced[o],
                                         keys, list(self.held[t]))

  # ---------------------------------------------------------------- all

  def run(self, fetches: Optional[Sequence[str]]) -> Partitioned:
    for op in self.g.ops:
      if op.kind == "source" and op.op_type in FEED_OPS:
        self._feed(op)
    order = _topological(self.g)
    for i, op in enumerate(order):
      self._op(op)
      if (i + 1) % 1000 == 0:
        logging.info("rewrite: %d of %d ops", i + 1, len(order))
    if fetches is None:
      read = {t for op in self.g.ops for t in op.inputs if t}
      fetches = [t for op in self.g.ops if op.kind in ("compute", "single", "source")
                 for t in op.outputs if t not in read and self.g.tensors[t].itemsize > 0]
    fetch_map = {}
    for t in fetches:
      if t not in self.g.tensors:
        raise ValueError(f"fetch {t!r} is not a tensor of the graph")
      shards = self.shards_of(t)
      seen: dict[Region, FetchShard] = {}
      for s in shards:
        if s.box.volume and s.box not in seen:
          seen[s.box] = FetchShard(s.device, s.box, s.tensor)
      if not seen:  # an empty tensor: any shard will do
        seen[shards[0].box] = FetchShard(0, shards[0].box, shards[0].tensor)
      fetch_map[t] = tuple(seen.values())
    names = set(self.feeds) | set(fetch_map)
    targets = ()
    if self.conv.collective_nodes:
      targets = (self.b.add("NoOp", "tofu/collectives", [], self.devices[0],
                            control=self.conv.collective_nodes),)
    return Partitioned(
        graph_def=self.b.graph_def(), devices=self.devices, feeds=self.feeds, fetches=fetch_map,
        shapes={t: self.g.tensors[t].shape for t in names},
        dtypes={t: self.g.tensors[t].dtype for t in names}, comm=self.conv.mode, targets=targets,
        collective_conversions=self.conv.collective_conversions,
        plain_conversions=self.conv.plain_conversions)


def partition_graph_def(graph: SearchGraph, plan: Plan, describer: Describer,
                        comm: str = PLAIN, fetches: Optional[Sequence[str]] = None) -> Partitioned:
  """The partitioned GraphDef of ``graph`` under ``plan``; see the module docstring.

  Args:
    graph: the search's view of the graph the plan was made for.
    plan: the plan (its devices name where every node goes).
    describer: the op describer the plan was priced with (tiles are re-derived).
    comm: ``"plain"`` (slices, concat, AddN; Send/Recv) or ``"collective"``
      (CollectiveGatherV2 / CollectiveReduceV2 where a conversion is one,
      plain pieces elsewhere).
    fetches: tensors whose shards to name in ``Partitioned.fetches``; default
      the tensors no op reads.

  Returns:
    A :class:`Partitioned`.  ``tf_tofu.ops.count_transfer_bytes`` of its
    GraphDef equals ``plan.total_bytes``.
  """
  plan.check_matches(graph)
  if tiling.num_devices(plan.factors) != len(plan.devices):
    raise PlanError(f"the plan's levels {list(plan.factors)} make "
                    f"{tiling.num_devices(plan.factors)} devices, it names {len(plan.devices)}")
  _check_supported(graph)
  return _Partitioner(graph, plan, describer, comm).run(fetches)
