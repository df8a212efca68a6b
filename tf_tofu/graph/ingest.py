"""From a traced function or a GraphDef to one flat GraphDef with every shape known.

The pipeline (docs/design.md section 3):

1. refuse control flow (``While``/``If``/``Case``, v1 ``Switch``/``Merge``/...)
   anywhere in the graph or its function library, naming the op;
2. strip ``api_implements``, ``_noinline`` and ``_XlaMustCompile`` from library
   functions and calls, then inline every function call with Grappler's
   function optimizer alone (``optimizers=["function"]``,
   ``min_graph_nodes=-1``), keeping the fetches and control outputs;
3. infer static shapes by importing the graph with each variable's handle
   carrying its shape and dtype (a bare import loses them), and rewrite the
   grouped convolutions that are depthwise ones (:mod:`tf_tofu.graph.grouped`);
4. replace every ``Shape``/``ShapeN``/``Size``/``Rank`` of a fully known tensor by
   a ``Const`` (Grappler cannot see variable shapes, so it leaves the ShapeN
   feeding convolution gradients), then run Grappler's ``constfold`` and
   ``shape`` optimizers so that the shape arithmetic of gradients
   (``BroadcastGradientArgs``, ``Prod``, ``FloorDiv``, ``Fill`` dims) becomes ``Const``;
   a constant subgraph whose output exceeds :data:`FOLD_LIMIT_BYTES` (a causal mask
   broadcast to batch x heads x seq x seq) stays computed (:func:`fold_constants`);
5. infer shapes again on the result and refuse any tensor whose shape is not
   fully known, naming it.

Nothing here runs the graph: variables may be uninitialised handles of a graph
that is never executed, so a model of any size is ingested without its weights.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2
from tensorflow.python.framework import cpp_shape_inference_pb2, op_def_registry, tensor_util
from tensorflow.python.grappler import tf_optimizer
from tensorflow.python.ops import handle_data_util
from tf_tofu.core.errors import TofuError
from tf_tofu.graph import grouped

CONTROL_FLOW_OPS = frozenset({
    "While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase", "Switch",
    "RefSwitch", "_SwitchN", "Merge", "RefMerge", "Enter", "RefEnter", "Exit", "RefExit",
    "NextIteration", "RefNextIteration", "LoopCond", "ControlTrigger"})
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
VARIABLE_OPS = frozenset({"VarHandleOp", "_VarHandlesOp"})
# Outputs whose shape TF's shape functions leave open because it depends on the
# kernel: the workspace of fused batch norm is a scalar on the CPU (on a GPU it
# is a cuDNN buffer); nothing but the matching gradient op reads it.
IMPLEMENTATION_DEFINED = {("FusedBatchNormV3", 5): (), ("_FusedBatchNormEx", 5): ()}


class IngestError(TofuError):
  """A graph that cannot be ingested: the message names the op or tensor and the fix."""


@dataclasses.dataclass(frozen=True)
class Resource:
  """A variable as the graph sees it: a DT_RESOURCE placeholder or a VarHandleOp."""

  op: str                      # the placeholder or VarHandleOp node name
  name: str                    # user-visible variable name
  shape: tuple[int, ...]
  dtype: str
  trainable: Optional[bool]    # None when the graph does not say
  live: Any = None             # the live handle or tf.Variable (from a trace)


@dataclasses.dataclass
class Flat:
  """A flattened, shape-folded GraphDef with the static facts of every tensor."""

  graph_def: graph_pb2.GraphDef
  shapes: dict                 # tensor name -> tuple of ints
  dtypes: dict                 # tensor name -> numpy-style dtype name or "resource"
  feeds: tuple[str, ...]
  fetches: tuple[str, ...]
  control_outputs: tuple[str, ...]
  resources: dict              # op name -> Resource
  timings: dict


def node_of(tensor_or_input: str) -> str:
  """``"^a"``, ``"a:1"``, ``"a"`` -> ``"a"``."""
  name = tensor_or_input[1:] if tensor_or_input.startswith("^") else tensor_or_input
  return name.split(":")[0] if ":" in name and name.rsplit(":", 1)[1].isdigit() else name


def tensor_name(name: str) -> str:
  """``"a"`` -> ``"a:0"``; ``"a:1"`` stays."""
  return name if (":" in name and name.rsplit(":", 1)[1].isdigit()) else f"{name}:0"


def dtype_name(dt: tf.DType) -> str:
  return "resource" if dt == tf.resource else ("variant" if dt == tf.variant else dt.name)


# ----------------------------------------------------------------------------- checks


def check_well_formed(graph_def: graph_pb2.GraphDef) -> None:
  """Raises :class:`IngestError` for an empty graph, an op type this TensorFlow does not
  register, an input naming no node, or a cycle (naming the nodes on it)."""
  import networkx as nx
  if not graph_def.node:
    raise IngestError("the GraphDef has no nodes: nothing to partition (was the right file "
                      "or signature given?)")
  functions = {f.signature.name for f in graph_def.library.function}
  names = {n.name for n in graph_def.node}
  g = nx.DiGraph()
  for n in graph_def.node:
    if n.op not in functions and op_def_registry.get(n.op) is None:
      raise IngestError(f"op {n.name!r} has type {n.op!r}, which this TensorFlow does not "
                        "register; load the library that defines it (tf.load_op_library) "
                        "before ingesting, or export the graph without it")
    g.add_node(n.name)
    for i in n.input:
      src = node_of(i.lstrip("^"))
      if src not in names:
        raise IngestError(f"op {n.name!r} ({n.op}) reads {i!r}, which names no node of the "
                          "graph; the GraphDef is incomplete")
      g.add_edge(src, n.name)
  try:
    cycle = nx.find_cycle(g)
  except nx.NetworkXNoCycle:
    return
  ring = [a for a, _ in cycle]
  raise IngestError(f"the graph has a cycle through {len(ring)} nodes: "
                    f"{' -> '.join(ring[:8])}{' -> ...' if len(ring) > 8 else ''} -> {ring[0]}; "
                    "a dataflow graph must be acyclic (loops must be unrolled)")


def check_control_flow(graph_def: graph_pb2.GraphDef) -> None:
  """Raises :class:`IngestError` naming the first control-flow op in the graph or library."""
  places = [("the graph", graph_def.node)]
  places += [(f"function {f.signature.name!r}", f.node_def) for f in graph_def.library.function]
  for where, nodes in places:
    for node in nodes:
      if node.op in CONTROL_FLOW_OPS:
        kind = ("a loop" if node.op in ("While", "StatelessWhile", "Enter", "Exit",
                                        "NextIteration", "LoopCond") else "a conditional")
        hint = ("unroll the loop (a Python for-loop over a static count, or "
                "keras.layers.LSTM(..., unroll=True)) and trace again"
                if kind == "a loop" else
                "compute both branches and select with tf.where, or decide the condition in "
                "Python before tracing")
        raise IngestError(f"op {node.name!r} ({node.op}) in {where} is {kind}: tf_tofu "
                          f"partitions straight-line graphs only; {hint}")


def strip_api_implements(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
  """A copy whose functions and calls have none of the attributes that block inlining.

  ``api_implements`` and ``_noinline`` on library functions; ``_XlaMustCompile``
  on functions and on the call ops of the graph and of every function (Keras
  compiles a grouped convolution with XLA on the TensorFlow backend): the
  partitioned graph runs its ops on their devices, it is not compiled.
  """
  out = graph_pb2.GraphDef()
  out.CopyFrom(graph_def)
  calls = [n for n in out.node if n.op in CALL_OPS]
  for f in out.library.function:
    for key in ("api_implements", "_noinline", "_XlaMustCompile"):
      if key in f.attr:
        del f.attr[key]
    calls += [n for n in f.node_def if n.op in CALL_OPS]
  for node in calls:
    if "_XlaMustCompile" in node.attr:
      del node.attr["_XlaMustCompile"]
  return out


# ----------------------------------------------------------------------------- grappler


def run_grappler(graph_def: graph_pb2.GraphDef, keep: Sequence[str],
                 optimizers: Sequence[str]) -> graph_pb2.GraphDef:
  """One Grappler pass with only ``optimizers``, preserving the ``keep`` nodes."""
  meta = meta_graph_pb2.MetaGraphDef()
  meta.graph_def.CopyFrom(graph_def)
  collection = meta_graph_pb2.CollectionDef()
  collection.node_list.value.extend(sorted(set(keep)))
  meta.collection_def["train_op"].CopyFrom(collection)
  config = config_pb2.ConfigProto()
  rewrite = config.graph_options.rewrite_options
  rewrite.optimizers.extend(optimizers)
  rewrite.min_graph_nodes = -1
  rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
  return tf_optimizer.OptimizeGraph(config, meta, verbose=False)


def check_inlined(graph_def: graph_pb2.GraphDef) -> None:
  functions = {f.signature.name for f in graph_def.library.function}
  for node in graph_def.node:
    if node.op in CALL_OPS or node.op in functions:
      raise IngestError(f"op {node.name!r} ({node.op}) is a function call that Grappler could "
                        "not inline; mark the function inlinable (no _noinline / "
                        "api_implements attributes) or trace its body directly")


# ----------------------------------------------------------------------------- shapes


def _handle_data(shape: Sequence[int], dtype: str):
  hd = cpp_shape_inference_pb2.CppShapeInferenceResult.HandleData()
  hd.is_set = True
  st = hd.shape_and_type.add()
  st.dtype = tf.as_dtype(dtype).as_datatype_enum
  st.shape.CopyFrom(tf.TensorShape(list(shape)).as_proto())
  return hd


def infer_shapes(graph_def: graph_pb2.GraphDef, resources: Mapping[str, Resource]
                 ) -> tuple[dict, dict]:
  """Static shape (tuple, None dims allowed, or None for unknown rank) and dtype per tensor.

  Imports the graph into a scratch ``tf.Graph`` (never run) in which each
  resource placeholder is replaced by one whose handle carries the variable's
  shape and dtype, so that ``ReadVariableOp`` and the ops after it get shapes.
  """
  graph = tf.Graph()
  prefix = "tofu_import"
  with graph.as_default():
    input_map = {}
    for i, res in enumerate(sorted(resources.values(), key=lambda r: r.op)):
      ph = tf.raw_ops.Placeholder(dtype=tf.resource, shape=[], name=f"tofu_handle_{i}")
      handle_data_util.set_handle_data(ph, _handle_data(res.shape, res.dtype))
      input_map[f"{res.op}:0"] = ph
    placeholders = {n.name for n in graph_def.node if n.op == "Placeholder"}
    input_map = {k: v for k, v in input_map.items() if node_of(k) in placeholders}
    try:
      tf.graph_util.import_graph_def(graph_def, input_map=input_map, name=prefix)
    except (ValueError, tf.errors.InvalidArgumentError) as e:
      raise IngestError(f"the graph does not import into TensorFlow: {e}") from e
  shapes, dtypes = {}, {}
  cut = len(prefix) + 1
  for op in graph.get_operations():
    if not op.name.startswith(prefix + "/"):
      continue
    name = op.name[cut:]
    for i, t in enumerate(op.outputs):
      key = f"{name}:{i}"
      dims = t.shape.as_list() if t.shape.rank is not None else None
      if not _known(dims) and (op.type, i) in IMPLEMENTATION_DEFINED:
        dims = list(IMPLEMENTATION_DEFINED[(op.type, i)])
      shapes[key] = tuple(dims) if dims is not None else None
      dtypes[key] = dtype_name(t.dtype)
  for res in resources.values():
    if f"{res.op}:0" in shapes:  # a handle is a scalar, whatever its placeholder's shape attr says
      shapes[f"{res.op}:0"], dtypes[f"{res.op}:0"] = (), "resource"
  return shapes, dtypes


def _known(shape) -> bool:
  return shape is not None and all(d is not None for d in shape)


def materialize_shapes(graph_def: graph_pb2.GraphDef, shapes: Mapping[str, Any]
                       ) -> tuple[graph_pb2.GraphDef, int]:
  """Replaces ``Shape``/``ShapeN``/``Size``/``Rank`` of fully known tensors by ``Const``s.

  Returns the new GraphDef and how many outputs became constants.
  """
  out = graph_pb2.GraphDef()
  out.versions.CopyFrom(graph_def.versions)
  out.library.CopyFrom(graph_def.library)
  rename: dict[str, str] = {}
  folded = 0
  kept = []
  for node in graph_def.node:
    if node.op not in SHAPE_OPS:
      kept.append(node)
      continue
    data_inputs = [i for i in node.input if not i.startswith("^")]
    controls = [i for i in node.input if i.startswith("^")]
    in_shapes = [shapes.get(tensor_name(i)) for i in data_inputs]
    out_type = node.attr["out_type"].type if "out_type" in node.attr else types_pb2.DT_INT32
    np_type = tf.as_dtype(out_type).as_numpy_dtype

    def const_node(name, value, dtype_enum=out_type):
      c = node_def_pb2.NodeDef(name=name, op="Const")
      c.input.extend(controls)
      c.attr["dtype"].type = dtype_enum
      c.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(value))
      if node.device:
        c.device = node.device
      return c

    if node.op == "ShapeN":
      if not all(_known(s) for s in in_shapes):
        kept.append(node)
        continue
      for i, s in enumerate(in_shapes):
        c = const_node(f"{node.name}/tofu_shape_{i}", np.asarray(s, np_type))
        kept.append(c)
        rename[f"{node.name}:{i}"] = c.name
      rename[f"^{node.name}"] = f"^{node.name}/tofu_shape_0"
      folded += len(in_shapes)
      continue
    s = in_shapes[0] if in_shapes else None
    if node.op == "Rank":
      if s is None:
        kept.append(node)
        continue
      value, enum = np.asarray(len(s), np.int32), types_pb2.DT_INT32
    else:
      if not _known(s):
        kept.append(node)
        continue
      value = np.asarray(s if node.op == "Shape" else int(np.prod(s, dtype=np.int64)), np_type)
      enum = out_type
    kept.append(const_node(node.name, value, enum))
    folded += 1
  for node in kept:
    new = out.node.add()
    new.CopyFrom(node)
    if rename:
      for k, inp in enumerate(new.input):
        key = inp if inp.startswith("^") else tensor_name(inp)
        if key in rename:
          new.input[k] = rename[key]
  return out, folded


# ----------------------------------------------------------------------------- pipeline

# The largest output constant folding may turn into a ``Const`` (TensorFlow's own limit,
# Grappler's ``kMaxConstantSize``).  A larger one (a causal mask broadcast to batch x
# heads x seq x seq, 32 MiB per layer in a Keras Transformer) stays computed: as a
# constant it would be stored in the graph, converted whenever the graph is read, and
# held on every device for the whole run.
FOLD_LIMIT_BYTES = 10 * 1024 * 1024


def fold_constants(graph_def: graph_pb2.GraphDef, keep: Sequence[str],
                   shapes: Mapping[str, Any], dtypes: Mapping[str, str]) -> graph_pb2.GraphDef:
  """Grappler's ``constfold`` and ``shape`` passes, except that no node whose output has
  more than :data:`FOLD_LIMIT_BYTES` becomes a ``Const``.

  Grappler folds even a node it must keep when the node has one output (the constant
  keeps its name), so the pass is run again with each node it folded too large standing
  in as a ``Placeholder`` of its dtype and shape, and its inputs kept by name; the node
  comes back after the pass, and so do the large non-constant nodes that feed it (Grappler
  folded them into it).  That repeats until no new large constant appears; a graph with
  none is folded once, as before."""
  original = {n.name: n for n in graph_def.node}
  held: dict[str, Any] = {}
  passes = ["constfold", "shape"]
  while True:
    graph, extra = graph_def, []
    if held:
      graph = _stand_ins(graph_def, held, shapes, dtypes)
      extra = [*held, *sorted({node_of(i) for n in held.values() for i in n.input})]
    out = run_grappler(graph, [*keep, *extra], passes)
    new = [n.name for n in out.node
           if n.op == "Const" and n.name not in held and n.name in original
           and original[n.name].op != "Const" and _const_nbytes(n) > FOLD_LIMIT_BYTES
           and _nbytes(shapes.get(f"{n.name}:0"), dtypes.get(f"{n.name}:0"))]
    if not new:
      break
    while new:  # with the large nodes that feed them (folded into them this pass)
      name = new.pop()
      held[name] = original[name]
      new.extend(i for i in map(node_of, original[name].input)
                 if i in original and i not in held and i not in new
                 and original[i].op not in ("Const", "Placeholder")
                 and _nbytes(shapes.get(f"{i}:0"), dtypes.get(f"{i}:0")) > FOLD_LIMIT_BYTES
                 and f"{i}:1" not in shapes)
  for node in out.node:
    if node.name in held:
      node.CopyFrom(held[node.name])
  return out


def _stand_ins(graph_def: graph_pb2.GraphDef, held: Mapping[str, Any],
               shapes: Mapping[str, Any], dtypes: Mapping[str, str]) -> graph_pb2.GraphDef:
  """A copy of ``graph_def`` with each ``held`` node a ``Placeholder`` of its output's
  dtype and shape (same name, so its readers still read it)."""
  out = graph_pb2.GraphDef()
  out.CopyFrom(graph_def)
  for node in out.node:
    if node.name in held:
      name, key = node.name, f"{node.name}:0"
      node.Clear()
      node.name, node.op = name, "Placeholder"
      node.attr["dtype"].type = tf.as_dtype(dtypes[key]).as_datatype_enum
      node.attr["shape"].shape.CopyFrom(tf.TensorShape(list(shapes[key])).as_proto())
  return out


def _nbytes(shape, dtype: Optional[str]) -> int:
  """Bytes of a tensor of fully known ``shape`` and fixed-size ``dtype`` (else 0)."""
  if not _known(shape) or dtype in (None, "string", "resource", "variant"):
    return 0
  return math.prod(shape) * tf.as_dtype(dtype).size


def _const_nbytes(node) -> int:
  """Bytes of a ``Const``'s value, from its shape and dtype (its values are not read)."""
  tensor = node.attr["value"].tensor
  return _nbytes([d.size for d in tensor.tensor_shape.dim],
                 dtype_name(tf.as_dtype(tensor.dtype)))


