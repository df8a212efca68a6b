"""Pictures of a plan: the coarsened graph in Graphviz, the partitioned graph for TensorBoard.

``plan_dot`` draws the graph the search decided on:

* one node per op group (a forward op with the gradient ops that
  differentiate it, ``Plan.op_groups``), labelled with its lead op, op type,
  member count and strategy per level (``"k/j"``: level 1 cuts the index
  variable ``k``, level 2 ``j``);
* one box per variable, labelled with its name, shape and layout per level;
  its reads and updates are folded into it (a read's value and an update's
  input are tied to the variable's layout, so they are the variable here);
* one edge per pair of connected groups (parallel tensors merged), labelled
  with the layouts per level of the tensors on it and the bytes of their
  conversions (``Plan.conversions``); edges that move bytes are red and
  thicker, the others grey.  Sources (feeds, constants) are left out.

``write_tensorboard`` writes a GraphDef as a graph summary: TensorBoard's
graph view shows the partitioned graph and colours it by device.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import tempfile
from typing import Sequence

from tf_tofu.plans import Plan, _human
from tf_tofu.search.problem import SearchGraph


def _quote(text: str) -> str:
  return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _layout(plan: Plan, tensor: str) -> str:
  return " x ".join(str(s) for s in plan.layouts.get(tensor, ())) or "-"


def plan_dot(graph: SearchGraph, plan: Plan, describer=None) -> str:
  """The DOT text of the coarsened graph under ``plan`` (module docstring)."""
  del describer  # the groups and layouts are the plan's
  node_of: dict[str, str] = {}   # op -> its DOT node
  for lead, members in sorted(plan.op_groups.items()):
    for m in members:
      node_of[m] = "g:" + lead
  var_node = {h: "v:" + name for h, name in graph.variables.items()}
  producer: dict[str, str] = {}
  for op in graph.ops:
    if op.kind in ("read", "update") and op.inputs and op.inputs[0] in var_node:
      node_of[op.name] = var_node[op.inputs[0]]
    for t in op.outputs:
      producer[t] = op.name
  for h, v in var_node.items():
    producer[h] = v
  conv_bytes: dict[str, int] = collections.defaultdict(int)
  for c in plan.conversions:
    conv_bytes[c["tensor"]] += int(c["bytes"])
  edges: dict[tuple[str, str], dict] = {}
  for op in graph.ops:
    dst = node_of.get(op.name)
    if dst is None:
      continue
    for t in op.inputs:
      if not t:
        continue
      src_op = producer.get(t)
      src = var_node.get(t) or node_of.get(src_op or "")
      if src is None or src == dst:
        continue
      e = edges.setdefault((src, dst), {"tensors": [], "bytes": 0})
      if t not in e["tensors"]:
        e["tensors"].append(t)
        e["bytes"] += conv_bytes.get(t, 0)
  lines = [
      "digraph tofu_plan {",
      f"  label={_quote(f'tf_tofu plan ({plan.planner}): {plan.k} devices, levels ' + ' x '.join(map(str, plan.factors)) + f'; {_human(plan.total_bytes)} per step')};",
      "  labelloc=t; rankdir=TB; node [fontname=Helvetica, fontsize=10];"
      " edge [fontname=Helvetica, fontsize=9];",
  ]
  types = {op.name: op.op_type for op in graph.ops}
  for lead, members in sorted(plan.op_groups.items()):
    strategy = "/".join(plan.strategies.get(lead, plan.strategies.get(members[0], ())))
    label = f"{lead}\n{types.get(lead, '?')} x{len(members)}\n{strategy or '-'}"
    lines.append(f"  {_quote('g:' + lead)} [shape=ellipse, label={_quote(label)}];")
  for h, node in sorted(var_node.items(), key=lambda kv: kv[1]):
    shape = "x".join(map(str, graph.tensors[h].shape)) or "scalar"
    label = f"{graph.variables[h]}\n{shape}\n{_layout(plan, h)}"
    lines.append(f"  {_quote(node)} [shape=box, style=filled, fillcolor=lightyellow, "
                 f"label={_quote(label)}];")
  for (src, dst), e in sorted(edges.items()):
    layouts = sorted({_layout(plan, t) for t in e["tensors"]})
    label = "; ".join(layouts)
    if e["bytes"]:
      label += f"\n{_human(e['bytes'])}"
      style = "color=red, penwidth=2"
    else:
      style = "color=grey60"
    lines.append(f"  {_quote(src)} -> {_quote(dst)} [label={_quote(label)}, {style}];")
  lines.append("}")
  return "\n".join(lines) + "\n"


def _atomic_write(path: str, text: str) -> None:
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=".tofu-", dir=parent)
  with os.fdopen(fd, "w") as f:
    f.write(text)
  os.replace(tmp, path)


def write_dot(path: str, graph: SearchGraph, plan: Plan, describer=None) -> list[str]:
  """Writes ``path`` (DOT) and, when Graphviz's ``dot`` is installed, ``.svg`` and ``.png``
  beside it; returns the paths written."""
  _atomic_write(path, plan_dot(graph, plan, describer))
  written = [path]
  dot = shutil.which("dot")
  if dot:
    stem = os.path.splitext(path)[0]
    for fmt in ("svg", "png"):
      subprocess.run([dot, f"-T{fmt}", path, "-o", f"{stem}.{fmt}"], check=True, timeout=300,
                     capture_output=True)
      written.append(f"{stem}.{fmt}")
  return written


def write_tensorboard(logdir: str, graph_def) -> str:
  """Writes ``graph_def`` as a graph summary under ``logdir``; returns ``logdir``."""
  import tensorflow as tf
  os.makedirs(logdir, exist_ok=True)
  writer = tf.summary.create_file_writer(logdir)
  with writer.as_default():
    tf.summary.graph(graph_def)
  writer.flush()
  writer.close()
  return logdir


__all__: Sequence[str] = ("plan_dot", "write_dot", "write_tensorboard")
