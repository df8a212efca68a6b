"""The partitioning view of a training step, read by the search and the rewrite alike.

Built once from a :class:`tf_tofu.graph.TofuGraph`.  Every op falls in one kind:

* ``compute`` - a described op: at each level it picks a strategy (cut one of
  its index variables, or ``replicate``);
* ``single`` - an op with no description (or one that cannot be applied): it
  runs whole on device 0 with its inputs gathered there;
* ``source`` - Const, Placeholder and variable handles: their tensors can be
  produced in any layout for free (constants are built per device, feeds are
  split on the host, variables are created as shards);
* ``read`` / ``update`` - ReadVariableOp, Assign{,Add,Sub}VariableOp, the
  fused ResourceApply* optimizer kernels and ResourceScatter{Add,Sub}: they
  run on the variable's shards, so the inputs that are element-wise with the
  variable (:func:`update_slots`: its slots, the gradient, the value written)
  are tied to the variable's layout and cost nothing; their other inputs
  (scalar hyper-parameters, a scatter's indices and rows) are needed whole on
  every device;
* ``ignored`` - ops with no data outputs that matter for layout (NoOp).

A variable's value is represented by its handle tensor, with the variable's
shape and dtype.  An op that reads a variable through its handle
(ResourceGather) is described as the same op on the value (GatherV2, with a
constant axis 0 that has no tensor in the graph).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from tf_tofu.core.errors import TofuError
from tf_tofu.graph.vocabulary import (IGNORED_OPS, RESOURCE_AS_VALUE, SHARD_SLOTS, SOURCE_OPS,
                                      UPDATE_OPS, VALUE_READ_OPS)
from tf_tofu.opdefs.description import OpContext, TensorInfo
from tf_tofu.opdefs.kernels import context_from_node_def


class UnsupportedVariableOpError(TofuError):
  """A step uses a variable through an op the partitioned variables cannot serve."""


@dataclasses.dataclass(frozen=True)
class STensor:
  name: str
  shape: tuple[int, ...]
  dtype: str
  itemsize: int


@dataclasses.dataclass(frozen=True)
class SOp:
  """One op as the search sees it; ``inputs[i]`` is None for an input it ignores."""

  name: str
  op_type: str
  kind: str
  context: OpContext
  inputs: tuple[Optional[str], ...]
  outputs: tuple[str, ...]
  reason: Optional[str] = None  # why a 'single' op is left whole
  control_inputs: tuple[str, ...] = ()  # ops that must run before this one


@dataclasses.dataclass
class SearchGraph:
  tensors: dict[str, STensor]
  ops: list[SOp]
  variables: dict[str, str]  # handle tensor -> variable name
  var_gradients: dict[str, str]  # handle tensor -> gradient tensor
  forward_op_of: dict[str, str]
  gradient_of: dict[str, str]
  control_outputs: tuple[str, ...] = ()  # ops every step must run (the updates)

  def op(self, name: str) -> SOp:
    return self._by_name[name]

  def __post_init__(self):
    self._by_name = {o.name: o for o in self.ops}


def update_slots(graph: SearchGraph, op: SOp) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """``(on the shards, needed whole)``: an update op's input slots besides the variable.

  A slot listed in ``SHARD_SLOTS`` is on the shards when its tensor has the
  variable's shape (then it is tied to the variable's layout); every other
  connected slot is needed whole on every device.
  """
  var_shape = graph.tensors[op.inputs[0]].shape
  listed = SHARD_SLOTS.get(op.op_type, ())
  shard, whole = [], []
  for i, t in enumerate(op.inputs[1:], 1):
    if t is None:
      continue
    if i in listed and graph.tensors[t].shape == var_shape:
      shard.append(i)
    else:
      whole.append(i)
  return tuple(shard), tuple(whole)


def laid_out_tensors(graph: SearchGraph) -> set[str]:
  """The tensors a plan gives a layout: every variable and every tensor with bytes that
  an op which is not ignored reads or writes."""
  return {t for op in graph.ops if op.kind != "ignored" for t in (*op.inputs, *op.outputs)
          if t and (graph.tensors[t].itemsize > 0 or t in graph.variables)}


def itemsize(dtype: str) -> int:
  if dtype in ("resource", "variant", "string"):
    return 0
  return np.dtype(dtype).itemsize


def _as_value_op(op, ctx: OpContext, describer):
  """ResourceGather(handle, indices) as GatherV2(value, indices, axis=0)."""
  attrs = {"batch_dims": int(ctx.attrs.get("batch_dims", 0)), "Tparams": ctx.attrs.get("dtype"),
           "Tindices": ctx.attrs.get("Tindices", "int32"), "Taxis": "int32"}
  inputs = tuple(ctx.inputs) + (TensorInfo((), "int32", np.array(0, np.int32)),)
  value_ctx = OpContext(name=ctx.name, op_type=RESOURCE_AS_VALUE[op.op_type], attrs=attrs,
                        inputs=inputs, outputs=tuple(ctx.outputs))
  sem, reason = describer(value_ctx)
  return value_ctx, sem, reason


def _refuse_variable_inputs(op, inputs, var_info) -> None:
  """Variables live as per-device shards: an op that takes a variable's handle must be a
  read, an update or a handle gather the rewrite knows; any other is refused here, at
  planning, rather than failing later inside TensorFlow."""
  for t in inputs:
    if t in var_info:
      known = sorted(VALUE_READ_OPS | UPDATE_OPS | set(RESOURCE_AS_VALUE))
      raise UnsupportedVariableOpError(
          f"op {op.name!r} ({op.op_type}) uses variable {var_info[t].name!r} through its "
          f"handle, which tf_tofu cannot partition (variables are sharded; supported: "
          f"{', '.join(known)}); write the update as a whole value instead, e.g. "
          "v.assign(tf.tensor_scatter_nd_update(v, indices, rows)) for v[a:b].assign(rows) or "
          "a scatter update")


def _context(op, graph, tensors: dict[str, STensor], var_info) -> OpContext:
  """The op's context in the view: its description's own when it has one and reads no
  variable handle (a handle stands for the variable's value here), else made anew."""
  if op.semantics is not None and not any(t in var_info for t in op.inputs):
    return op.semantics.op
  infos = [TensorInfo(tensors[t].shape, tensors[t].dtype, graph.tensors[t].value)
           for t in op.inputs]
  outs = [TensorInfo(tensors[o].shape, tensors[o].dtype) for o in op.outputs]
  # A Const's value attribute is the array ingestion made its output's value from.
  value = graph.tensors[op.outputs[0]].value if op.op_type == "Const" else None
  return context_from_node_def(op.node_def, infos, outs,
                               {} if value is None else {"value": value})


def _split_identity_n(op, tensors: dict[str, STensor], describer) -> list[SOp]:
  """``IdentityN`` as one ``Identity`` per tensor it passes on.

  Keras 3 optimizers pass every gradient through one ``IdentityN``; as one op
  it would need a single strategy for tensors of unrelated shapes (left whole,
  it gathered every gradient on one device).  Each part ``<op>/part<i>``
  (``Identity``, element-wise) takes its own strategy and keeps the original
  output tensor ``<op>:<i>``; an ignored op under the original name, with the
  parts as its control inputs, stands for the whole where other ops order
  themselves after it.
  """
  parts = []
  for i, (t_in, t_out) in enumerate(zip(op.inputs, op.outputs)):
    st = tensors[t_in]
    ctx = OpContext(name=f"{op.name}/part{i}", op_type="Identity", attrs={"T": st.dtype},
                    inputs=(TensorInfo(st.shape, st.dtype),),
                    outputs=(TensorInfo(tensors[t_out].shape, tensors[t_out].dtype),))
    sem, reason = describer(ctx)
    kind = "compute" if sem is not None else "single"
    parts.append(SOp(ctx.name, "Identity", kind, ctx, (t_in,), (t_out,),
                     reason if kind == "single" else None, tuple(op.control_inputs)))
  whole = OpContext(name=op.name, op_type="NoOp", attrs={}, inputs=(), outputs=())
  parts.append(SOp(op.name, "NoOp", "ignored", whole, (), (), None,
                   tuple(p.name for p in parts)))
  return parts


def from_tofu_graph(graph, describer=None) -> SearchGraph:
  """Builds the search view of an ingested :class:`TofuGraph`."""
  from tf_tofu.opdefs.registry import Describer
  describer = describer or Describer()
  var_info = {v.handle: v for v in graph.variables}
  tensors: dict[str, STensor] = {}
  for name, t in graph.tensors.items():
    if name in var_info:
      v = var_info[name]
      tensors[name] = STensor(name, tuple(v.shape), v.dtype, itemsize(v.dtype))
    else:
      tensors[name] = STensor(name, tuple(t.shape), t.dtype, itemsize(t.dtype))
  # A resource Identity (a SavedModel signature's inlined function passes each variable
  # through one) is the variable itself: its readers read the variable.
  alias: dict[str, str] = {}
  for op in graph.ops.values():
    if (op.op_type == "Identity" and len(op.inputs) == 1 and len(op.outputs) == 1
        and graph.tensors[op.outputs[0]].dtype == "resource"):
      src = alias.get(op.inputs[0], op.inputs[0])
      if src in var_info:
        alias[op.outputs[0]] = src
  ops = []
  for op in graph.ops.values():
    if op.outputs and op.outputs[0] in alias:
      ops.append(SOp(op.name, op.op_type, "ignored", context_from_node_def(
          op.node_def, [TensorInfo((), "resource")], [TensorInfo((), "resource")]),
          (), tuple(op.outputs), None, tuple(op.control_inputs)))
      continue
    if any(t in alias for t in op.inputs):
      op = dataclasses.replace(op, inputs=tuple(alias.get(t, t) for t in op.inputs))
    if op.op_type == "IdentityN" and op.inputs:
      ops.extend(_split_identity_n(op, tensors, describer))
      continue
    ctx = _context(op, graph, tensors, var_info)
    inputs = tuple(op.inputs)
    semantics = op.semantics
    if semantics is not None and ctx is semantics.op:
      describer.adopt(semantics)  # ingestion's description of this very context
    reason = op.opaque_reason
    if op.op_type in RESOURCE_AS_VALUE and op.inputs and op.inputs[0] in var_info:
      ctx, semantics, reason = _as_value_op(op, ctx, describer)
      inputs = inputs + (None,)
    if op.op_type in SOURCE_OPS:
      kind = "source"
    elif op.op_type in VALUE_READ_OPS:
      kind = "read"
    elif op.op_type in UPDATE_OPS:
      kind = "update"
    elif op.op_type in IGNORED_OPS or not (op.outputs or op.inputs):
      kind = "ignored"
    elif semantics is not None:
      kind = "compute"
    else:
      kind = "single"
    if kind in ("single", "compute") and op.op_type not in RESOURCE_AS_VALUE:
      _refuse_variable_inputs(op, inputs, var_info)
    ops.append(SOp(op.name, op.op_type, kind, ctx, inputs, tuple(op.outputs),
                   reason if kind == "single" else None, tuple(op.control_inputs)))
  return SearchGraph(tensors=tensors, ops=ops,
                     variables={v.handle: v.name for v in graph.variables},
                     var_gradients={v.handle: v.gradient for v in graph.variables if v.gradient},
                     forward_op_of=dict(graph.forward_op_of),
                     gradient_of=dict(graph.gradient_of),
                     control_outputs=tuple(graph.control_outputs))
