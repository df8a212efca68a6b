"""Pictures of a plan: the coarsened graph in Graphviz, the partitioned graph for TensorBoard.

A plan is a few hundred per-tensor and per-op decisions; a picture shows where
the bytes go.  ``plan_dot`` draws the graph the search decided on, at the
grain it decided at:

* one ellipse per op group (``Plan.op_groups``: a forward op with the gradient
  ops that differentiate it, which share one strategy), labelled with its lead
  op, op type, member count, strategy per level (``"k/j"``: level 1 cuts the
  index variable ``k``, level 2 ``j``) and the bytes its conversions move
  (``Plan.op_bytes``); groups left whole on device 0 (``single``) are filled
  pink;
* one box per variable, labelled with its name, shape, dtype and layout per
  level.  Its reads and updates are folded into it: a read's value and an
  update's element-wise inputs are tied to the variable's layout
  (``search.coarsen``), so on the picture they *are* the variable, and the
  gradient flowing into an update is an edge into the box;
* one house per feed (a Placeholder that is not a variable), since splitting
  a batch across devices is a conversion too.  Constants are left out (they
  are built on every device for free) unless a conversion on one moves bytes;
* one edge per pair of connected nodes, parallel tensors merged into it,
  labelled with the layouts per level of its tensors (``"cut(0) x rep"``;
  tied tensors share one layout, so this is their tensor group's) and the
  bytes of the conversions on them: a tensor's production (its producer's
  tiles into its layout) counts on every edge that carries it, a ``feed``
  conversion only on the edges into the groups of the ops it feeds.  Edges
  that move bytes are red and the thicker the more they move, the others
  grey; a group's conversions between its own ops are a red loop on it.
  Every edge's tooltip (SVG) lists its tensors and the exact bytes.

Nodes of one name scope (the first two scopes of the lead op's name: a Keras
layer) are framed together (a Graphviz cluster), with a variable that only
that scope's groups read.

A strategy whose cut variable is a reduction of the op (MatMul's ``k``)
is starred (``"k*"``): its output is a partial sum on every device, summed by
an all-reduce or reduce-scatter.  A legend box says what shapes, letters,
layouts and colours mean.

The title gives the planner, k, the level factors and the total bytes per
step.  The text depends only on the graph and the plan (groups, feeds and
edges in the graph's op order, variables by name; never a dict's order), so
equal inputs give equal text.

``write_tensorboard`` writes a partitioned GraphDef as a graph summary:
TensorBoard's graph view shows it and colours it by device (the nodes'
``device`` fields), without the devices having to exist.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import shutil
import subprocess
from typing import Optional, Sequence

from tf_tofu.core.errors import TofuError
from tf_tofu.cli import inputs
from tf_tofu.core.plan import Plan, human_bytes
from tf_tofu.graph import vocabulary
from tf_tofu.graph.view import SearchGraph

DOT_TIMEOUT_SECONDS = 120
RENDER_FORMATS = ("svg", "png")
# Above these many drawn nodes "auto" does not render: Graphviz's layout takes minutes,
# and a PNG is clipped at 32767 pixels (the SVG has no such limit).
RENDER_LIMITS = {"svg": 600, "png": 150}
RENDER_MODES = ("auto", "always", "never")
SCOPE_DEPTH = 2  # name scopes drawn as frames: a Keras model's layer ("model/layer_1")

LEGEND = "\n".join((
    "legend",
    "ellipse: an op group (a forward op and the gradient ops of it); pink: left whole on device 0",
    "a/b: level 1 cuts the lead op's index variable a, level 2 cuts b; "
    "replicate: the whole op on every device",
    "k*: a reduction variable: partial sums on every device, then an all-reduce",
    "box: a variable (its reads and updates folded in); house: a fed input",
    "edge label: the layout per level: cut(d) split on dim d, rep whole on every device",
    "red edge: bytes moved by conversions (thicker: more); grey: nothing moved",
    "grey frame: a name scope (a layer); its variables inside when only it reads them",
))


@dataclasses.dataclass(frozen=True)
class Drawing:
  """What :func:`write_dot` wrote, and why a render was skipped or failed."""

  written: tuple[str, ...]
  notes: tuple[str, ...]


def _quote(text: str) -> str:
  """``text`` as a DOT quoted string (ids and labels; ``\\n`` breaks a label line)."""
  return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(**attrs: object) -> str:
  """``[k=v, ...]`` with strings quoted and numbers bare, in the given order."""
  parts = []
  for key, value in attrs.items():
    if value is None:
      continue
    parts.append(f"{key}={_quote(value) if isinstance(value, str) else value}")
  return "[" + ", ".join(parts) + "]"


def _shape(shape: Sequence[int]) -> str:
  return "x".join(map(str, shape)) or "scalar"


@dataclasses.dataclass
class _Node:
  id: str
  label: str
  attrs: dict
  ops: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Edge:
  tensors: dict = dataclasses.field(default_factory=dict)  # tensor -> bytes on this edge

  @property
  def bytes(self) -> int:
    return sum(self.tensors.values())


def plan_dot(graph: SearchGraph, plan: Plan, describer=None) -> str:
  """The Graphviz DOT text of ``graph`` coarsened and annotated by ``plan``.

  What is drawn is in the module docstring: op groups as ellipses, variables
  as boxes (their reads and updates folded in), feeds as houses, constants
  left out unless converted; edges between them merged per pair and labelled
  with layouts per level and conversion bytes (red when non-zero, grey
  otherwise).  Node ids are ``group:<lead op>``, ``var:<handle tensor>``,
  ``feed:<op>`` and ``const:<op>``, quoted and escaped.

  Args:
    graph: the search's view of the graph the plan was made for.
    plan: its plan (``plan.check_matches(graph)`` must pass).
    describer: a Describer (to share its cache): which cut variables are
      reductions, for the ``*`` marks.

  Returns:
    The DOT text, ending in a newline; the same inputs give the same text.

  Raises:
    PlanError: the plan was made for another graph.
  """
  return _drawing(graph, plan, describer)[0]


def _drawing(graph: SearchGraph, plan: Plan, describer=None) -> tuple[str, int]:
  """The DOT text and the number of nodes drawn."""
  plan.check_matches(graph)
  nodes, node_of = _nodes(graph, plan, _reduction_vars(describer))
  edges = _edges(graph, plan, node_of)
  return _dot_text(plan, nodes, edges), len(nodes)


def _reduction_vars(describer):
  """op -> the names of its description's reduction variables (for the ``*`` marks)."""
  from tf_tofu.opdefs import analysis
  from tf_tofu.opdefs.registry import Describer
  describer = describer or Describer()

  def of(op) -> frozenset:
    if op is None or op.kind != "compute" or op.context is None:
      return frozenset()
    sem, _ = describer(op.context)
    return frozenset(analysis.facts(sem).reduction_vars) if sem is not None else frozenset()

  return of


