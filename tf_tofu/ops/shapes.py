"""Static shapes of every tensor of a GraphDef, and ``_output_shapes`` like ``add_shapes=True``.

The GraphDef is imported into a scratch ``tf.Graph`` (nothing runs) and
TensorFlow's shape functions give every output's shape.  A resource
placeholder carries its variable's shape in ``_handle_shapes`` /
``_handle_dtypes`` (as the rewrite writes them), which the importer does not
read; it is mapped to a ``VarHandleOp`` of that shape and dtype, so the
``ReadVariableOp`` and ``ResourceGather`` nodes on it get static shapes too.
A node's own ``_output_shapes`` (fully known) takes precedence.
``CollectiveGatherV2``'s shape function leaves dim 0 unknown (the group size
is a tensor); with a constant group size it is the input's dim 0 times the
group size.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2


def handle_shape(node) -> Optional[tuple[tuple[int, ...], str]]:
  """``(shape, dtype)`` of the variable behind a resource placeholder, from its attrs."""
  if node.op != "Placeholder" or "_handle_shapes" not in node.attr:
    return None
  shapes = node.attr["_handle_shapes"].list.shape
  dtypes = node.attr["_handle_dtypes"].list.type
  if len(shapes) != 1 or len(dtypes) != 1 or shapes[0].unknown_rank:
    return None
  return tuple(d.size for d in shapes[0].dim), tf.as_dtype(dtypes[0]).name


class StaticShapes:
  """Shape and dtype of every output of every node of a GraphDef."""

  def __init__(self, graph_def: graph_pb2.GraphDef):
    self._declared = {}
    input_map = {}
    self._graph = tf.Graph()
    with self._graph.as_default():
      for n in graph_def.node:
        if "_output_shapes" in n.attr:
          for i, s in enumerate(n.attr["_output_shapes"].list.shape):
            if not s.unknown_rank and all(d.size >= 0 for d in s.dim):
              self._declared[(n.name, i)] = tuple(d.size for d in s.dim)
        var = handle_shape(n)
        if var is not None:
          with tf.device(None):
            input_map[f"{n.name}:0"] = tf.raw_ops.VarHandleOp(
                dtype=var[1], shape=var[0], shared_name=f"tofu_shapes/{n.name}",
                name=f"tofu_shapes/{n.name}")
      tf.graph_util.import_graph_def(graph_def, input_map=input_map, name="")

  def _tensor(self, node: str, index: int) -> tf.Tensor:
    return self._graph.get_operation_by_name(node).outputs[index]

  def dtype(self, node: str, index: int) -> tf.DType:
    return self._tensor(node, index).dtype

  def tf_shape(self, node: str, index: int) -> tf.TensorShape:
    """The shape as TensorFlow knows it (maybe partly unknown)."""
    if (node, index) in self._declared:
      return tf.TensorShape(self._declared[(node, index)])
    t = self._tensor(node, index)
    if t.op.type == "CollectiveGatherV2" and not t.shape.is_fully_defined():
      x, size = t.op.inputs[0], t.op.inputs[1]
      inner = self.tf_shape(x.op.name, x.value_index)
      if size.op.type == "Const" and inner.rank and inner[0] is not None:
        n = int(tf.make_ndarray(size.op.get_attr("value")))
        return tf.TensorShape([inner[0] * n] + inner.as_list()[1:])
    return t.shape

  def shape(self, node: str, index: int) -> Optional[tuple[int, ...]]:
    """The static shape, or None where TensorFlow cannot tell."""
    s = self.tf_shape(node, index)
    return tuple(s.as_list()) if s.is_fully_defined() else None

  def num_outputs(self, node: str) -> int:
    return len(self._graph.get_operation_by_name(node).outputs)

  def bytes(self, node: str, index: int) -> int:
    """Size in bytes (0 for resource, variant and string tensors); raises if unknown."""
    dtype = self.dtype(node, index)
    if dtype in (tf.resource, tf.variant, tf.string):
      return 0
    shape = self.shape(node, index)
    if shape is None:
      raise ValueError(f"tensor {node}:{index} has no static shape "
                       f"({self.tf_shape(node, index)}); cannot size it")
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype.as_numpy_dtype).itemsize


def with_output_shapes(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
  """A copy with ``_output_shapes`` on every node (unknown dims stay -1)."""
  shapes = StaticShapes(graph_def)
  out = graph_pb2.GraphDef()
  out.CopyFrom(graph_def)
  for n in out.node:
    attr = n.attr["_output_shapes"]
    del attr.list.shape[:]
    for i in range(shapes.num_outputs(n.name)):
      attr.list.shape.add().CopyFrom(shapes.tf_shape(n.name, i).as_proto())
  return out
