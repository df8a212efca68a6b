"""Static per-device peak memory of a partitioned GraphDef: liveness over each device's schedule.

The liveness rules (persistent variables and constants, buffers from their
producer's step to their last reader on the device, received buffers on the
receiver from the send, aliasing ops allocating nothing) and their core
(:class:`Step`, :class:`MemoryEstimate`, :func:`peak_memory`,
:func:`tofu_graph_peak`) live in :mod:`tf_tofu.layout.liveness` and are
re-exported here; :mod:`tf_tofu.layout.memory` applies them to a plan before
any rewrite.  This
module applies them to a GraphDef: its nodes in node order (the partitioned
graph's own order, which its per-device control chain enforces; the original
graph's op order), each buffer sized by TensorFlow's static shape inference.

The *ideal* per-device footprint of a partition across k devices is the
single-device peak over k; ``MemoryEstimate.ratio`` is the worst device
against it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tf_tofu.layout.liveness import (ALIAS_OPS, PERSISTENT_OPS, MemoryEstimate, Step, peak_memory,
                                     tofu_graph_peak)
from tf_tofu.ops import shapes as shapes_lib


def graph_def_schedule(graph_def: graph_pb2.GraphDef, shapes=None,
                       default_device: str = "") -> tuple[list[Step], dict[str, int]]:
  """The schedule of a GraphDef in node order, with its persistent bytes per device.

  ``shapes`` is a :class:`tf_tofu.ops.shapes.StaticShapes` of the graph (made
  when not given); a node without a device runs on ``default_device``.
  Persistent: each variable behind a resource placeholder or ``VarHandleOp``,
  and each constant.  An output TensorFlow cannot size statically (a fused
  batch norm's reserve space) counts 0.
  """
  shapes = shapes or shapes_lib.StaticShapes(graph_def)
  schedule, persistent = [], {}
  for n in graph_def.node:
    device = n.device or default_device
    outs = tuple(shapes.bytes(n.name, i) if shapes.shape(n.name, i) is not None else 0
                 for i in range(shapes.num_outputs(n.name)))
    schedule.append(Step(n.name, device, n.op,
                         tuple(i if ":" in i else i + ":0" for i in n.input
                               if not i.startswith("^")), outs))
    var = shapes_lib.handle_shape(n)
    if n.op == "VarHandleOp":
      var = (tuple(d.size for d in n.attr["shape"].shape.dim),
             tf.as_dtype(n.attr["dtype"].type).name)
    extra = sum(outs) if n.op == "Const" else 0
    if var is not None:
      extra = int(np.prod(var[0], dtype=np.int64)) * tf.as_dtype(var[1]).size
    persistent[device] = persistent.get(device, 0) + extra
  return schedule, persistent


def graph_peak(graph_def: graph_pb2.GraphDef, shapes=None,
               default_device: str = "/device:CPU:0") -> MemoryEstimate:
  """Peak memory per device of a GraphDef run in its node order."""
  schedule, persistent = graph_def_schedule(graph_def, shapes, default_device)
  return peak_memory(schedule, persistent)


def partitioned_peak(partitioned, shapes=None) -> MemoryEstimate:
  """Peak per device of a :class:`tf_tofu.rewrite.Partitioned` graph, feeds included
  (the host puts each device's feed slice there before the step)."""
  return graph_peak(partitioned.graph_def, shapes)


def plan_memory(graph, partitioned, shapes=None) -> dict:
  """The Plan report's memory entry for a partition of ``graph`` (a TofuGraph)."""
  return partitioned_peak(partitioned, shapes).summary(tofu_graph_peak(graph))


__all__ = ["ALIAS_OPS", "PERSISTENT_OPS", "MemoryEstimate", "Step", "graph_def_schedule",
           "graph_peak", "partitioned_peak", "peak_memory", "plan_memory", "tofu_graph_peak"]
