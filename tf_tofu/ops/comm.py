"""NodeDef builders for what the rewrite inserts: slices, concats, sums, collectives.

Everything here writes plain ``NodeDef`` protos into a :class:`GraphBuilder`;
nothing runs.  Every node gets an explicit ``device`` (docs/design.md section 3:
colocation and soft placement are never relied on), and every helper returns
the name of the tensor it makes (``"node"`` for output 0, ``"node:i"``
otherwise), ready to be used as an input of the next node.

Communication comes in two forms:

* *plain*: a box is cut out of a tensor with ``Slice`` on the device that holds
  it and assembled with ``ConcatV2`` / summed with ``AddN`` on the device that
  needs it; TensorFlow inserts the Send/Recv pair, which moves exactly the
  slice's bytes;
* *collective*: ``CollectiveGatherV2`` (all-gather, which concatenates the
  members' inputs along dim 0 in rank order), ``CollectiveReduceV2``
  (all-reduce) and ``CollectiveReduceScatterV2`` (reduce-scatter; NCCL only,
  TensorFlow has no CPU implementation).  A group is a set of devices; its
  ranks follow TensorFlow's order (sorted by job, replica, task, device type,
  device index - numerically, so ``CPU:10`` comes after ``CPU:2``).

Collective keys are content hashes (:class:`CollectiveKeys`): TensorFlow
remembers, per process, the devices of a group key and the shape of an
instance key, and refuses a later graph that reuses a key differently (the
error is sticky for the process).  Hashing the group's device names, and the
instance's kind, shape, dtype, group and a caller-chosen identity, gives the
same key to the same collective in any graph and different keys otherwise
(collisions within one graph are detected and probed away).
"""

from __future__ import annotations

import zlib
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, tensor_shape_pb2
from tensorflow.python.framework import op_def_registry

from tf_tofu.core.regions import Region

COLLECTIVE_GATHER = "CollectiveGatherV2"
COLLECTIVE_REDUCE = "CollectiveReduceV2"
COLLECTIVE_REDUCE_SCATTER = "CollectiveReduceScatterV2"
COLLECTIVE_OPS = frozenset({COLLECTIVE_GATHER, COLLECTIVE_REDUCE, COLLECTIVE_REDUCE_SCATTER})


# ---------------------------------------------------------------- attributes


def _dtype_enum(value: Any) -> int:
  return tf.as_dtype(value).as_datatype_enum


def _shape_proto(value: Optional[Sequence[int]]) -> tensor_shape_pb2.TensorShapeProto:
  if value is None:
    return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
  return tensor_shape_pb2.TensorShapeProto(
      dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(d)) for d in value])


def _bool(x: Any) -> bool:
  if not isinstance(x, (bool, np.bool_)):
    raise TypeError(f"expected a bool, got {x!r}")
  return bool(x)


def attr_value(value: Any, kind: str) -> attr_value_pb2.AttrValue:
  """The AttrValue of a plain Python value for an OpDef attribute of type ``kind``.

  The inverse of ``opdefs.kernels.attr_to_python``: strings, ints, floats,
  bools, dtypes (by name), shapes (lists, None for unknown rank), tensors
  (numpy arrays), functions (by name) and lists of each.
  """
  if kind.startswith("list(") and kind.endswith(")"):
    inner = kind[5:-1]
    lv = attr_value_pb2.AttrValue.ListValue()
    for x in value:
      if inner == "string":
        lv.s.append(x.encode() if isinstance(x, str) else bytes(x))
      elif inner == "int":
        lv.i.append(int(x))
      elif inner == "float":
        lv.f.append(float(x))
      elif inner == "bool":
        lv.b.append(_bool(x))
      elif inner == "type":
        lv.type.append(_dtype_enum(x))
      elif inner == "shape":
        lv.shape.append(_shape_proto(x))
      elif inner == "tensor":
        lv.tensor.append(tf.make_tensor_proto(np.asarray(x)))
      elif inner == "func":
        lv.func.append(attr_value_pb2.NameAttrList(name=str(x)))
      else:
        raise ValueError(f"attribute type {kind!r} is not supported")
    return attr_value_pb2.AttrValue(list=lv)
  if kind == "string":
    return attr_value_pb2.AttrValue(s=value.encode() if isinstance(value, str) else bytes(value))
  if kind == "int":
    return attr_value_pb2.AttrValue(i=int(value))
  if kind == "float":
    return attr_value_pb2.AttrValue(f=float(value))
  if kind == "bool":
    return attr_value_pb2.AttrValue(b=_bool(value))
  if kind == "type":
    return attr_value_pb2.AttrValue(type=_dtype_enum(value))
  if kind == "shape":
    return attr_value_pb2.AttrValue(shape=_shape_proto(value))
  if kind == "tensor":
    return attr_value_pb2.AttrValue(tensor=tf.make_tensor_proto(np.asarray(value)))
  if kind == "func":
    return attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=str(value)))
  raise ValueError(f"attribute type {kind!r} is not supported")


