"""The bytes a partitioned GraphDef moves between devices, read off the graph itself.

Two kinds of traffic (docs/design.md section 4, "each byte prediction against the
graph"):

* *edges*: a data input whose producer sits on another device.  TensorFlow
  sends a tensor once per destination device however many nodes there read
  it, so each ``(tensor, destination device)`` pair counts once, with the
  tensor's static size;
* *collectives*: the members of one instance (same op type, group key and
  instance key) move, for an input of ``b`` bytes per member and a group of
  ``n``: all-gather ``n b (n - 1)`` (every member receives the ``n - 1`` other
  blocks), reduce-scatter ``b (n - 1)``, all-reduce ``2 b (n - 1)``
  (reduce-scatter then all-gather) - the totals of the table of docs/method.md section 5.

Per link class (:func:`link_bytes`, under a ``tf_tofu.core.topology.Topology``):
an edge counts under the class of the link between its two devices; a
collective instance under ``"local"`` when all its members are devices of one
task, else wholly under ``"network"`` (how its ring crosses tasks is
TensorFlow's choice, so the split is not predicted).

Shapes come from :class:`tf_tofu.ops.shapes.StaticShapes` (``_output_shapes``
where a node has it, otherwise TensorFlow's shape functions on an import that
does not run the graph).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Sequence

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tf_tofu.core.errors import TofuError
from tf_tofu.core.plan import human_bytes
from tf_tofu.ops.comm import (COLLECTIVE_GATHER, COLLECTIVE_OPS, COLLECTIVE_REDUCE,
                              COLLECTIVE_REDUCE_SCATTER)
from tf_tofu.ops.shapes import StaticShapes

# Other collective op types; counting them is not implemented, so they are refused.
_UNCOUNTED_COLLECTIVES = frozenset({
    "CollectiveReduce", "CollectiveGather", "CollectiveBcastSend", "CollectiveBcastRecv",
    "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "CollectiveAllToAllV2",
    "CollectiveAllToAllV3", "CollectiveReduceV3", "NcclAllReduce", "NcclReduce",
    "NcclBroadcast"})


def _parse_input(inp: str) -> tuple[str, int]:
  node, _, idx = inp.partition(":")
  return node, int(idx) if idx else 0


def _canonical_device(name: str, node: str) -> str:
  if not name:
    raise TofuError(f"node {node!r} has no device; a partitioned graph places every node")
  return tf.DeviceSpec.from_string(name).to_string()


@dataclasses.dataclass(frozen=True)
class TransferCount:
  """Bytes moved: by cross-device edges and by collectives, and the edges themselves."""

  edge_bytes: int
  collective_bytes: int
  edges: tuple[tuple[str, str, int], ...]        # (tensor, destination device, bytes)
  collectives: tuple[tuple[str, int, int, int], ...]  # (op type, group key, instance key, bytes)
  # Bytes each device receives: its incoming edges, plus 1/n of every collective instance
  # of n members it belongs to (the collectives move equal shares to every member).
  received: dict[str, int] = dataclasses.field(default_factory=dict)
  # Edge bytes per (source device, destination device); collectives have no single source.
  between: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
  # The member devices of each collective instance, in the order of ``collectives``.
  collective_devices: tuple[tuple[str, ...], ...] = ()

  @property
  def total(self) -> int:
    return self.edge_bytes + self.collective_bytes


def _const_int(nodes, inp: str, what: str, consumer: str) -> int:
  node, _ = _parse_input(inp)
  nd = nodes.get(node)
  if nd is None or nd.op != "Const":
    raise TofuError(f"collective {consumer!r}: its {what} must be a Const to be counted, "
                     f"got {nd.op if nd is not None else 'nothing'} {node!r}")
  return int(tf.make_ndarray(nd.attr["value"].tensor))


def transfer_count(graph_def: graph_pb2.GraphDef) -> TransferCount:
  """Counts cross-device edges and collective traffic; see the module docstring."""
  nodes = {n.name: n for n in graph_def.node}
  shapes = StaticShapes(graph_def)
  devices = {n.name: _canonical_device(n.device, n.name) for n in graph_def.node}
  seen: dict[tuple[str, int, str], int] = {}
  instances: dict[tuple[str, int, int], list] = collections.defaultdict(list)
  for n in graph_def.node:
    if n.op in _UNCOUNTED_COLLECTIVES:
      raise TofuError(f"node {n.name!r}: counting {n.op} is not implemented; the rewrite "
                       f"emits only {sorted(COLLECTIVE_OPS)}")
    for inp in n.input:
      if inp.startswith("^"):
        continue
      src, idx = _parse_input(inp)
      if src not in nodes:
        raise TofuError(f"node {n.name!r} reads {inp!r}, which is not in the graph")
      if devices[src] != devices[n.name]:
        key = (src, idx, devices[n.name])
        if key not in seen:
          seen[key] = shapes.bytes(src, idx)
    if n.op in COLLECTIVE_OPS:
      size = _const_int(nodes, n.input[1], "group_size", n.name)
      gkey = _const_int(nodes, n.input[2], "group_key", n.name)
      ikey = _const_int(nodes, n.input[3], "instance_key", n.name)
      src, idx = _parse_input(n.input[0])
      instances[(n.op, gkey, ikey)].append((devices[n.name], size, shapes.bytes(src, idx)))
  received: dict[str, int] = collections.Counter()
  between: dict[tuple[str, str], int] = collections.Counter()
  for (src, _, device), b in seen.items():
    received[device] += b
    between[(devices[src], device)] += b
  collectives, member_devices = [], []
  for (op, gkey, ikey), members in sorted(instances.items()):
    sizes = {m[1] for m in members}
    if len(sizes) != 1 or len(members) != sizes.pop():
      raise TofuError(f"{op} instance {ikey} of group {gkey} has {len(members)} members in "
                       f"this graph, they declare group sizes {sorted({m[1] for m in members})}")
    n = len(members)
    per = [m[2] for m in members]
    if op == COLLECTIVE_GATHER:
      moved = sum(per) * (n - 1)
    elif op == COLLECTIVE_REDUCE:
      moved = 2 * per[0] * (n - 1)
    elif op == COLLECTIVE_REDUCE_SCATTER:
      moved = per[0] * (n - 1)
    else:  # pragma: no cover - COLLECTIVE_OPS is exhaustive
      raise AssertionError(op)
    collectives.append((op, gkey, ikey, moved))
    member_devices.append(tuple(m[0] for m in members))
    for device, *_ in members:
      received[device] += moved // n
  edges = tuple(sorted((f"{s}:{i}", d, b) for (s, i, d), b in seen.items()))
  return TransferCount(sum(b for *_, b in edges), sum(c[3] for c in collectives), edges,
                       tuple(collectives), dict(sorted(received.items())),
                       dict(sorted(between.items())), tuple(member_devices))


def link_bytes(count: TransferCount, topology=None) -> dict[str, int]:
  """Bytes per link class (module docstring), classes in ``topology.classes`` order, those
  with no bytes left out; ``topology`` None: classes from the device names."""
  from tf_tofu.core.topology import LOCAL, NETWORK, Topology
  topology = topology or Topology()
  out: dict[str, int] = collections.Counter()
  for (src, dst), b in count.between.items():
    out[topology.link_class(src, dst)] += b
  for (_, _, _, moved), members in zip(count.collectives, count.collective_devices):
    one_task = len(topology.groups(members)) == 1
    out[LOCAL if one_task else NETWORK] += moved
  return {c: out[c] for c in topology.classes if out.get(c)}


def pair_table(count: TransferCount, devices: Sequence[str]) -> str:
  """A text table of the edge bytes from each device (row) to each other (column)."""
  names = [_canonical_device(d, d) for d in devices]
  width = max(10, *(len(str(i)) for i in range(len(names))))
  lines = ["bytes sent between devices per step (edges; row -> column):",
           " " * 6 + "".join(f"{i:>{width}}" for i in range(len(names)))]
  for i, src in enumerate(names):
    cells = [human_bytes(count.between.get((src, dst), 0)) if src != dst else "-"
             for dst in names]
    lines.append(f"{i:>4}  " + "".join(f"{c:>{width}}" for c in cells))
  lines.append("devices: " + ", ".join(f"{i} {d}" for i, d in enumerate(names)))
  if count.collective_bytes:
    lines.append(f"collectives: {human_bytes(count.collective_bytes)} in all, an equal share "
                 "received by every member")
  return "\n".join(lines)


def count_transfer_bytes(graph_def: graph_pb2.GraphDef) -> int:
  """Bytes that cross devices per run of ``graph_def`` (edges plus collectives)."""
  return transfer_count(graph_def).total