def _groups(graph: SearchGraph, plan: Plan) -> list[tuple[str, tuple[str, ...]]]:
  """The plan's op groups in graph order; a compute op it does not group is its own."""
  order = {op.name: i for i, op in enumerate(graph.ops)}
  ops = {op.name: op for op in graph.ops}
  groups = {lead: tuple(m for m in members if m in ops) for lead, members in plan.op_groups.items()}
  grouped = {m for members in groups.values() for m in members}
  for op in graph.ops:
    if op.kind in ("compute", "single") and op.name not in grouped and op.name not in groups:
      groups[op.name] = (op.name,)
  return sorted(groups.items(), key=lambda kv: (min((order[m] for m in kv[1]),
                                                    default=len(order)), kv[0]))


def _nodes(graph: SearchGraph, plan: Plan,
           reductions) -> tuple[dict[str, "_Node"], dict[str, str]]:
  """The drawn nodes (op groups, variables, feeds, converted constants) and the node every
  drawn op belongs to."""
  ops = {op.name: op for op in graph.ops}
  converted = collections.Counter()
  for c in plan.conversions:
    converted[c["tensor"]] += int(c["bytes"])
  nodes: dict[str, _Node] = {}
  node_of: dict[str, str] = {}
  for lead, members in _groups(graph, plan):
    nid = "group:" + lead
    head = ops.get(lead) or (ops[members[0]] if members else None)
    reduced = reductions(head)
    strategy = "/".join(s + ("*" if s in reduced else "") for s in
                        (plan.strategies.get(lead) or
                         (plan.strategies.get(members[0], ()) if members else ()))) or "-"
    single = head is not None and head.kind == "single"
    count = f"{len(members)} op{'s' if len(members) != 1 else ''}"
    nodes[nid] = _Node(nid, f"{lead}\n{head.op_type if head else '?'}, {count}\n{strategy}",
                       {"shape": "ellipse", "style": "filled" if single else None,
                        "fillcolor": "mistyrose" if single else None}, list(members))
    for m in members:
      node_of[m] = nid
  for handle, name in sorted(graph.variables.items(), key=lambda kv: (kv[1], kv[0])):
    t = graph.tensors[handle]
    nid = "var:" + handle
    nodes[nid] = _Node(nid, f"{name}\n{_shape(t.shape)} {t.dtype}\n{_layout(plan, handle)}",
                       {"shape": "box", "style": "filled", "fillcolor": "lightyellow"})
  for op in graph.ops:
    if op.kind in ("read", "update") and op.inputs and op.inputs[0] in graph.variables:
      node_of[op.name] = "var:" + op.inputs[0]
      nodes[node_of[op.name]].ops.append(op.name)
    elif op.kind == "source" and op.outputs and op.outputs[0] not in graph.variables:
      t = graph.tensors[op.outputs[0]]
      if op.op_type in vocabulary.FEED_OPS and t.dtype != "resource":
        nid, attrs = "feed:" + op.name, {"shape": "house"}
      elif any(converted[o] for o in op.outputs):
        nid, attrs = "const:" + op.name, {"shape": "note", "fontsize": 8}
      else:
        continue
      nodes[nid] = _Node(nid, f"{op.name}\n{op.op_type} {_shape(t.shape)} {t.dtype}\n"
                              f"{_layout(plan, op.outputs[0])}", attrs, [op.name])
      node_of[op.name] = nid
  return nodes, node_of