def node_attrs(op_type: str, attrs: Mapping[str, Any], node: str = "?") -> dict:
  """AttrValues for the OpDef attributes of ``op_type`` found in ``attrs``.

  Attributes whose names start with ``_`` (``_class``, ``_output_shapes``,
  ``_XlaCompile``, ...) are dropped: they are hints of the original graph that
  would override the device or the shapes of a copy.
  """
  op_def = op_def_registry.get(op_type)
  if op_def is None:
    raise ValueError(f"node {node!r}: {op_type!r} is not a TensorFlow op type")
  kinds = {a.name: a.type for a in op_def.attr}
  out = {}
  for k, v in attrs.items():
    if k.startswith("_"):
      continue
    if k not in kinds:
      raise ValueError(f"node {node!r} ({op_type}): attribute {k!r} is not in the OpDef "
                       f"(known: {sorted(kinds)})")
    try:
      out[k] = attr_value(v, kinds[k])
    except (TypeError, ValueError) as e:
      raise ValueError(f"node {node!r} ({op_type}): attribute {k}={v!r} of type "
                       f"{kinds[k]}: {e}") from e
  return out


# ---------------------------------------------------------------- builder


def tensor_ref(node: str, index: int = 0) -> str:
  return node if index == 0 else f"{node}:{index}"


class GraphBuilder:
  """Collects NodeDefs with unique names.

  Helper constants (slice bounds, axes, shapes, factors) are pooled: one Const
  node per device and value, which TensorFlow's common-subexpression pass would
  otherwise have to find among tens of thousands of nodes on every first run.
  A pooled constant never takes control inputs (its readers would inherit them).
  """

  def __init__(self):
    self._nodes: list[node_def_pb2.NodeDef] = []
    self._by_name: dict[str, node_def_pb2.NodeDef] = {}
    self._pool: dict[tuple, str] = {}
    self._pooled: set[str] = set()
    self._sources: dict[str, set[str]] = {}  # node -> the nodes it reads or waits for

  def unique(self, name: str) -> str:
    if name not in self._by_name:
      return name
    i = 1
    while f"{name}_{i}" in self._by_name:
      i += 1
    return f"{name}_{i}"

  def add(self, op_type: str, name: str, inputs: Sequence[str], device: str,
          attrs: Optional[Mapping[str, Any]] = None,
          proto_attrs: Optional[Mapping[str, attr_value_pb2.AttrValue]] = None,
          control: Sequence[str] = ()) -> str:
    """Adds a node (Python ``attrs`` typed by the OpDef) and returns its name."""
    if not device:
      raise ValueError(f"node {name!r} ({op_type}) needs a device")
    name = self.unique(name)
    nd = node_def_pb2.NodeDef(name=name, op=op_type, device=device)
    nd.input.extend(list(inputs) + [f"^{c.split(':')[0]}" for c in control])
    for k, v in node_attrs(op_type, attrs or {}, name).items():
      nd.attr[k].CopyFrom(v)
    for k, v in (proto_attrs or {}).items():
      nd.attr[k].CopyFrom(v)
    self._by_name[name] = nd
    self._nodes.append(nd)
    return name

  def pooled_const(self, arr: np.ndarray, dtype: str, device: str) -> str:
    """The Const node holding ``arr`` on ``device`` (``tofu/const_<i>``), made once."""
    key = (device, dtype, arr.shape, arr.tobytes())
    if key not in self._pool:
      self._pool[key] = self.add("Const", f"tofu/const_{len(self._pool)}", [], device,
                                 {"dtype": dtype, "value": arr})
      self._pooled.add(self._pool[key])
    return self._pool[key]

  def add_control(self, name: str, controls: Sequence[str]) -> None:
    """Adds control inputs (node names, each once) to node ``name``."""
    if name in self._pooled and controls:
      raise ValueError(f"node {name!r} is a shared constant; it cannot take control inputs")
    nd = self._by_name[name]
    # A node it reads already runs first: a control edge on it would be redundant.
    have = self._sources.get(name)
    if have is None:
      have = self._sources[name] = {i.lstrip("^").split(":")[0] for i in nd.input}
    for c in controls:
      source = c.split(":")[0]
      if source not in have and source != name:
        nd.input.append(f"^{source}")
        have.add(source)

  def graph_def(self) -> graph_pb2.GraphDef:
    gd = graph_pb2.GraphDef()
    gd.node.extend(self._nodes)
    gd.versions.producer = tf.version.GRAPH_DEF_VERSION
    return gd

  @property
  def nodes(self) -> tuple[node_def_pb2.NodeDef, ...]:
    return tuple(self._nodes)


