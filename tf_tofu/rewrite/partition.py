"""Plan + SearchGraph -> a partitioned GraphDef that moves exactly the plan's bytes.

For ``k`` devices (``plan.devices``, levels ``plan.factors``):

* *Tensors.*  Device ``d`` holds ``tiling.held_region(shape, layout, factors,
  d)`` of every tensor.  Feeds (``Placeholder``) become one placeholder per
  device, ``<name>/tofu_shard_<d>``, of the held box (the host feeds slices,
  ``Partitioned.feeds``); constants become one ``Const`` per device holding
  its slice of the value (made only where something reads it; equal slices
  on one device share one node, ``tofu/const_<i>``).
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
* *Variables.*  A variable (its handle: a resource ``Placeholder`` or a
  ``VarHandleOp``) becomes one resource placeholder per device,
  ``<handle>/tofu_shard_<d>``, for a variable of the held box's shape
  (``_handle_shapes``); ``Partitioned.variables`` says which box of which
  variable each one is, and the runner binds it to a shard variable on that
  device.  Optimizer slots are variables like any other.  A read becomes one
  ``ReadVariableOp`` per device on its shard (its value is tied to the
  variable's layout, so it holds the same box); an update becomes one update
  per device on the shards, its slots element-wise with the variable
  (``problem.update_slots``) taken from the same boxes, its other inputs
  gathered whole.  ``ResourceScatter{Add,Sub}`` on a shard of rows
  ``[lo, hi)`` shifts the indices by ``-lo`` and clips them into the shard,
  with the rows of other shards replaced by zeros (``SelectV2``), and slices
  the updates to the shard's other dims.  An op that reads a variable through
  its handle (``ResourceGather``, described as ``GatherV2`` on the value)
  reads the value shards.
* *Order.*  The original graph's control edges are kept per device (an
  update waits for the reads of the same shard on its device), and on every
  device the copies of the ops follow one topological order of the original
  graph (data and control edges) through a chain of control edges, so a
  device's schedule is the original op order and buffers can be freed as
  they die (``tf_tofu.rewrite.memory`` estimates the peak on that schedule).
* *Scalars once.*  An op whose outputs are all scalars, that is stateless
  and runs replicated on every device (nothing to produce or reduce), shares
  the nodes of an earlier identical op (same attributes, same per-device
  inputs); so do the reads of a scalar variable after the same control
  inputs (a write between two reads would be a control input of the later).
  A Keras optimizer reads its step counter and recomputes the bias
  correction for every variable it updates; shared, they run once per device.
  Such an op adds no edges of its own (it is pure; what waits for it waits for
  the op it shares) and moves no bytes, so the count still equals the plan.
* *Fetches.*  Nothing is assembled on a device: ``Partitioned.fetches`` names,
  for each fetched tensor, one shard per distinct held box, and the host
  concatenates them (``rewrite.execute.assemble_fetches``).  Fetching adds no
  device-to-device bytes, so the byte check needs no correction.
* *Targets.*  A ``NoOp`` ``tofu/step`` (on device 0) has a control input
  from every update, every copy of the graph's control outputs and every
  collective (a collective must run on every member even where only one
  member's result is fetched, or the others wait forever); it is
  ``Partitioned.targets`` and runs with every step (control edges move no
  bytes).

Every node carries a device; copied attributes lose ``_class``,
``_output_shapes`` and ``_Xla*`` (all ``_``-prefixed attributes), and nothing
is marked for XLA.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
from tensorflow.core.framework import graph_pb2
from tensorflow.python.framework import op_def_registry

from tf_tofu.core import progress
from tf_tofu.layout import tiling
from tf_tofu.core.regions import Interval, Region
from tf_tofu.opdefs.registry import Describer, context_key
from tf_tofu.ops import comm
from tf_tofu.core.plan import Plan, PlanError
from tf_tofu.rewrite.assemble import Shard
from tf_tofu.rewrite.convert import PLAIN, Converter
from tf_tofu.rewrite import padding
from tf_tofu.graph.view import SearchGraph, SOp, update_slots
from tf_tofu.graph.vocabulary import SCATTER_OPS

# Of the vocabulary's sources, those the rewrite rebuilds per device.
REWRITABLE_FEEDS = frozenset({"Placeholder"})
CONST_OPS = frozenset({"Const"})
VARIABLE_SOURCES = frozenset({"Placeholder", "VarHandleOp"})
STEP_TARGET = "tofu/step"
# Left out of the per-device op chain: Grappler's arithmetic optimizer drops the inputs
# of a Pow it rewrites when the Pow has control inputs (the graph then runs unoptimized).
UNCHAINED_OPS = frozenset({"Pow"})


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


@dataclasses.dataclass(frozen=True)
class VariableShards:
  """A variable as the partitioned graph holds it: one shard per device.

  ``shards[d]`` is a :class:`FeedShard` whose ``placeholder`` is the resource
  placeholder of device ``d``'s shard (replicated boxes repeat).
  """

  name: str
  shape: tuple[int, ...]
  dtype: str
  shards: tuple[FeedShard, ...]

  def distinct(self) -> tuple[FeedShard, ...]:
    """One shard per distinct non-empty box (what assembling the whole value needs)."""
    seen: dict[Region, FeedShard] = {}
    for s in self.shards:
      if s.box.volume and s.box not in seen:
        seen[s.box] = s
    return tuple(seen.values())


@dataclasses.dataclass
class Partitioned:
  """The partitioned GraphDef with its feed, fetch and variable maps."""

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
  variables: dict[str, VariableShards] = dataclasses.field(default_factory=dict)  # by handle


def tensor_stem(tensor: str) -> str:
  """A node-name prefix for a tensor: ``"a/b:0"`` -> ``"a/b"``, ``"a:2"`` -> ``"a/tofu_out2"``."""
  node, _, idx = tensor.partition(":")
  return node if idx in ("", "0") else f"{node}/tofu_out{idx}"


def _check_supported(graph: SearchGraph) -> None:
  for op in graph.ops:
    if op.kind == "source":
      variable = any(t in graph.variables for t in op.outputs)
      if not (op.op_type in CONST_OPS or (op.op_type in VARIABLE_SOURCES and variable)
              or (op.op_type in REWRITABLE_FEEDS and not variable)):
        raise NotImplementedError(
            f"op {op.name!r} ({op.op_type}): only Placeholder feeds, Const and variable handles "
            "can be sources of a partitioned graph; feed this tensor as a Placeholder instead")
    elif op.kind in ("read", "update") and op.inputs[0] not in graph.variables:
      raise NotImplementedError(
          f"op {op.name!r} ({op.op_type}) acts on {op.inputs[0]!r}, which is not a variable of "
          "known shape; only tf.Variable resources can be sharded")


def _work(graph: SearchGraph) -> list[SOp]:
  return [op for op in graph.ops if op.kind in ("compute", "single", "read", "update")]


def control_sources(graph: SearchGraph) -> dict[str, tuple[str, ...]]:
  """Per op, the ops (that emit nodes) it must follow: its control inputs, seen through
  ignored ops (a ``NoOp``'s own control inputs stand for it)."""
  by_name = {op.name: op for op in graph.ops}
  memo: dict[str, tuple[str, ...]] = {}
  result = {}
  for op in _work(graph):
    out: list[str] = []
    for c in op.control_inputs:
      out.extend(x for x in _resolve(by_name, memo, c, frozenset()) if x not in out)
    result[op.name] = tuple(out)
  result.update({name: _resolve(by_name, memo, name, frozenset())
                 for name in graph.control_outputs if name not in result})
  return result


def _resolve(by_name: dict, memo: dict, name: str, seen: frozenset) -> tuple[str, ...]:
  """The ops that emit nodes standing for control input ``name`` (``memo``: an ignored
  op's, once).  A function, not a recursive closure, which would be a reference cycle."""
  op = by_name.get(name)
  if op is None or op.kind == "source" or name in seen:
    return ()
  if op.kind != "ignored":
    return (name,)
  if name not in memo:
    out: list[str] = []
    for c in op.control_inputs:
      out.extend(x for x in _resolve(by_name, memo, c, seen | {name}) if x not in out)
    memo[name] = tuple(out)
  return memo[name]


def _topological(graph: SearchGraph, controls: dict[str, tuple[str, ...]]) -> list[SOp]:
  """The ops that emit nodes, each after its producers and control inputs (ties keep the
  graph's order)."""
  work = _work(graph)
  producer = {t: op.name for op in work for t in op.outputs}
  by_name = {op.name: op for op in work}
  done: set[str] = set()
  active: set[str] = set()
  order: list[SOp] = []

  def deps(op: SOp) -> list[str]:
    data = [producer[t] for t in op.inputs if t and t in producer]
    return data + [c for c in controls.get(op.name, ()) if c in by_name]

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
      for p in reversed(deps(op)):
        if p not in done:
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
    self.variables: dict[str, VariableShards] = {}
    self.nodes_of: dict[str, list[Optional[str]]] = {}  # op -> its node on each device
    self._controls: dict[str, tuple[str, ...]] = {}
    self._scalar_ops: dict[tuple, SOp] = {}  # identical scalar computations: the first
    self._shared: set[str] = set()           # ops that share an earlier op's nodes

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

  def _variable(self, op: SOp) -> None:
    h = op.outputs[0]
    shards = tuple(
        FeedShard(d, box, comm.resource_placeholder(self.b, f"{op.name}/tofu_shard_{d}",
                                                    self.dtype(h), box.shape, self.devices[d]))
        for d, box in enumerate(self.held[h]))
    self.variables[h] = VariableShards(self.g.variables[h], self.g.tensors[h].shape,
                                       self.dtype(h), shards)

  def _const(self, op: SOp) -> None:
    t = op.outputs[0]
    value = op.context.attrs.get("value")
    if value is None:
      raise ValueError(f"op {op.name!r} (Const) has no value attribute")
    value = np.asarray(value).reshape(self.g.tensors[t].shape)
    self.shards[t] = [
        Shard(box, comm.const(self.b, f"{op.name}/tofu_d{d}", value[box.slices()], self.dtype(t),
                              self.devices[d], shared=True), d)
        for d, box in enumerate(self.held[t])]

  def _values(self, h: str) -> None:
    """The value shards of variable ``h`` (for an op that reads it through its handle)."""
    v = self.variables[h]
    self.shards[h] = [
        Shard(s.box, self.b.add("ReadVariableOp", f"{tensor_stem(h)}/tofu_value_d{s.device}",
                                [s.placeholder], self.devices[s.device], {"dtype": v.dtype}),
              s.device)
        for s in v.shards]

  def shards_of(self, t: str) -> list[Shard]:
    if t not in self.shards:
      if t in self.variables:
        self._values(t)
      elif t in self.sources:
        self._const(self.sources[t])
      else:
        raise ValueError(f"tensor {t!r} is read before any op produces it")
    return self.shards[t]

  def _tied(self, op: SOp, t: str, h: str) -> None:
    if self.held[t] != self.held[h]:
      raise PlanError(f"op {op.name!r} ({op.op_type}): tensor {t!r} must be laid out like "
                      f"variable {self.g.variables[h]!r} (their layouts are "
                      f"{list(self.plan.layouts[t])} and {list(self.plan.layouts[h])}); a "
                      "constraint separated them - constrain both alike")

  # ---------------------------------------------------------------- ops

  def _input(self, t: str, need: tuple) -> list[Optional[str]]:
    by_need = self.needs.setdefault(t, {})
    if need not in by_need:
      stem = f"{tensor_stem(t)}/tofu_need{len(by_need)}"
      by_need[need] = self.conv.gather(stem, self.dtype(t), self.shards_of(t), list(need))
    return by_need[need]

  def _share(self, op: SOp, key: tuple) -> bool:
    """Whether ``op`` shares the nodes of an earlier op with ``key`` (module docstring)."""
    first = self._scalar_ops.setdefault(key, op)
    if first is op:
      return False
    self.nodes_of[op.name] = self.nodes_of[first.name]
    for t, u in zip(op.outputs, first.outputs):
      self.shards[t] = self.shards[u]
    self._shared.add(op.name)
    return True

  def _scalar_replicated(self, op: SOp, tiles) -> bool:
    """Stateless, scalar outputs, computed whole on every device with nothing to reduce."""
    if not op.outputs or any(self.g.tensors[t].shape != () for t in op.outputs):
      return False
    op_def = op_def_registry.get(op.op_type)
    return (op_def is not None and not op_def.is_stateful and all(tiles)
            and all(s == 1.0 for tile in tiles for s in tile.output_scale)
            and not any(k for tile in tiles for k in tile.partial_key))

  def _op(self, op: SOp) -> None:
    strategy = self.plan.strategies.get(op.name)
    if strategy is None:
      raise PlanError(f"the plan has no strategy for op {op.name!r}")
    # Identical ops (repeated blocks) share their tiles, kept by the describer.
    tiles = tiling.op_tiles(op.context, strategy, self.factors, self.describer)
    wired: list[list[Optional[str]]] = []
    for i, t in enumerate(op.inputs):
      need = tuple(tile.inputs[i] if tile else None for tile in tiles)
      if all(r is None for r in need):
        wired.append([None] * self.k)  # a constant shape input, rebuilt per device below
      elif t is None:
        raise ValueError(f"op {op.name!r}: data input {i} is not connected")
      else:
        wired.append(self._input(t, need))
    if self._scalar_replicated(op, tiles) and self._share(
        op, ("op", context_key(op.context), tuple(strategy), tuple(tuple(w) for w in wired))):
      return
    produced: list[list[Optional[Shard]]] = [[None] * self.k for _ in op.outputs]
    nodes: list[Optional[str]] = [None] * self.k
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
          inputs.append(comm.const(self.b, f"{node}/in{i}", info.value, info.dtype, dev, shared=True))
        else:
          inputs.append(wired[i][d])
      name = nodes[d] = self._copy(tile.context, node, inputs, dev)
      for o, t in enumerate(op.outputs):
        out = comm.tensor_ref(name, o)
        if tile.output_scale[o] != 1.0:
          out = comm.scale(self.b, f"{node}/scale{o}", out, tile.output_scale[o], self.dtype(t),
                           dev)
        produced[o][d] = Shard(tile.outputs[o], out, d)
    self.nodes_of[op.name] = nodes
    for o, t in enumerate(op.outputs):
      keys = [tile.partial_key[o] if tile else None for tile in tiles]
      self.shards[t] = self.conv.produce(tensor_stem(t) + "/tofu", self.dtype(t), produced[o],
                                         keys, list(self.held[t]))

  def _copy(self, ctx, node: str, inputs: list[str], dev: str) -> str:
    """One device's copy of an op.  A ``ConcatV2`` drops its empty blocks (Grappler's
    constant folding mis-wires a concat with empty inputs and control inputs); a
    depthwise convolution pads with ``Pad`` instead of EXPLICIT padding
    (:mod:`tf_tofu.rewrite.padding`)."""
    if padding.needs_rewrite(ctx.op_type, ctx.attrs):
      return padding.emit(self.b, ctx, node, inputs, dev)
    if ctx.op_type == "ConcatV2":
      keep = [i for i, info in enumerate(ctx.inputs[:-1])
              if int(np.prod(info.shape, dtype=np.int64)) > 0] or [0]
      if len(keep) < len(ctx.inputs) - 1:
        if len(keep) == 1:
          return self.b.add("Identity", node, [inputs[keep[0]]], dev, {"T": ctx.attrs["T"]})
        return self.b.add("ConcatV2", node, [inputs[i] for i in keep] + [inputs[-1]], dev,
                          dict(ctx.attrs, N=len(keep)))
    return self.b.add(ctx.op_type, node, inputs, dev, ctx.attrs)

  def _read(self, op: SOp) -> None:
    h = op.inputs[0]
    v = self.variables[h]
    if op.outputs and v.shape == () and self._share(
        op, ("read", h, op.context.attrs.get("dtype"), self._controls.get(op.name, ()))):
      return
    nodes = [self.b.add("ReadVariableOp", f"{op.name}/tofu_d{s.device}", [s.placeholder],
                        self.devices[s.device], {"dtype": op.context.attrs.get("dtype", v.dtype)})
             for s in v.shards]
    self.nodes_of[op.name] = nodes
    if op.outputs:
      self._tied(op, op.outputs[0], h)
      self.shards[op.outputs[0]] = [Shard(s.box, n, s.device) for s, n in zip(v.shards, nodes)]

  def _update(self, op: SOp) -> None:
    h = op.inputs[0]
    v = self.variables[h]
    on_shards, whole = update_slots(self.g, op)
    gathered = {i: self._input(op.inputs[i], (Region.whole(self.g.tensors[op.inputs[i]].shape),)
                               * self.k) for i in whole}
    for i in on_shards:
      self._tied(op, op.inputs[i], h)
    nodes: list[Optional[str]] = [None] * self.k
    for s in v.shards:
      d, dev = s.device, self.devices[s.device]
      if op.op_type in SCATTER_OPS:
        if s.box.volume:
          nodes[d] = self._scatter(op, s, gathered[1][d], gathered[2][d])
        continue
      inputs = []
      for i, t in enumerate(op.inputs):
        if i == 0:
          inputs.append(s.placeholder)
        elif i in gathered:
          inputs.append(gathered[i][d])
        elif t in self.variables:  # an optimizer slot
          inputs.append(self.variables[t].shards[d].placeholder)
        else:
          inputs.append(self.shards_of(t)[d].tensor)
      nodes[d] = self.b.add(op.op_type, f"{op.name}/tofu_d{d}", inputs, dev, op.context.attrs)
    self.nodes_of[op.name] = nodes

  def _scatter(self, op: SOp, s: FeedShard, indices: str, updates: str) -> str:
    """``op`` (a row scatter) on the shard ``s`` of its variable; see the module docstring."""
    d, dev = s.device, self.devices[s.device]
    node = f"{op.name}/tofu_d{d}"
    var_shape = self.g.tensors[op.inputs[0]].shape
    idx_t, upd_t = op.inputs[1], op.inputs[2]
    idx_shape, idx_dtype = self.g.tensors[idx_t].shape, self.dtype(idx_t)
    upd_shape, dtype = self.g.tensors[upd_t].shape, self.dtype(upd_t)
    lead = len(idx_shape)
    upd_whole = Region.whole(upd_shape)
    upd_box = Region(upd_whole.intervals[:lead] + s.box.intervals[1:])
    if upd_box != upd_whole:
      updates = comm.slice_box(self.b, f"{node}/updates", updates, upd_whole, upd_box, dtype, dev)
    rows = s.box.intervals[0]
    if rows != Interval(0, var_shape[0]):
      lo, hi = rows.lo, rows.hi

      def scalar(name, value):
        return comm.const(self.b, f"{node}/{name}", np.array(value), idx_dtype, dev, shared=True)

      first = scalar("lo", lo)
      inside = self.b.add("LogicalAnd", f"{node}/inside", [
          self.b.add("GreaterEqual", f"{node}/ge", [indices, first], dev, {"T": idx_dtype}),
          self.b.add("Less", f"{node}/lt", [indices, scalar("hi", hi)], dev, {"T": idx_dtype})],
          dev)
      shifted = self.b.add("Sub", f"{node}/shift", [indices, first], dev, {"T": idx_dtype})
      indices = self.b.add("ClipByValue", f"{node}/clip",
                           [shifted, scalar("zero", 0), scalar("last", hi - lo - 1)], dev,
                           {"T": idx_dtype})
      mask = self.b.add("Reshape", f"{node}/mask", [
          inside, comm.const(self.b, f"{node}/mask_shape",
                             np.array(list(idx_shape) + [1] * (len(var_shape) - 1)), "int32",
                             dev, shared=True)], dev, {"T": "bool", "Tshape": "int32"})
      zeros = self.b.add("ZerosLike", f"{node}/zeros", [updates], dev, {"T": dtype})
      updates = self.b.add("SelectV2", f"{node}/rows", [mask, updates, zeros], dev, {"T": dtype})
    return self.b.add(op.op_type, node, [s.placeholder, indices, updates], dev, op.context.attrs)

  # ---------------------------------------------------------------- order

  def _order(self, order: Sequence[SOp], controls: dict[str, tuple[str, ...]]) -> None:
    """The original control edges per device, and one op chain per device."""
    order = [op for op in order if op.name not in self._shared]
    for op in order:
      mine = self.nodes_of.get(op.name, ())
      for c in controls.get(op.name, ()):
        theirs = self.nodes_of.get(c)
        if not theirs:
          continue
        for d, node in enumerate(mine):
          if node is None:
            continue
          same = theirs[d]
          self.b.add_control(node, [same] if same else [n for n in theirs if n])
    last: list[Optional[str]] = [None] * self.k
    for op in order:
      if op.op_type in UNCHAINED_OPS:
        continue
      for d, node in enumerate(self.nodes_of.get(op.name, ())):
        if node is not None:
          if last[d] is not None:
            self.b.add_control(node, [last[d]])
          last[d] = node

  # ---------------------------------------------------------------- all

  def run(self, fetches: Optional[Sequence[str]]) -> Partitioned:
    for op in self.g.ops:
      if op.kind == "source" and op.outputs and op.outputs[0] in self.g.variables:
        self._variable(op)
      elif op.kind == "source" and op.op_type in REWRITABLE_FEEDS:
        self._feed(op)
    controls = self._controls = control_sources(self.g)
    order = _topological(self.g, controls)
    emit = {"compute": self._op, "single": self._op, "read": self._read, "update": self._update}
    for i, op in enumerate(order):
      emit[op.kind](op)
      if (i + 1) % 1000 == 0:
        progress.update(f"{i + 1:,} of {len(order):,} ops")
    self._order(order, controls)
    if fetches is None:
      read = {t for op in self.g.ops for t in op.inputs if t}
      fetches = [t for op in self.g.ops if op.kind in ("compute", "single", "source")
                 for t in op.outputs if t not in read and self.g.tensors[t].itemsize > 0
                 and t not in self.variables]
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
    must_run = [op.name for op in order if op.kind == "update"]
    must_run += [c for name in self.g.control_outputs for c in controls.get(name, ())]
    step = [n for name in dict.fromkeys(must_run) for n in self.nodes_of.get(name, ()) if n]
    step += self.conv.collective_nodes
    targets = ()
    if step:
      targets = (self.b.add("NoOp", STEP_TARGET, [], self.devices[0], control=step),)
    return Partitioned(
        graph_def=self.b.graph_def(), devices=self.devices, feeds=self.feeds, fetches=fetch_map,
        shapes={t: self.g.tensors[t].shape for t in names},
        dtypes={t: self.g.tensors[t].dtype for t in names}, comm=self.conv.mode, targets=targets,
        collective_conversions=self.conv.collective_conversions,
        plain_conversions=self.conv.plain_conversions, variables=self.variables)


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