def _edges(graph: SearchGraph, plan: Plan,
           node_of: dict[str, str]) -> dict[tuple[str, str], "_Edge"]:
  """Edges along the data flow, parallel tensors merged, with the conversion bytes: a
  production on every edge of its tensor, a feed on the edges into the ops it feeds."""
  producer = {h: "var:" + h for h in graph.variables}
  for op in graph.ops:
    if op.name in node_of:
      for t in op.outputs:
        producer.setdefault(t, node_of[op.name])
  edges: dict[tuple[str, str], _Edge] = {}
  for op in graph.ops:
    dst = node_of.get(op.name)
    if dst is None:
      continue
    for t in op.inputs:
      src = producer.get(t) if t else None
      if src is None:
        continue
      edges.setdefault((src, dst), _Edge()).tensors.setdefault(t, 0)
  carried: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
  for key, e in edges.items():
    for t in e.tensors:
      carried[t].append(key)
  for c in plan.conversions:
    keys = carried.get(c["tensor"], [])
    if c["what"].startswith("feed "):
      into = {node_of.get(o) for o in c["what"][len("feed "):].split(", ")}
      keys = [k for k in keys if k[1] in into] or keys
    for k in keys:
      edges[k].tensors[c["tensor"]] += int(c["bytes"])
  for (src, dst), e in list(edges.items()):  # a loop shows only what moves inside its group
    if src == dst:
      e.tensors = {t: b for t, b in e.tensors.items() if b}
      if not e.tensors:
        del edges[src, dst]
  return edges