def flatten(graph_def: graph_pb2.GraphDef, feeds: Sequence[str], fetches: Sequence[str],
            control_outputs: Sequence[str], resources: Mapping[str, Resource]) -> Flat:
  """Runs the whole pipeline (see the module docstring) and checks every shape."""
  timings = {}
  t0 = time.perf_counter()
  check_control_flow(graph_def)
  keep = [node_of(t) for t in fetches] + list(control_outputs) + [node_of(f) for f in feeds]
  keep += list(resources)
  gd = strip_api_implements(graph_def)
  if gd.library.function:
    gd = run_grappler(gd, keep, ["function"])
    check_control_flow(gd)
    check_inlined(gd)
  del gd.library.function[:]
  timings["inline"] = time.perf_counter() - t0

  t0 = time.perf_counter()
  shapes, dtypes = infer_shapes(gd, resources)
  gd, _ = grouped.as_depthwise(gd, shapes)
  gd, folded = materialize_shapes(gd, shapes)
  gd = fold_constants(gd, keep, shapes, dtypes)
  timings["fold"] = time.perf_counter() - t0
  logging.info("tf_tofu ingest: %d shape outputs materialised, %d nodes after folding",
               folded, len(gd.node))

  t0 = time.perf_counter()
  shapes, dtypes = infer_shapes(gd, resources)
  timings["shapes"] = time.perf_counter() - t0
  present = {n.name for n in gd.node}
  for name in list(feeds) + list(fetches):
    if node_of(name) not in present:
      raise IngestError(f"tensor {name!r} is not in the graph after flattening")
    if tensor_name(name) not in shapes:
      count = sum(1 for k in shapes if node_of(k) == node_of(name))
      raise IngestError(f"tensor {name!r}: op {node_of(name)!r} has {count} output"
                        f"{'' if count == 1 else 's'} (indices 0..{count - 1})")
  return Flat(graph_def=gd, shapes=shapes, dtypes=dtypes, feeds=tuple(feeds),
              fetches=tuple(fetches), control_outputs=tuple(control_outputs),
              resources=dict(resources), timings=timings)


