"""TofuGraph: a training step as a flat op DAG with static shapes, variables and gradient links.

Entry points::

    g = tf_tofu.trace(train_step, tf.TensorSpec([32, 784]), tf.TensorSpec([32], tf.int32))
    g = TofuGraph.from_graph_def(graph_def, feeds=["x:0"], fetches=["loss:0"])
    g = TofuGraph.from_saved_model("/path/to/model", signature="train")

Tracing and flattening live in ``tf_tofu.graph.ingest`` (GraphDef inputs in
``tf_tofu.graph.sources``), the forward <-> backward links in
``tf_tofu.graph.links`` and ``tf_tofu.graph.attach``; this module assembles the result.  Every op
is tagged with its description from the op registry (``tf_tofu.opdefs``) or
marked opaque with the reason.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.framework import graph_pb2
from tensorflow.python.framework import op_def_registry

from tf_tofu.graph import ingest as ingest_tf, links as grad_links, sources as graph_sources
from tf_tofu.graph.ingest import IngestError
from tf_tofu.opdefs import registry
from tf_tofu.opdefs.registry import Describer
from tf_tofu.opdefs.description import Semantics, TensorInfo
from tf_tofu.opdefs.kernels import attrs_to_python, context_from_node_def

ROLES = grad_links.ROLES
_STATIC_FIX = ("pass a concrete input signature (tf.TensorSpec with every dim known, e.g. "
               "tf.TensorSpec([32, 784], tf.float32)) or concrete example inputs")
_FEED_FIX = "pass feeds={name: shape} with every dim known"


@dataclasses.dataclass(frozen=True)
class Tensor:
  """One tensor of the graph (``name`` is ``"op_name:index"``)."""

  name: str
  shape: tuple[int, ...]
  dtype: str
  producer: str
  index: int
  consumers: tuple[tuple[str, int], ...]
  value: Optional[np.ndarray] = dataclasses.field(default=None, compare=False, repr=False)

  @property
  def num_elements(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  @property
  def nbytes(self) -> int:
    if self.dtype in ("resource", "variant", "string"):
      return 0
    return self.num_elements * np.dtype(self.dtype).itemsize


@dataclasses.dataclass(frozen=True)
class Op:
  """One op: its dataflow, attributes, description (or why it has none) and role."""

  name: str
  op_type: str
  inputs: tuple[str, ...]
  control_inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  attrs: dict = dataclasses.field(compare=False, repr=False)
  node_def: Any = dataclasses.field(compare=False, repr=False)
  semantics: Optional[Semantics] = dataclasses.field(default=None, compare=False, repr=False)
  opaque_reason: Optional[str] = None
  role: str = "other"

  def __post_init__(self):
    if self.role not in ROLES:
      raise ValueError(f"op {self.name!r}: unknown role {self.role!r}; one of {ROLES}")

  @property
  def described(self) -> bool:
    return self.semantics is not None


@dataclasses.dataclass(frozen=True)
class Variable:
  """A variable: its handle in the graph and the ops that read, differentiate and update it.

  ``gradient`` is dLoss/dVar as the optimizer consumes it (for a sparse update,
  the values of the IndexedSlices, with ``gradient_indices`` beside them);
  ``accumulation`` the AddN ops summing its contributions.
  """

  name: str
  handle: str
  shape: tuple[int, ...]
  dtype: str
  trainable: bool
  reads: tuple[str, ...]
  updates: tuple[str, ...]
  gradient: Optional[str]
  accumulation: tuple[str, ...]
  gradient_indices: Optional[str] = None

  @property
  def nbytes(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


class TofuGraph:
  """A flattened, shape-folded training step with its variables and gradient links.

  Attributes:
    graph_def: the flattened, shape-folded GraphDef (resource placeholders carry
      ``_handle_shapes``/``_handle_dtypes`` so the graph re-ingests on its own).
    ops: op name -> :class:`Op`, in topological order.
    tensors: tensor name -> :class:`Tensor`.
    variables: every variable, trainable or not (optimizer slots included).
    feeds: input tensors (data placeholders), in argument order.
    fetches: fetched tensors (the loss first, as the function returns them).
    control_outputs: ops that must run (variable updates, reads ordered before them).
    forward_op_of: gradient op -> the forward op it differentiates.
    gradient_of: forward tensor -> its gradient tensor (dLoss/dTensor).
    unattached: backward ops that could not be attached to a forward op.
    live_handles: handle tensor name -> live variable (or handle) from a trace; empty
      from a GraphDef.
    loss: the data fetches the forward region was taken from.
    timings: seconds per ingestion stage.
  """

  def __init__(self, graph_def, ops, tensors, variables, feeds, fetches, control_outputs,
               forward_op_of, gradient_of, unattached, live_handles, loss, timings):
    self.graph_def = graph_def
    self.ops: dict[str, Op] = ops
    self.tensors: dict[str, Tensor] = tensors
    self.variables: tuple[Variable, ...] = tuple(variables)
    self.feeds: tuple[str, ...] = tuple(feeds)
    self.fetches: tuple[str, ...] = tuple(fetches)
    self.control_outputs: tuple[str, ...] = tuple(control_outputs)
    self.forward_op_of: dict[str, str] = dict(forward_op_of)
    self.gradient_of: dict[str, str] = dict(gradient_of)
    self.unattached: tuple[str, ...] = tuple(unattached)
    self.live_handles: dict[str, Any] = dict(live_handles)
    self.loss: tuple[str, ...] = tuple(loss)
    self.timings: dict[str, float] = dict(timings)
    # Set when ingested from a SavedModel signature: its key, and the names of its outputs
    # in fetch order (a rewritten SavedModel keeps both).
    self.signature_key: Optional[str] = None
    self.output_names: Optional[tuple[str, ...]] = None

  # ------------------------------------------------------------------ construction

  @classmethod
  def from_graph_def(cls, graph_def: Union[graph_pb2.GraphDef, bytes, str],
                     feeds: Union[Sequence[str], Mapping[str, Any]],
                     fetches: Sequence[str], control_outputs: Sequence[str] = (),
                     variable_shapes: Optional[Mapping[str, tuple]] = None) -> "TofuGraph":
    """Ingests a GraphDef (a proto, its serialized bytes, or a path to a .pb/.pbtxt file).

    Args:
      graph_def: the graph.
      feeds: input tensor names, or a mapping name -> shape (or tf.TensorSpec) that
        fixes the placeholders' unknown dims.
      fetches: tensors to compute (the loss first).
      control_outputs: ops that must run although nothing fetched depends on them
        (the train op, variable updates).  Defaults to every op that writes a
        variable with a value computed from the feeds (not the initializers).
      variable_shapes: resource placeholder name -> (shape, dtype) for placeholders
        whose node does not say (``_handle_shapes``/``_handle_dtypes`` attrs, or the
        ``_output_shapes`` of its ``ReadVariableOp``).
    """
    t0 = time.perf_counter()
    gd = graph_sources.parse_graph_def(graph_def)
    ingest_tf.check_control_flow(gd)  # first: a TF1 loop is a cycle, better named as a loop
    ingest_tf.check_well_formed(gd)
    feed_shapes = dict(feeds) if isinstance(feeds, Mapping) else {}
    feed_names = tuple(ingest_tf.tensor_name(f) for f in feeds)
    fetch_names = tuple(ingest_tf.tensor_name(f) for f in fetches)
    names = {n.name: n for n in gd.node}
    for what, lst in (("feed", feed_names), ("fetch", fetch_names)):
      for t in lst:
        if ingest_tf.node_of(t) not in names:
          close = graph_sources.close_names(ingest_tf.node_of(t), names)
          raise IngestError(f"{what} {t!r} is not in the GraphDef"
                            + (f"; did you mean {close}?" if close else ""))
    for c in control_outputs:
      if c not in names:
        raise IngestError(f"control output {c!r} is not in the GraphDef")
    gd = graph_sources.with_feed_shapes(
        gd, {ingest_tf.tensor_name(k): v for k, v in feed_shapes.items()})
    resources = graph_sources.resources_of_graph_def(gd, variable_shapes or {}, feed_names)
    if not control_outputs:
      control_outputs = graph_sources.updates_fed_by(gd, feed_names)
    flat = ingest_tf.flatten(gd, feed_names, fetch_names, control_outputs, resources)
    flat.timings["parse"] = time.perf_counter() - t0
    return _assemble(flat, live_handles={}, fix=_FEED_FIX)

  @classmethod
  def from_saved_model(cls, path: str, signature: str = "serving_default",
                       tags: Optional[Sequence[str]] = None) -> "TofuGraph":
    """Ingests one signature of a SavedModel (its variables are loaded)."""
    try:
      loaded = tf.saved_model.load(path, tags=tags)
    except (OSError, ValueError, tf.errors.OpError) as e:
      raise IngestError(f"cannot load the SavedModel at {path!r}: {e}") from e
    sigs = getattr(loaded, "signatures", {})
    if signature not in sigs:
      raise IngestError(f"SavedModel {path!r} has no signature {signature!r}; it has "
                        f"{sorted(sigs) or 'none'}")
    g = trace(sigs[signature])
    g._keepalive = loaded  # the live variables belong to the loaded object
    g.signature_key = signature
    outputs = sigs[signature].structured_outputs
    if isinstance(outputs, dict):  # flattened in sorted key order, as the fetches are
      g.output_names = tuple(sorted(outputs))
    return g

  # ------------------------------------------------------------------ queries

  def op_of(self, tensor: str) -> Op:
    """The op producing ``tensor``."""
    name = ingest_tf.tensor_name(tensor)
    if name not in self.tensors:
      raise KeyError(f"no tensor {tensor!r} in the graph")
    return self.ops[self.tensors[name].producer]

  def ops_with_role(self, role: str) -> list[Op]:
    return [op for op in self.ops.values() if op.role == role]

  def variable(self, name: str) -> Variable:
    for v in self.variables:
      if name in (v.name, v.handle, ingest_tf.node_of(v.handle)):
        return v
    raise KeyError(f"no variable {name!r}")

  def variable_values(self, handles: Optional[Sequence[str]] = None) -> dict[str, np.ndarray]:
    """The current value of each live variable (all, or those of ``handles``), by handle
    tensor.  Needs the live variables of a trace or a SavedModel (``live_handles``)."""
    by_handle = {v.handle: v for v in self.variables}
    out = {}
    for h in (by_handle if handles is None else handles):
      out[h] = tf.raw_ops.ReadVariableOp(resource=_live_handle(self._live(h)),
                                         dtype=tf.as_dtype(by_handle[h].dtype)).numpy()
    return out

  def assign_variables(self, values: Mapping[str, np.ndarray]) -> None:
    """Writes ``values`` (handle tensor -> array) into the live variables."""
    by_handle = {v.handle: v for v in self.variables}
    for h, value in values.items():
      tf.raw_ops.AssignVariableOp(resource=_live_handle(self._live(h)),
                                  value=tf.constant(value, tf.as_dtype(by_handle[h].dtype)))

  def _live(self, handle: str):
    if handle not in self.live_handles:
      raise ValueError(f"variable {handle!r} has no live value here (a bare GraphDef carries "
                       "none); trace the step or load a SavedModel")
    return self.live_handles[handle]

  def to_networkx(self):
    """A ``networkx.DiGraph`` of the ops: data edges carry ``tensor``, control edges
    ``control=True``; nodes carry ``op_type`` and ``role``."""
    import networkx as nx
    g = nx.DiGraph()
    for op in self.ops.values():
      g.add_node(op.name, op_type=op.op_type, role=op.role, described=op.described)
    for op in self.ops.values():
      for t in op.inputs:
        src = self.tensors[t].producer
        if g.has_edge(src, op.name):
          g.edges[src, op.name]["tensors"].append(t)
        else:
          g.add_edge(src, op.name, tensor=t, tensors=[t], control=False)
      for c in op.control_inputs:
        if not g.has_edge(c, op.name):
          g.add_edge(c, op.name, control=True, tensors=[])
    return g

  def op_type_counts(self) -> dict[str, int]:
    return dict(collections.Counter(op.op_type for op in self.ops.values()))

  def summary(self) -> str:
    """A human report: counts by role, variables, links, descriptions."""
    roles = collections.Counter(op.role for op in self.ops.values())
    trainable = [v for v in self.variables if v.trainable]
    linked = [v for v in trainable if v.gradient]
    opaque = collections.Counter(op.op_type for op in self.ops.values()
                                 if op.semantics is None and op.role in
                                 ("forward", "backward", "update"))
    weight = sum(v.nbytes for v in trainable)
    lines = [
        f"TofuGraph: {len(self.ops)} ops, {len(self.tensors)} tensors, "
        f"{len(self.variables)} variables ({len(trainable)} trainable, "
        f"{weight / 2**20:.1f} MiB)",
        "  roles: " + ", ".join(f"{r} {roles[r]}" for r in ROLES if roles[r]),
        f"  feeds: {', '.join(self.feeds) or '-'}; fetches: {', '.join(self.fetches) or '-'}",
        f"  gradients: {len(linked)}/{len(trainable)} trainable variables linked, "
        f"{len(self.forward_op_of)} backward ops attached, {len(self.unattached)} unattached",
        f"  described: {sum(1 for op in self.ops.values() if op.described)} ops; opaque "
        f"compute op types: {', '.join(f'{k} x{v}' for k, v in sorted(opaque.items())) or '-'}",
    ]
    if self.unattached:
      lines.append("  unattached: " + ", ".join(self.unattached[:10])
                   + (" ..." if len(self.unattached) > 10 else ""))
    return "\n".join(lines)

  def __repr__(self) -> str:
    return f"<TofuGraph {len(self.ops)} ops, {len(self.variables)} variables>"

  # ------------------------------------------------------------------ execution

  def as_function(self, outputs: Optional[Sequence[str]] = None):
    """The graph as a callable again: ``f(*feeds) -> list of fetched values``.

    Uses ``tf.compat.v1.wrap_function`` around ``import_graph_def`` with the live
    variable handles captured, so running it updates the real variables (only
    for graphs from :func:`trace`).  ``outputs`` defaults to the fetches; the
    control outputs always run.
    """
    if self.variables and not self.live_handles:
      raise IngestError("this graph came from a GraphDef: it has no live variables to run with")
    outputs = list(outputs or self.fetches)
    feeds = list(self.feeds)
    handle_ops = sorted({ingest_tf.node_of(h) for h in self.live_handles})
    specs = [tf.TensorSpec(self.tensors[f].shape, self.tensors[f].dtype) for f in feeds]
    graph_def = self.graph_def
    live = self.live_handles
    control = list(self.control_outputs)

    def body(*args):
      graph = tf.compat.v1.get_default_graph()
      input_map = {f: a for f, a in zip(feeds, args)}
      for h in handle_ops:
        v = live[f"{h}:0"]
        handle = v.handle if hasattr(v, "handle") else v
        input_map[f"{h}:0"] = graph.capture(handle)
      results = tf.graph_util.import_graph_def(graph_def, input_map=input_map,
                                               return_elements=outputs + control, name="")
      with tf.control_dependencies(results[len(outputs):]):
        return [tf.identity(t) for t in results[:len(outputs)]]

    return tf.compat.v1.wrap_function(body, specs)


# ----------------------------------------------------------------------------- public


def trace(fn: Any, *args_or_specs: Any) -> TofuGraph:
  """Ingests a training step: a tf.function plus its input signature, or a ConcreteFunction.

  Args:
    fn: a ``tf.function``, a ``ConcreteFunction`` or a Python callable (traced
      with ``tf.function(autograph=False)``).
    *args_or_specs: one ``tf.TensorSpec`` or example value per argument (none
      for a ConcreteFunction or a tf.function with an input signature).

  Raises:
    IngestError: for control flow, unknown dims, or a graph TF cannot import.
  """
  t0 = time.perf_counter()
  cf = ingest_tf.concrete_function(fn, args_or_specs)
  t_trace = time.perf_counter() - t0
  graph = cf.graph
  resources = ingest_tf.resources_of_function(cf)
  captured = {t.op.name for t in graph.internal_captures}
  feeds = [t.name for t in graph.inputs
           if t.op.name not in captured and t.dtype != tf.resource]
  own_signature = getattr(fn, "input_signature", None)
  for t in graph.inputs:
    if (t.op.name not in captured and t.dtype != tf.resource and own_signature is not None
        and not t.shape.is_fully_defined()):
      raise IngestError(
          f"argument {t.op.name!r} has shape {str(tuple(t.shape.as_list())).replace('None', '?')} "
          "because the tf.function's own input_signature leaves a dim unknown; tf_tofu traces "
          "with that signature whatever inputs are given: pass the Python function wrapped in "
          "a tf.function without input_signature, or give the signature every dim")
  resource_args = [t for t in graph.inputs if t.op.name not in captured and t.dtype == tf.resource]
  if resource_args:
    raise IngestError(f"argument {resource_args[0].name!r} is a resource; pass variables by "
                      "closure (capture), not as arguments")
  non_resource_captures = [t for t in graph.internal_captures if t.dtype != tf.resource]
  fetches = [t.name for t in graph.outputs if t is not None]
  # In graph order: TF collects control outputs in a set of ops (ordered by object id).
  must_run = {op.name for op in graph.control_outputs}
  control = [op.name for op in graph.get_operations() if op.name in must_run]
  gd = graph.as_graph_def()
  if non_resource_captures:
    gd = graph_sources.freeze_captured_constants(gd, cf, non_resource_captures)
  flat = ingest_tf.flatten(gd, feeds, fetches, control, resources)
  flat.timings["trace"] = t_trace
  live = {f"{op}:0": r.live for op, r in resources.items()}
  return _assemble(flat, live_handles=live, fix=_STATIC_FIX)


# ----------------------------------------------------------------------------- assembly


def _live_handle(live: Any):
  """The resource handle of a live variable (a tf.Variable, or already a handle)."""
  return live.handle if hasattr(live, "handle") else live


def _assemble(flat: ingest_tf.Flat, live_handles: Mapping[str, Any], fix: str) -> TofuGraph:
  t0 = time.perf_counter()
  gd = flat.graph_def
  nodes = {n.name: n for n in gd.node}
  order = _topological(gd)
  ingest_tf.check_static(flat, [nodes[n] for n in order], fix)
  sk = _skeleton(flat, nodes, order)
  outputs, inputs, controls = sk.outputs, sk.inputs, sk.control_inputs
  consumers = sk.consumers
  var_info = {op: (r.shape, r.dtype) for op, r in flat.resources.items()}
  var_info.update(_var_handle_info(nodes, order, var_info))
  t1 = time.perf_counter()
  links = grad_links.link(sk, var_info, flat.fetches)
  t_links = time.perf_counter() - t1

  values = {}
  for name in order:
    node = nodes[name]
    if node.op == "Const":
      values[f"{name}:0"] = tf.make_ndarray(node.attr["value"].tensor)
  tensors = {}
  for name in order:
    for i, t in enumerate(outputs[name]):
      tensors[t] = Tensor(name=t, shape=tuple(flat.shapes[t]), dtype=flat.dtypes[t],
                          producer=name, index=i, consumers=tuple(consumers.get(t, ())),
                          value=values.get(t))
  t2 = time.perf_counter()
  ops = {}
  describer = Describer()
  for name in order:
    node = nodes[name]
    sem, reason = _describe(node, [tensors[t] for t in inputs[name]],
                            [tensors[t] for t in outputs[name]], describer)
    ops[name] = Op(name=name, op_type=node.op, inputs=inputs[name],
                   control_inputs=controls[name], outputs=outputs[name],
                   attrs=attrs_to_python(node.attr), node_def=node, semantics=sem,
                   opaque_reason=reason, role=links.roles[name])
  t_describe = time.perf_counter() - t2

  variables = _variables(links, flat.resources, var_info)
  timings = dict(flat.timings)
  timings.update(links=t_links, describe=t_describe,
                 assemble=time.perf_counter() - t0 - t_links - t_describe)
  out_gd = _annotate_handles(gd, var_info)
  logging.info("tf_tofu ingest: %d ops, %d variables, %d unattached backward ops",
               len(ops), len(variables), len(links.unattached))
  return TofuGraph(graph_def=out_gd, ops=ops, tensors=tensors, variables=variables,
                   feeds=flat.feeds, fetches=flat.fetches, control_outputs=flat.control_outputs,
                   forward_op_of=links.forward_op_of, gradient_of=links.gradient_of,
                   unattached=links.unattached, live_handles=live_handles, loss=links.loss,
                   timings=timings)


def _skeleton(flat: ingest_tf.Flat, nodes, order: Sequence[str]) -> grad_links.Skeleton:
  """The structure the links work on: per op its data and control inputs and outputs,
  per tensor its producer and consumers, with static shapes and dtypes."""
  outputs = {}
  for name in order:
    outs, i = [], 0
    while f"{name}:{i}" in flat.shapes:
      outs.append(f"{name}:{i}")
      i += 1
    outputs[name] = tuple(outs)
  inputs, controls = {}, {}
  consumers = collections.defaultdict(list)
  for name in order:
    node = nodes[name]
    data = tuple(ingest_tf.tensor_name(i) for i in node.input if not i.startswith("^"))
    inputs[name] = data
    controls[name] = tuple(i[1:] for i in node.input if i.startswith("^"))
    for k, t in enumerate(data):
      consumers[t].append((name, k))
  producer = {t: name for name, outs in outputs.items() for t in outs}
  arg_names = {name: _input_arg_names(nodes[name], len(inputs[name])) for name in order}
  return grad_links.Skeleton(order=tuple(order), op_type={n: nodes[n].op for n in order},
                             inputs=inputs, control_inputs=controls, outputs=outputs,
                             consumers={t: tuple(c) for t, c in consumers.items()},
                             producer=producer, shape=flat.shapes, dtype=flat.dtypes,
                             input_arg_names=arg_names)


def _variables(links, resources, var_info) -> list[Variable]:
  """The graph's variables, by name: handle, shape, reads, gradient, updates."""
  variables = []
  for h, vl in links.variables.items():
    res = resources.get(h)
    shape, dtype = var_info[h]
    trainable = (res.trainable if res is not None and res.trainable is not None
                 else vl.gradient is not None)
    variables.append(Variable(
        name=res.name if res is not None else h, handle=vl.handle, shape=tuple(shape),
        dtype=dtype, trainable=bool(trainable), reads=vl.reads, updates=vl.updates,
        gradient=vl.gradient, accumulation=vl.accumulation,
        gradient_indices=vl.gradient_indices))
  variables.sort(key=lambda v: v.name)
  return variables


