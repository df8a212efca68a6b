"""Where an ingested graph comes from: GraphDef files, feeds, variables of a bare GraphDef.

Helpers of ``TofuGraph.from_graph_def`` and ``trace``: parse a GraphDef given
as a proto, bytes or a binary/text file; fix placeholder shapes from feeds;
find the shape and dtype of each variable behind a resource placeholder (a
bare GraphDef does not carry them); choose the default control outputs; turn
captured eager constants into ``Const`` nodes.
"""

from __future__ import annotations

import collections
import difflib
from typing import Any, Mapping, Sequence

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tf_tofu.graph import ingest as ingest_tf, vocabulary
from tf_tofu.graph.ingest import IngestError


def parse_graph_def(graph_def) -> graph_pb2.GraphDef:
  if isinstance(graph_def, graph_pb2.GraphDef):
    return graph_def
  if isinstance(graph_def, (bytes, bytearray)):
    data, where = bytes(graph_def), "the given bytes"
  elif isinstance(graph_def, str):
    try:
      with open(graph_def, "rb") as f:
        data = f.read()
    except OSError as e:
      raise IngestError(f"cannot read GraphDef file {graph_def!r}: {e}") from e
    where = f"file {graph_def!r}"
  else:
    raise IngestError(f"expected a GraphDef, bytes or a file path, got {type(graph_def).__name__}")
  gd = graph_pb2.GraphDef()
  try:
    gd.ParseFromString(data)
    if gd.node or not data:
      return gd
  except Exception:  # protobuf's DecodeError
    pass
  from google.protobuf import text_format
  try:
    gd = graph_pb2.GraphDef()
    text_format.Parse(data.decode("utf-8"), gd)
    return gd
  except Exception as e:
    raise IngestError(f"{where} is not a GraphDef (neither binary nor text protobuf): "
                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def updates_fed_by(gd: graph_pb2.GraphDef, feeds: Sequence[str]) -> list[str]:
  """Ops writing a variable that depend (through data edges) on one of the feeds."""
  users = collections.defaultdict(list)
  for n in gd.node:
    for i in n.input:
      if not i.startswith("^"):
        users[ingest_tf.node_of(i)].append(n.name)
  seen, stack = set(), [ingest_tf.node_of(f) for f in feeds]
  while stack:
    x = stack.pop()
    if x not in seen:
      seen.add(x)
      stack.extend(users[x])
  return [n.name for n in gd.node if n.name in seen and vocabulary.is_update_type(n.op)]


def close_names(name: str, names) -> str:
  return ", ".join(repr(n) for n in difflib.get_close_matches(name, list(names), n=3))


def with_feed_shapes(gd: graph_pb2.GraphDef, shapes: Mapping[str, Any]) -> graph_pb2.GraphDef:
  if not shapes:
    return gd
  out = graph_pb2.GraphDef()
  out.CopyFrom(gd)
  nodes = {n.name: n for n in out.node}
  for t, shape in shapes.items():
    if shape is None:
      continue  # the placeholder keeps its own shape
    node = nodes[ingest_tf.node_of(t)]
    if node.op != "Placeholder":
      raise IngestError(f"feed {t!r} is a {node.op}, not a Placeholder; only placeholders "
                        "take a feed shape")
    if isinstance(shape, tf.TensorSpec):
      if shape.dtype != tf.as_dtype(node.attr["dtype"].type):
        raise IngestError(f"feed {t!r} is {tf.as_dtype(node.attr['dtype'].type).name}, the "
                          f"spec says {shape.dtype.name}")
      shape = shape.shape
    node.attr["shape"].shape.CopyFrom(tf.TensorShape(shape).as_proto())
  return out


def resources_of_graph_def(gd: graph_pb2.GraphDef, given: Mapping[str, tuple],
                            feeds: Sequence[str]) -> dict:
  """Resource placeholders of a GraphDef with their variable's shape and dtype."""
  read_shapes = {}
  for n in gd.node:
    if n.op == "ReadVariableOp" and "_output_shapes" in n.attr and n.input:
      s = n.attr["_output_shapes"].list.shape
      if s and not s[0].unknown_rank and all(d.size >= 0 for d in s[0].dim):
        read_shapes[ingest_tf.node_of(n.input[0])] = (
            tuple(d.size for d in s[0].dim), tf.as_dtype(n.attr["dtype"].type).name)
  feed_ops = {ingest_tf.node_of(f) for f in feeds}
  out = {}
  for n in gd.node:
    if n.op != "Placeholder" or n.attr["dtype"].type != tf.resource.as_datatype_enum:
      continue
    if n.name in feed_ops:
      raise IngestError(f"feed {n.name!r} is a resource; variables are not fed")
    if n.name in given:
      shape, dtype = given[n.name]
      shape, dtype = tuple(shape), tf.as_dtype(dtype).name
    elif "_handle_shapes" in n.attr and n.attr["_handle_shapes"].list.shape:
      s = n.attr["_handle_shapes"].list.shape[0]
      shape = tuple(d.size for d in s.dim)
      dtype = tf.as_dtype(n.attr["_handle_dtypes"].list.type[0]).name
    elif n.name in read_shapes:
      shape, dtype = read_shapes[n.name]
    else:
      raise IngestError(
          f"resource placeholder {n.name!r} (a variable) has no known shape; pass "
          f"variable_shapes={{{n.name!r}: ([...], 'float32')}}, or export the graph with "
          "as_graph_def(add_shapes=True)")
    user = n.attr["_user_specified_name"].s.decode() if "_user_specified_name" in n.attr else ""
    out[n.name] = ingest_tf.Resource(op=n.name, name=user or n.name, shape=shape, dtype=dtype,
                                     trainable=None)
  return out


def freeze_captured_constants(gd, cf, captures) -> graph_pb2.GraphDef:
  """Captured non-resource tensors (eager constants) become Const nodes."""
  out = graph_pb2.GraphDef()
  out.CopyFrom(gd)
  wanted = {t.op.name for t in captures}
  by_internal = {i.op.name: e for e, i in zip(cf.captured_inputs, cf.graph.internal_captures)
                 if i.op.name in wanted}
  for node in out.node:
    if node.name in by_internal and node.op == "Placeholder":
      ext = by_internal[node.name]
      try:
        value = ext.numpy()
      except AttributeError:
        raise IngestError(f"captured tensor {node.name!r} is symbolic and not a variable; "
                          "pass it as an argument instead") from None
      dtype = node.attr["dtype"].type
      node.op = "Const"
      node.attr.clear()
      node.attr["dtype"].type = dtype
      node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
  return out