def check_static(flat: Flat, order: Sequence[Any], fix: str) -> None:
  """Raises naming the first tensor (in graph order) whose shape is not fully known."""
  for node in order:
    for key in _outputs_of(flat, node.name):
      s = flat.shapes.get(key)
      if not _known(s):
        shown = "unknown rank" if s is None else str(tuple(s)).replace("None", "?")
        raise IngestError(f"tensor {key!r} (output of {node.op} {node.name!r}) has shape "
                          f"{shown}; tf_tofu needs every dim known: {fix}")


def _outputs_of(flat: Flat, op_name: str) -> list[str]:
  out, i = [], 0
  while f"{op_name}:{i}" in flat.shapes:
    out.append(f"{op_name}:{i}")
    i += 1
  return out


# ----------------------------------------------------------------------------- tracing


def concrete_function(fn: Any, args: Sequence[Any]):
  """The ConcreteFunction of ``fn`` (a tf.function, a ConcreteFunction or a callable)."""
  if hasattr(fn, "graph") and hasattr(fn, "captured_inputs"):
    if args:
      raise IngestError("a ConcreteFunction is already traced; pass no input signature")
    return fn
  if not hasattr(fn, "get_concrete_function"):
    if not callable(fn):
      raise IngestError(f"cannot trace {type(fn).__name__}: pass a tf.function, a "
                        "ConcreteFunction or a Python callable")
    fn = tf.function(fn, autograph=False)
  try:
    return fn.get_concrete_function(*args)
  except (TypeError, ValueError) as e:
    raise IngestError(f"tracing failed: {e}; pass one tf.TensorSpec (every dim known) or "
                      "example value per argument") from e