def _dot_text(plan: Plan, nodes: dict[str, "_Node"],
              edges: dict[tuple[str, str], "_Edge"]) -> str:
  """The DOT text: title, nodes with the bytes their ops cause, edges (red where bytes move,
  thicker the more)."""
  most = max((e.bytes for e in edges.values()), default=0)
  factors = " x ".join(map(str, plan.factors)) or "-"
  per_level = ", ".join(human_bytes(b) for b in plan.level_bytes) or "-"
  title = (f"tf_tofu plan ({plan.planner}): k={plan.k} devices, factors {factors}\n"
           f"{human_bytes(plan.total_bytes)} per step ({plan.total_bytes} B); per level {per_level}")
  lines = [
      "digraph tofu_plan {",
      f"  graph {_attrs(label=title, labelloc='t', fontname='Helvetica', rankdir='TB')};",
      f"  node {_attrs(fontname='Helvetica', fontsize=10)};",
      f"  edge {_attrs(fontname='Helvetica', fontsize=9)};",
      f"  {_quote('legend')} {_attrs(label=LEGEND, shape='note', fontsize=9, style='filled', fillcolor='grey95')};",
  ]
  clusters = _clusters(nodes, edges)
  clustered = {nid for members in clusters.values() for nid in members}

  def node_line(node: "_Node", indent: str) -> str:
    moved = sum(plan.op_bytes.get(o, 0) for o in node.ops)
    label = node.label + (f"\n{human_bytes(moved)}" if moved else "")
    tooltip = "\n".join(node.ops + [f"{moved} bytes"])
    return f"{indent}{_quote(node.id)} {_attrs(label=label, tooltip=tooltip, **node.attrs)};"

  for i, (scope, members) in enumerate(clusters.items()):
    lines.append(f"  subgraph {_quote(f'cluster_{i}')} {{")
    lines.append(f"    graph {_attrs(label=scope, style='rounded', color='grey70', fontcolor='grey40')};")
    lines.extend(node_line(nodes[nid], "    ") for nid in members)
    lines.append("  }")
  lines.extend(node_line(node, "  ") for node in nodes.values() if node.id not in clustered)
  for (src, dst), e in edges.items():
    layouts = list(dict.fromkeys(_layout(plan, t) for t in e.tensors))
    label = "; ".join(layouts)
    tooltip = "\n".join(list(e.tensors) + [f"{e.bytes} bytes"])
    if e.bytes:
      width = round(1.5 + 3.5 * e.bytes / most, 2)
      style = dict(color="red", fontcolor="red", penwidth=width)
      label += f"\n{human_bytes(e.bytes)}"
    else:
      style = dict(color="grey60", fontcolor="grey40", penwidth=1)
    lines.append(f"  {_quote(src)} -> {_quote(dst)} "
                 f"{_attrs(label=label, tooltip=tooltip, **style)};")
  lines.append("}")
  return "\n".join(lines) + "\n"


def name_scope(op_name: str) -> str:
  """The name scope an op is drawn in: its first :data:`SCOPE_DEPTH` scopes ("" at top level)."""
  return "/".join(op_name.split("/")[:-1][:SCOPE_DEPTH])


def _clusters(nodes: dict[str, "_Node"], edges) -> dict[str, list[str]]:
  """Name scope -> the drawn nodes in it, for scopes with two nodes or more.

  An op group is in its lead op's scope; a variable in the scope of the groups
  it feeds when they all share one; feeds and constants are in none.
  """
  scope_of: dict[str, str] = {}
  for nid in nodes:
    if nid.startswith("group:"):
      scope_of[nid] = name_scope(nid[len("group:"):])
  fed: dict[str, set] = collections.defaultdict(set)
  for src, dst in edges:
    if src.startswith("var:") and dst in scope_of:
      fed[src].add(scope_of[dst])
  for nid, scopes in fed.items():
    if len(scopes) == 1:
      scope_of[nid] = next(iter(scopes))
  members: dict[str, list[str]] = {}
  for nid in nodes:  # drawing order: deterministic
    if scope_of.get(nid):
      members.setdefault(scope_of[nid], []).append(nid)
  return {scope: ids for scope, ids in members.items() if len(ids) > 1}


def _layout(plan: Plan, tensor: str) -> str:
  return " x ".join(str(s) for s in plan.layouts.get(tensor, ())) or "-"


def _render(dot: str, source: str, fmt: str, out: str) -> Optional[str]:
  """Renders ``source`` as ``out``; None, or why it was not (the .dot stays written)."""
  def run(tmp: str) -> None:
    subprocess.run([dot, f"-T{fmt}", source, "-o", tmp], check=True,
                   timeout=DOT_TIMEOUT_SECONDS, capture_output=True, text=True)
  try:
    inputs.write_atomically(out, run)
  except subprocess.CalledProcessError as e:
    return (f"not rendered as {fmt}: {dot} -T{fmt} failed (exit {e.returncode}): "
            f"{(e.stderr or '').strip()[:500]}")
  except subprocess.TimeoutExpired:
    return (f"not rendered as {fmt}: {dot} took over {DOT_TIMEOUT_SECONDS} s; open the .dot "
            "in a viewer, or render it yourself")
  return None