def _describe(node, ins: Sequence[Tensor], outs: Sequence[Tensor], describer: Describer):
  """The op's Semantics from the registry, or (None, why it is opaque).

  ``describer`` describes each context key once (a description is a function of the
  key, not of the op's name); an op whose key an earlier op had takes that
  description with its own context (``Semantics.for_context``).
  """
  if registry.lookup(node.op) is None:
    return None, f"no description for {node.op}"
  try:
    ctx = context_from_node_def(node, [TensorInfo(t.shape, t.dtype, t.value) for t in ins],
                                [TensorInfo(t.shape, t.dtype) for t in outs])
    sem, reason = describer(ctx)
  except Exception as e:  # a faulty description must not stop ingestion
    return None, f"description of {node.op} failed: {type(e).__name__}: {e}"
  if sem is None:
    return None, reason
  return (sem if sem.op is ctx else sem.for_context(ctx)), None


def _topological(gd: graph_pb2.GraphDef) -> list[str]:
  """Kahn's algorithm over data and control edges, stable in GraphDef order."""
  names = [n.name for n in gd.node]
  index = {n: i for i, n in enumerate(names)}
  deps = {}
  users = collections.defaultdict(list)
  for n in gd.node:
    srcs = {ingest_tf.node_of(i) for i in n.input}
    deps[n.name] = len(srcs)
    for s in srcs:
      users[s].append(n.name)
  import heapq
  ready = [index[n] for n in names if deps[n] == 0]
  heapq.heapify(ready)
  order = []
  while ready:
    name = names[heapq.heappop(ready)]
    order.append(name)
    for u in users[name]:
      deps[u] -= 1
      if deps[u] == 0:
        heapq.heappush(ready, index[u])
  if len(order) != len(names):
    stuck = sorted(set(names) - set(order))[:3]
    raise IngestError(f"the graph has a cycle (through {stuck}); control flow must be removed")
  return order