def resources_of_function(cf) -> dict:
  """Variables captured by ``cf``: placeholder op -> Resource with its live handle."""
  by_handle = {}
  for v in getattr(cf.graph, "variables", ()):
    try:
      by_handle[id(v.handle)] = v
    except (AttributeError, ValueError):
      continue
  out = {}
  for external, internal in zip(cf.captured_inputs, cf.graph.internal_captures):
    if internal.dtype != tf.resource:
      continue
    var = by_handle.get(id(external))
    hd = handle_data_util.get_resource_handle_data(internal)
    if not (hd.is_set and hd.shape_and_type):
      if var is None:
        raise IngestError(f"captured resource {internal.name!r} carries no variable shape "
                          "(not a tf.Variable?); tf_tofu handles variables only")
      shape, dtype = tuple(var.shape.as_list()), var.dtype.name
    else:
      st = hd.shape_and_type[0]
      shape = tuple(tf.TensorShape(st.shape).as_list()) if not st.shape.unknown_rank else None
      dtype = tf.as_dtype(st.dtype).name
    if shape is None or any(d is None for d in shape):
      raise IngestError(f"variable behind {internal.name!r} has shape {shape}; tf_tofu needs "
                        "variables of fully known shape")
    name = var.name.split(":")[0] if var is not None else internal.op.name
    out[internal.op.name] = Resource(op=internal.op.name, name=name, shape=shape, dtype=dtype,
                                     trainable=(bool(var.trainable) if var is not None else None),
                                     live=var if var is not None else external)
  return out