def write_dot(path: str, graph: SearchGraph, plan: Plan, describer=None,
              render: str = "auto") -> Drawing:
  """Writes :func:`plan_dot` to ``path`` and, with Graphviz installed, renders it beside it.

  The .dot file is written atomically (a temporary file in the same
  directory, then ``os.replace``), creating the directory if needed.  When
  ``dot`` is on PATH, ``<stem>.svg`` and ``<stem>.png`` are rendered next to
  it (``<stem>`` is ``path`` without its extension), each atomically too:
  with ``render="auto"`` only up to :data:`RENDER_LIMITS` drawn nodes,
  ``"always"`` whatever the size, ``"never"`` not at all.  A render that
  fails or takes over :data:`DOT_TIMEOUT_SECONDS` is reported in the notes;
  the .dot file stays.

  Args:
    path: the .dot file to write (not a .svg or .png: those are the renders).
    graph, plan, describer: as for :func:`plan_dot`.
    render: "auto", "always" or "never".

  Returns:
    A :class:`Drawing`: the paths written (the .dot first), and a note per
    render skipped or failed.

  Raises:
    TofuError: ``path`` ends in .svg or .png, or ``render`` is unknown.
  """
  stem, ext = os.path.splitext(path)
  if ext.lower() in tuple("." + f for f in RENDER_FORMATS):
    raise TofuError(f"write_dot({path!r}): give the .dot path; the {ext} is rendered beside it")
  if render not in RENDER_MODES:
    raise TofuError(f"render={render!r}: choose one of {', '.join(RENDER_MODES)}")
  text, count = _drawing(graph, plan, describer)
  inputs.write_text_atomically(path, text)
  written, notes = [path], []
  dot = shutil.which("dot")
  if render == "never":
    return Drawing(tuple(written), ())
  if not dot:
    return Drawing(tuple(written), ("not rendered: Graphviz's dot program is not installed",))
  for fmt in RENDER_FORMATS:
    if render == "auto" and count > RENDER_LIMITS[fmt]:
      notes.append(f"not rendered as {fmt}: {count} nodes > {RENDER_LIMITS[fmt]} (render "
                   "always to force it)")
      continue
    out = f"{stem}.{fmt}"
    why = _render(dot, path, fmt, out)
    if why:
      notes.append(why)
    else:
      written.append(out)
  return Drawing(tuple(written), tuple(notes))


def _event_files(logdir: str, gfile) -> set[str]:
  if not gfile.isdir(logdir):
    return set()
  return {f for f in gfile.listdir(logdir) if "tfevents" in f}


def write_tensorboard(logdir: str, graph_def) -> str:
  """Writes ``graph_def`` as a TensorBoard graph summary in a new event file under ``logdir``.

  Open it with ``tensorboard --logdir <logdir>``: the Graphs tab shows the
  graph and, with "Color: Device", which device runs each node.  Nothing is
  imported or placed, so the devices a partitioned graph names need not exist
  here.  Call it from eager code, TF2's default (while a ``tf.function`` is
  traced it writes from the eager context outside; under a TF1-style
  ``tf.Graph().as_default()`` it cannot, and raises).

  Args:
    logdir: the directory (created if missing; any path ``tf.io.gfile`` takes).
    graph_def: a ``GraphDef`` (or its serialized bytes, or a ``tf.Graph``).

  Returns:
    The path of the event file written.

  Raises:
    RuntimeError: not executing eagerly, or the summary was not written.
  """
  import tensorflow as tf
  from tensorflow.core.framework import graph_pb2
  if isinstance(graph_def, (bytes, bytearray)):
    graph_def = graph_pb2.GraphDef.FromString(bytes(graph_def))
  gfile = tf.io.gfile
  with tf.init_scope():
    if not tf.executing_eagerly():
      raise RuntimeError("write_tensorboard needs eager execution (it is called under a "
                         "tf.Graph().as_default() block)")
    gfile.makedirs(logdir)
    before = _event_files(logdir, gfile)
    writer = tf.summary.create_file_writer(logdir)
    try:
      with writer.as_default():
        ok = tf.summary.graph(graph_def)
      writer.flush()
    finally:
      writer.close()
  new = sorted(_event_files(logdir, gfile) - before)
  mine = [f for f in new if f".{os.getpid()}." in f] or new  # the name carries the writer's pid
  if not ok or not mine:
    raise RuntimeError(f"no graph summary written under {logdir}")
  return os.path.join(logdir, mine[-1])


__all__: Sequence[str] = ("Drawing", "plan_dot", "write_dot", "write_tensorboard")