def _input_arg_names(node, n_inputs: int) -> tuple[str, ...]:
  op_def = op_def_registry.get(node.op)
  if op_def is None:
    return ("",) * n_inputs
  names = []
  for arg in op_def.input_arg:
    if arg.number_attr:
      k = node.attr[arg.number_attr].i
    elif arg.type_list_attr:
      k = len(node.attr[arg.type_list_attr].list.type)
    else:
      k = 1
    names.extend([arg.name] * k)
  names = names[:n_inputs] + [""] * max(0, n_inputs - len(names))
  return tuple(names)


def _var_handle_info(nodes, order, known) -> dict:
  """VarHandleOp variables: shape and dtype from the node's attrs."""
  out = {}
  for name in order:
    node = nodes[name]
    if node.op == "VarHandleOp" and name not in known:
      shape = tuple(d.size for d in node.attr["shape"].shape.dim)
      out[name] = (shape, tf.as_dtype(node.attr["dtype"].type).name)
  return out


def _annotate_handles(gd: graph_pb2.GraphDef, var_info) -> graph_pb2.GraphDef:
  """A copy whose resource placeholders carry their variable's shape and dtype."""
  out = graph_pb2.GraphDef()
  out.CopyFrom(gd)
  for node in out.node:
    if node.name in var_info and node.op == "Placeholder":
      shape, dtype = var_info[node.name]
      del node.attr["_handle_shapes"].list.shape[:]
      node.attr["_handle_shapes"].list.shape.add().CopyFrom(tf.TensorShape(shape).as_proto())
      del node.attr["_handle_dtypes"].list.type[:]
      node.attr["_handle_dtypes"].list.type.append(tf.as_dtype(dtype).as_datatype_enum)
  return out
