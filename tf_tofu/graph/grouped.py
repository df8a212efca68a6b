"""Grouped convolutions with one input channel per group, as depthwise convolutions.

Keras builds a depthwise convolution as ``Conv2D(groups=C)`` (ConvNeXt does)
and, on the TensorFlow backend, compiles it with XLA: TensorFlow has no CPU
kernel for the gradients of a grouped convolution.  With ``C`` input channels,
``groups = C`` and ``F = C m`` filters, the filter has shape ``[h, w, 1, C m]``
and output channel ``o = c m + j`` reads input channel ``c`` only::

    out[b, y, x, c m + j] = Sum_{dy, dx} in[b, y + dy, x + dx, c] W[dy, dx, 0, c m + j]

which is ``DepthwiseConv2dNative`` with the filter reshaped to ``[h, w, C, m]``
(row-major: ``W[dy, dx, 0, c m + j] = W'[dy, dx, c, j]``).  So, on NHWC graphs:

* ``Conv2D(x, W)`` -> ``DepthwiseConv2dNative(x, reshape(W, [h, w, C, m]))``;
* ``Conv2DBackpropInput(sizes, W, dy)`` -> ``DepthwiseConv2dNativeBackpropInput(
  sizes, reshape(W, [h, w, C, m]), dy)``;
* ``Conv2DBackpropFilter(x, sizes, dy)`` -> ``reshape(DepthwiseConv2dNativeBackpropFilter(
  x, [h, w, C, m], dy), [h, w, 1, C m])``.

Each replacement keeps the original node's name for its output, so its
readers are unchanged; strides, padding, explicit paddings and dilations
carry over.  Other grouped convolutions (more than one channel per group) are
left as they are.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
from tensorflow.core.framework import graph_pb2, node_def_pb2
from tensorflow.python.framework import tensor_util

GROUPED_OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
_COPIED_ATTRS = ("T", "strides", "padding", "explicit_paddings", "data_format", "dilations")


def _shape(shapes: Mapping[str, Optional[tuple]], ref: str) -> Optional[tuple]:
  name = ref if ":" in ref else ref + ":0"
  return shapes.get(name)


def depthwise_geometry(node: node_def_pb2.NodeDef, shapes) -> Optional[tuple[int, ...]]:
  """``(h, w, C, m)`` when ``node`` is a grouped convolution with one channel per group."""
  if node.op not in GROUPED_OPS:
    return None
  if "data_format" in node.attr and node.attr["data_format"].s not in (b"", b"NHWC"):
    return None
  if node.op == "Conv2DBackpropFilter":
    channels, filt = _shape(shapes, node.input[0]), _shape(shapes, node.name)
  else:
    filt = _shape(shapes, node.input[1])
    channels = _shape(shapes, node.input[0] if node.op == "Conv2D" else node.name)
  if not channels or not filt or len(filt) != 4 or None in filt or channels[-1] is None:
    return None
  h, w, depth, filters = filt
  c = channels[-1]
  if depth != 1 or c <= 1 or filters % c:
    return None
  return h, w, c, filters // c


def _const(name: str, value, device: str) -> node_def_pb2.NodeDef:
  node = node_def_pb2.NodeDef(name=name, op="Const", device=device)
  node.attr["dtype"].type = 3  # DT_INT32
  node.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(np.asarray(value, np.int32)))
  return node


def _reshape(name: str, x: str, shape, like: node_def_pb2.NodeDef) -> list[node_def_pb2.NodeDef]:
  shape_node = _const(f"{name}/shape", shape, like.device)
  node = node_def_pb2.NodeDef(name=name, op="Reshape", input=[x, shape_node.name],
                              device=like.device)
  node.attr["T"].CopyFrom(like.attr["T"])
  node.attr["Tshape"].type = 3  # DT_INT32
  return [shape_node, node]


def _depthwise(name: str, op: str, inputs, like: node_def_pb2.NodeDef) -> node_def_pb2.NodeDef:
  node = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs), device=like.device)
  for key in _COPIED_ATTRS:
    if key in like.attr:
      node.attr[key].CopyFrom(like.attr[key])
  return node


def _replacement(node: node_def_pb2.NodeDef, geometry) -> list[node_def_pb2.NodeDef]:
  h, w, c, m = geometry
  data = [i for i in node.input if not i.startswith("^")]
  controls = [i for i in node.input if i.startswith("^")]
  if node.op == "Conv2DBackpropFilter":
    x, _, dy = data
    sizes = _const(f"{node.name}/tofu_depthwise/filter_sizes", [h, w, c, m], node.device)
    inner = _depthwise(f"{node.name}/tofu_depthwise", "DepthwiseConv2dNativeBackpropFilter",
                       [x, sizes.name, dy] + controls, node)
    return [sizes, inner] + _reshape(node.name, inner.name, [h, w, 1, c * m], node)
  filt = _reshape(f"{node.name}/tofu_depthwise_filter", data[1], [h, w, c, m], node)
  if node.op == "Conv2D":
    op, inputs = "DepthwiseConv2dNative", [data[0], filt[-1].name]
  else:
    op, inputs = "DepthwiseConv2dNativeBackpropInput", [data[0], filt[-1].name, data[2]]
  return filt + [_depthwise(node.name, op, inputs + controls, node)]


def as_depthwise(graph_def: graph_pb2.GraphDef, shapes: Mapping[str, Optional[tuple]]
                 ) -> tuple[graph_pb2.GraphDef, int]:
  """``graph_def`` with every depthwise-like grouped convolution replaced (module docstring),
  and how many were."""
  geometries = [depthwise_geometry(node, shapes) for node in graph_def.node]
  count = sum(g is not None for g in geometries)
  if not count:
    return graph_def, 0
  out = graph_pb2.GraphDef()
  out.CopyFrom(graph_def)
  del out.node[:]
  for node, geometry in zip(graph_def.node, geometries):
    if geometry is None:
      out.node.add().CopyFrom(node)
    else:
      out.node.extend(_replacement(node, geometry))
  return out, count


__all__ = ["GROUPED_OPS", "as_depthwise", "depthwise_geometry"]
