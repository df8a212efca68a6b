"""The search's view of a training-step graph: tensors, ops by kind, and tied groups.

Built once from a :class:`tf_tofu.graph.TofuGraph`.  Every op falls in one kind:

* ``compute`` - a described op: at each level it picks a strategy (cut one of
  its index variables, or ``replicate``);
* ``single`` - an op with no description (or one that cannot be applied): it
  runs whole on device 0 with its inputs gathered there;
* ``source`` - Const, Placeholder and variable handles: their tensors can be
  produced in any layout for free (constants are built per device, feeds are
  split on the host, variables are created as shards);
* ``read`` / ``update`` - ReadVariableOp and Assign{,Add,Sub}VariableOp: they
  run on the variable's shards, so their value tensors are tied to the
  variable's layout and cost nothing;
* ``ignored`` - ops with no data outputs that matter for layout (NoOp).

A variable's value is represented by its handle tensor, with the variable's
shape and dtype.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from tf_tofu.opdefs.description import OpContext, TensorInfo
from tf_tofu.opdefs.kernels import context_from_node_def

SOURCE_OPS = frozenset({"Const", "Placeholder", "PlaceholderWithDefault", "VarHandleOp", "_Arg"})
READ_OPS = frozenset({"ReadVariableOp"})
UPDATE_OPS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})
IGNORED_OPS = frozenset({"NoOp"})


@dataclasses.dataclass(frozen=True)
class STensor:
  name: str
  shape: tuple[int, ...]
  dtype: str
  itemsize: int

  @property
  def bytes(self) -> int:
    n = 1
    for d in self.shape:
      n *= d
    return n * self.itemsize


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


@dataclasses.dataclass
class SearchGraph:
  tensors: dict[str, STensor]
  ops: list[SOp]
  variables: dict[str, str]  # handle tensor -> variable name
  var_gradients: dict[str, str]  # handle tensor -> gradient tensor
  forward_op_of: dict[str, str]
  gradient_of: dict[str, str]

  def op(self, name: str) -> SOp:
    return self._by_name[name]

  def __post_init__(self):
    self._by_name = {o.name: o for o in self.ops}


def itemsize(dtype: str) -> int:
  if dtype in ("resource", "variant", "string"):
    return 0
  return np.dtype(dtype).itemsize


def from_tofu_graph(graph) -> SearchGraph:
  """Builds the search view of an ingested :class:`TofuGraph`."""
  var_info = {v.handle: v for v in graph.variables}
  tensors: dict[str, STensor] = {}
  for name, t in graph.tensors.items():
    if name in var_info:
      v = var_info[name]
      tensors[name] = STensor(name, tuple(v.shape), v.dtype, itemsize(v.dtype))
    else:
      tensors[name] = STensor(name, tuple(t.shape), t.dtype, itemsize(t.dtype))
  ops = []
  for op in graph.ops.values():
    infos = []
    for tname in op.inputs:
      t = graph.tensors[tname]
      st = tensors[tname]
      infos.append(TensorInfo(st.shape, st.dtype, t.value))
    outs = [TensorInfo(tensors[o].shape, tensors[o].dtype) for o in op.outputs]
    ctx = context_from_node_def(op.node_def, infos, outs)
    if op.op_type in SOURCE_OPS:
      kind = "source"
    elif op.op_type in READ_OPS:
      kind = "read"
    elif op.op_type in UPDATE_OPS:
      kind = "update"
    elif op.op_type in IGNORED_OPS or not (op.outputs or op.inputs):
      kind = "ignored"
    elif op.semantics is not None:
      kind = "compute"
    else:
      kind = "single"
    ops.append(SOp(op.name, op.op_type, kind, ctx, tuple(op.inputs), tuple(op.outputs),
                   op.opaque_reason if kind == "single" else None))
  return SearchGraph(tensors=tensors, ops=ops,
                     variables={v.handle: v.name for v in graph.variables},
                     var_gradients={v.handle: v.gradient for v in graph.variables if v.gradient},
                     forward_op_of=dict(graph.forward_op_of),
                     gradient_of=dict(graph.gradient_of))