# ---------------------------------------------------------------- local ops


def const(b: GraphBuilder, name: str, value: Any, dtype: str, device: str,
          shared: bool = False) -> str:
  """A Const node; ``shared`` ones are pooled per device and value (see GraphBuilder)."""
  arr = np.asarray(value).astype(tf.as_dtype(dtype).as_numpy_dtype)
  if shared:
    return b.pooled_const(arr, dtype, device)
  return b.add("Const", name, [], device, {"dtype": dtype, "value": arr})


def _index_const(b: GraphBuilder, name: str, values: Sequence[int], device: str) -> tuple[str, str]:
  big = any(abs(int(v)) >= 2**31 for v in values)
  dt = "int64" if big else "int32"
  return const(b, name, np.asarray(list(values), dtype=dt), dt, device, shared=True), dt


def placeholder(b: GraphBuilder, name: str, dtype: str, shape: Sequence[int], device: str) -> str:
  return b.add("Placeholder", name, [], device, {"dtype": dtype, "shape": list(shape)})


def resource_placeholder(b: GraphBuilder, name: str, dtype: str, shape: Sequence[int],
                         device: str) -> str:
  """A resource placeholder for a variable of ``shape``/``dtype`` (in ``_handle_shapes``)."""
  shapes = attr_value_pb2.AttrValue()
  shapes.list.shape.add().CopyFrom(_shape_proto(shape))
  dtypes = attr_value_pb2.AttrValue()
  dtypes.list.type.append(_dtype_enum(dtype))
  return b.add("Placeholder", name, [], device, {"dtype": "resource", "shape": []},
               proto_attrs={"_handle_shapes": shapes, "_handle_dtypes": dtypes})


def ensure_shape(b: GraphBuilder, name: str, x: str, shape: Sequence[int], dtype: str,
                 device: str) -> str:
  """``x``, checked to have (and statically known as) ``shape``."""
  return b.add("EnsureShape", name, [x], device, {"T": dtype, "shape": list(shape)})


def identity(b: GraphBuilder, name: str, x: str, dtype: str, device: str) -> str:
  return b.add("Identity", name, [x], device, {"T": dtype})


def slice_box(b: GraphBuilder, name: str, x: str, x_box: Region, box: Region, dtype: str,
              device: str) -> str:
  """``box`` (global coordinates) cut out of ``x``, which holds ``x_box``; on ``device``."""
  begin = [r.lo - o.lo for r, o in zip(box.intervals, x_box.intervals)]
  if any(v < 0 for v in begin) or any(r.hi > o.hi for r, o in zip(box.intervals, x_box.intervals)):
    raise ValueError(f"slice {name!r}: box {box} is not inside the held box {x_box}")
  bn, dt = _index_const(b, f"{name}/begin", begin, device)
  sn, _ = _index_const(b, f"{name}/size", box.shape, device)
  return b.add("Slice", name, [x, bn, sn], device, {"T": dtype, "Index": dt})


def concat(b: GraphBuilder, name: str, xs: Sequence[str], axis: int, dtype: str,
           device: str) -> str:
  ax = const(b, f"{name}/axis", np.int32(axis), "int32", device, shared=True)
  return b.add("ConcatV2", name, list(xs) + [ax], device,
               {"N": len(xs), "T": dtype, "Tidx": "int32"})


def add_n(b: GraphBuilder, name: str, xs: Sequence[str], dtype: str, device: str) -> str:
  return b.add("AddN", name, list(xs), device, {"N": len(xs), "T": dtype})


def scale(b: GraphBuilder, name: str, x: str, factor: float, dtype: str, device: str) -> str:
  if not tf.as_dtype(dtype).is_floating and not tf.as_dtype(dtype).is_complex:
    raise ValueError(f"node {name!r}: cannot scale a {dtype} tensor by {factor}")
  c = const(b, f"{name}/factor", factor, dtype, device, shared=True)
  return b.add("Mul", name, [x, c], device, {"T": dtype})


def expand_dims(b: GraphBuilder, name: str, x: str, axis: int, dtype: str, device: str) -> str:
  ax = const(b, f"{name}/axis", np.int32(axis), "int32", device, shared=True)
  return b.add("ExpandDims", name, [x, ax], device, {"T": dtype, "Tdim": "int32"})


def unstack(b: GraphBuilder, name: str, x: str, num: int, dtype: str, device: str) -> list[str]:
  node = b.add("Unpack", name, [x], device, {"num": num, "T": dtype, "axis": 0})
  return [tensor_ref(node, i) for i in range(num)]


def transpose(b: GraphBuilder, name: str, x: str, perm: Sequence[int], dtype: str,
              device: str) -> str:
  p = const(b, f"{name}/perm", np.asarray(perm, np.int32), "int32", device, shared=True)
  return b.add("Transpose", name, [x, p], device, {"T": dtype, "Tperm": "int32"})


def empty(b: GraphBuilder, name: str, shape: Sequence[int], dtype: str, device: str) -> str:
  """A tensor with a zero-size dim (a worker's empty block)."""
  return const(b, name, np.zeros(tuple(shape)), dtype, device)


# ---------------------------------------------------------------- collectives


def _device_sort_key(name: str) -> tuple:
  s = tf.DeviceSpec.from_string(name)
  return (s.job or "", s.replica or 0, s.task or 0, (s.device_type or "").upper(),
          s.device_index or 0)


def rank_order(devices: Sequence[str]) -> list[str]:
  """The members of a collective group in TensorFlow's rank order."""
  return sorted(devices, key=_device_sort_key)


def _hash31(text: str) -> int:
  return (zlib.crc32(text.encode()) & 0x3FFFFFFF) + 1


class CollectiveKeys:
  """Deterministic group and instance keys; see the module docstring."""

  def __init__(self):
    self._groups: dict[tuple[str, ...], int] = {}
    self._group_keys: set[int] = set()
    self._instances: set[int] = set()

  def group(self, devices: Sequence[str]) -> int:
    members = tuple(rank_order(devices))
    if members not in self._groups:
      key = _hash31("group|" + "|".join(members))
      while key in self._group_keys:
        key = key % 0x3FFFFFFF + 1
      self._groups[members] = key
      self._group_keys.add(key)
    return self._groups[members]

  def instance(self, identity: str) -> int:
    key = _hash31("instance|" + identity)
    while key in self._instances:
      key = key % 0x3FFFFFFF + 1
    self._instances.add(key)
    return key


def _collective(b: GraphBuilder, op_type: str, name: str, x: str, dtype: str, device: str,
                group_size: int, group_key: int, instance_key: int, tokens: Sequence[str],
                control: Sequence[str], extra: Mapping[str, Any]) -> str:
  gs = const(b, f"{name}/group_size", np.int32(group_size), "int32", device, shared=True)
  gk = const(b, f"{name}/group_key", np.int32(group_key), "int32", device, shared=True)
  ik = const(b, f"{name}/instance_key", np.int32(instance_key), "int32", device, shared=True)
  attrs = {"T": dtype, "communication_hint": "auto", "timeout_seconds": 0.0,
           "is_stateless": False, "Nordering_token": len(tokens)}
  attrs.update(extra)
  return b.add(op_type, name, [x, gs, gk, ik] + list(tokens), device, attrs, control=control)


def collective_gather(b: GraphBuilder, name: str, x: str, dtype: str, device: str,
                      group_size: int, group_key: int, instance_key: int,
                      tokens: Sequence[str] = (), control: Sequence[str] = ()) -> str:
  """All-gather: the members' ``x`` concatenated along dim 0 in rank order."""
  return _collective(b, COLLECTIVE_GATHER, name, x, dtype, device, group_size, group_key,
                     instance_key, tokens, control, {})


def collective_all_reduce(b: GraphBuilder, name: str, x: str, dtype: str, device: str,
                          group_size: int, group_key: int, instance_key: int,
                          tokens: Sequence[str] = (), control: Sequence[str] = ()) -> str:
  """All-reduce (sum): every member gets the sum of the members' ``x``."""
  return _collective(b, COLLECTIVE_REDUCE, name, x, dtype, device, group_size, group_key,
                     instance_key, tokens, control,
                     {"merge_op": "Add", "final_op": "Id", "max_subdivs_per_device": -1})


def collective_reduce_scatter(b: GraphBuilder, name: str, x: str, dtype: str, device: str,
                              group_size: int, group_key: int, instance_key: int,
                              tokens: Sequence[str] = (), control: Sequence[str] = ()) -> str:
  """Reduce-scatter (sum): rank r gets block r (of group_size, along dim 0) of the sum."""
  return _collective(b, COLLECTIVE_REDUCE_SCATTER, name, x, dtype, device, group_size, group_key,
                     instance_key, tokens, control,
                     {"merge_op": "Add", "final_op": "Id", "max_subdivs_per_device": -1})


def ordering_token(b: GraphBuilder, name: str, device: str) -> str:
  """A per-device resource handle passed to that device's collectives as ordering token.

  It is never created or read; inside a traced ``tf.function`` automatic
  control dependencies order the collectives that share it (docs/design.md section 3).
  """
  return b.add("VarHandleOp", name, [], device,
               {"dtype": "float32", "shape": [], "container": "", "shared_name": name})
