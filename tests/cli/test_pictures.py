"""Tests for tf_tofu.cli.pictures: the plan's DOT drawing, its files, the TensorBoard graph summary.

The DOT text is read back with a small parser of the DOT subset ``plan_dot``
writes (quoted ids, attribute lists, ``->`` edges), so every assertion is on
the parsed graph: declared nodes, edge endpoints, labels, tooltips.
"""

import collections
import dataclasses
import functools
import os
import re
import shutil
import stat
import tempfile
from unittest import mock

import tensorflow as tf
from absl.testing import absltest, parameterized

import tf_tofu
from tf_tofu import graph as graph_lib, models
from tf_tofu.cli import pictures
from tf_tofu.opdefs import analysis
from tf_tofu.opdefs.registry import Describer
from tf_tofu.core.states import REP, Cut
from tf_tofu.core.plan import Plan, human_bytes, graph_signature
from tf_tofu.graph import view

REMOTE = tuple(f"/job:worker/replica:0/task:0/device:GPU:{i}" for i in range(4))
_TOKEN = re.compile(r'\s+|"((?:[^"\\]|\\.)*)"|(->)|([\[\]{};,=])|([A-Za-z0-9_.]+)')
_BYTES = re.compile(r"^(\d+) bytes$")


@functools.lru_cache(maxsize=None)
def planned(key, devices=4):
  """``(search graph, plan, describer)`` of the tiny zoo model ``key`` (cached per module)."""
  step = models.tiny(key)
  g = graph_lib.trace(step.fn, *step.input_signature)
  describer = Describer()
  sgraph = view.from_tofu_graph(g, describer)
  return sgraph, tf_tofu.plan(g, devices=devices, describer=describer), describer


def _unescape(text):
  return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse_dot(text):
  """The DOT subset plan_dot writes -> ``(defaults, [(id, attrs)], [(src, dst, attrs)])``.

  The legend node is returned among the defaults (``defaults["legend"]``), not the nodes.

  Raises AssertionError on anything else: an unbalanced brace or bracket, an
  unterminated string, a statement that is not a node, edge or default list.
  """
  tokens, pos, depth = [], 0, 0
  while pos < len(text):
    m = _TOKEN.match(text, pos)
    if not m:
      raise AssertionError(f"cannot tokenize at {pos}: {text[pos:pos + 40]!r}")
    pos = m.end()
    if m.group(1) is not None:
      tokens.append(("str", _unescape(m.group(1))))
    elif m.group(2) or m.group(3):
      tok = m.group(2) or m.group(3)
      depth += {"{": 1, "}": -1}.get(tok, 0)
      if depth < 0:
        raise AssertionError("a '}' closes nothing")
      tokens.append(("op", tok))
    elif m.group(4):
      tokens.append(("word", m.group(4)))
  if depth:
    raise AssertionError(f"unbalanced braces (depth {depth} at the end)")
  if tokens[:3] != [("word", "digraph"), ("word", "tofu_plan"), ("op", "{")] or \
      tokens[-1] != ("op", "}"):
    raise AssertionError("not one 'digraph tofu_plan { ... }'")
  body, i = tokens[3:-1], 0

  def attrs():
    nonlocal i
    out = {}
    if body[i] != ("op", "["):
      raise AssertionError(f"expected '[' at token {i}: {body[i]}")
    i += 1
    while body[i] != ("op", "]"):
      (kk, key), eq, (vk, value) = body[i:i + 3]
      if kk != "word" or eq != ("op", "=") or vk not in ("str", "word"):
        raise AssertionError(f"bad attribute at token {i}: {body[i:i + 3]}")
      if key in out:
        raise AssertionError(f"attribute {key} twice")
      out[key] = value
      i += 3
      if body[i] == ("op", ","):
        i += 1
    i += 1
    return out

  defaults, nodes, edges = {}, [], []
  clusters, cluster = {}, None  # cluster label -> node ids; the cluster being read
  while i < len(body):
    kind, value = body[i]
    if kind == "word" and value == "subgraph":
      if cluster is not None or body[i + 1][0] != "str" or body[i + 2] != ("op", "{"):
        raise AssertionError(f"bad or nested subgraph at token {i}")
      cluster = {"id": body[i + 1][1], "nodes": []}
      i += 3
      continue
    if (kind, value) == ("op", "}"):
      if cluster is None or "label" not in cluster:
        raise AssertionError(f"'}}' at token {i} closes no labelled subgraph")
      clusters[cluster["label"]] = cluster["nodes"]
      cluster = None
      i += 1
      continue
    if kind == "word" and value == "graph" and cluster is not None:
      i += 1
      cluster["label"] = attrs()["label"]
    elif kind == "word" and value in ("graph", "node", "edge"):
      i += 1
      defaults[value] = attrs()
    elif kind == "str" and body[i + 1] == ("op", "->"):
      if body[i + 2][0] != "str":
        raise AssertionError(f"edge to a non-id at token {i}")
      src, dst = value, body[i + 2][1]
      i += 3
      edges.append((src, dst, attrs()))
    elif kind == "str":
      i += 1
      if value == "legend":
        defaults["legend"] = attrs()
      else:
        nodes.append((value, attrs()))
        if cluster is not None:
          cluster["nodes"].append(value)
    else:
      raise AssertionError(f"unexpected token {body[i]} at {i}")
    if body[i] != ("op", ";"):
      raise AssertionError(f"statement not ended by ';' at token {i}: {body[i]}")
    i += 1
  if cluster is not None:
    raise AssertionError("a subgraph is not closed")
  defaults["clusters"] = clusters
  return defaults, nodes, edges


def tooltip_bytes(attrs):
  """``(names, exact bytes)`` from a node's or edge's tooltip."""
  *names, last = attrs["tooltip"].split("\n")
  m = _BYTES.match(last)
  if not m:
    raise AssertionError(f"tooltip does not end in 'N bytes': {attrs['tooltip']!r}")
  return names, int(m.group(1))


def layout(plan, tensor):
  return " x ".join(str(s) for s in plan.layouts[tensor])


class ZooDotTest(parameterized.TestCase):

  @parameterized.parameters("mlp", "gpt")
  def test_structure(self, key):
    sgraph, plan, describer = planned(key)
    text = pictures.plan_dot(sgraph, plan, describer)
    defaults, nodes, edges = parse_dot(text)
    ops = {op.name: op for op in sgraph.ops}

    # The title: planner, k, factors, total bytes in human form (and exact).
    title = defaults["graph"]["label"]
    self.assertIn(f"({plan.planner})", title)
    self.assertIn(f"k={plan.k} devices", title)
    self.assertIn("factors " + " x ".join(map(str, plan.factors)), title)
    self.assertIn(f"{human_bytes(plan.total_bytes)} per step ({plan.total_bytes} B)", title)
    self.assertGreater(plan.total_bytes, 0)

    # Every op group exactly once, with its type, member count and strategy per level.
    ids = collections.Counter(nid for nid, _ in nodes)
    self.assertEqual([n for n, c in ids.items() if c > 1], [])
    declared = {nid: a for nid, a in nodes}
    groups = {nid for nid in declared if nid.startswith("group:")}
    self.assertEqual(groups, {"group:" + lead for lead in plan.op_groups})
    for lead, members in plan.op_groups.items():
      attrs = declared["group:" + lead]
      lines = attrs["label"].split("\n")
      self.assertEqual(lines[0], lead)
      self.assertEqual(lines[1], f"{ops[lead].op_type}, {len(members)} op"
                                 + ("s" if len(members) != 1 else ""))
      sem, _ = describer(ops[lead].context)
      reductions = analysis.facts(sem).reduction_vars  # starred: partial sums, all-reduced
      self.assertEqual(lines[2], "/".join(s + ("*" if s in reductions else "")
                                          for s in plan.strategies[lead]))
      self.assertEqual(tooltip_bytes(attrs)[0], list(members))
    self.assertGreater(len(plan.op_groups), 10)

    # Variables: one box each, with name, shape and layout per level.
    for handle, name in sgraph.variables.items():
      attrs = declared["var:" + handle]
      self.assertEqual(attrs["shape"], "box")
      shape = "x".join(map(str, sgraph.tensors[handle].shape)) or "scalar"
      self.assertEqual(attrs["label"].split("\n"),
                       [name, f"{shape} {sgraph.tensors[handle].dtype}", layout(plan, handle)])

    # Every conversion byte is charged to the node of the op that causes it.
    self.assertEqual(sum(tooltip_bytes(a)[1] for a in declared.values()), plan.total_bytes)

    # Edges: declared endpoints, no parallel duplicates, data flow, bytes and colours.
    self.assertEqual(len(edges), len({(s, d) for s, d, _ in edges}))
    node_ops = {nid: set(tooltip_bytes(a)[0]) for nid, a in declared.items()}
    carried = collections.defaultdict(list)
    moving = 0
    for src, dst, attrs in edges:
      self.assertIn(src, declared)
      self.assertIn(dst, declared)
      tensors, moved = tooltip_bytes(attrs)
      self.assertTrue(tensors)
      for t in tensors:
        carried[t].append(moved)
        self.assertTrue(any(t in ops[o].inputs for o in node_ops[dst]), (t, dst))
        self.assertTrue(src == "var:" + t or any(t in ops[o].outputs for o in node_ops[src]),
                        (t, src))
      label = attrs["label"].split("\n")
      self.assertEqual(label[0].split("; "),
                       list(dict.fromkeys(layout(plan, t) for t in tensors)))
      if moved:
        moving += 1
        self.assertEqual(label[1:], [human_bytes(moved)])
        self.assertEqual(attrs["color"], "red")
        self.assertGreater(float(attrs["penwidth"]), 1)
      else:
        self.assertLen(label, 1)
        self.assertEqual(attrs["color"], "grey60")
        self.assertNotEqual(src, dst)   # loops are drawn only when bytes move inside a group
    self.assertGreater(moving, 0)
    for c in plan.conversions:  # a converted tensor's bytes show on an edge that carries it
      if c["tensor"] in carried:
        self.assertGreaterEqual(max(carried[c["tensor"]]), c["bytes"], c)
    self.assertIn(plan.conversions[0]["tensor"], carried)

  def test_keras_layers_are_framed_by_name_scope(self):
    step = models.tiny("gpt", flavor="keras")
    g = graph_lib.trace(step.fn, *step.input_signature)
    describer = Describer()
    sgraph = view.from_tofu_graph(g, describer)
    plan = tf_tofu.plan(g, devices=2, describer=describer)
    defaults, nodes, _ = parse_dot(pictures.plan_dot(sgraph, plan, describer))
    clusters = defaults["clusters"]
    self.assertGreater(len(clusters), 2)
    for scope, ids in clusters.items():
      self.assertLessEqual(scope.count("/"), pictures.SCOPE_DEPTH - 1, scope)
      self.assertGreater(len(ids), 1, scope)
      for nid in ids:
        if nid.startswith("group:"):
          self.assertEqual(pictures.name_scope(nid[len("group:"):]), scope)
    framed = [nid for ids in clusters.values() for nid in ids]
    self.assertEqual(len(framed), len(set(framed)))          # a node in one frame at most
    self.assertTrue(set(framed) <= {n for n, _ in nodes})
    self.assertTrue(any(nid.startswith("var:") for nid in framed))  # a layer's weights
    self.assertTrue(any(scope.count("/") == 1 for scope in clusters))  # "model/layer"

  @parameterized.parameters("mlp", "gpt")
  def test_deterministic(self, key):
    sgraph, plan, describer = planned(key)
    text = pictures.plan_dot(sgraph, plan, describer)
    self.assertEqual(pictures.plan_dot(sgraph, plan, describer), text)
    # The plan's dict order does not matter: a JSON round trip sorts every dict.
    self.assertEqual(pictures.plan_dot(sgraph, Plan.from_json(plan.to_json())), text)

  def test_other_graph_is_refused(self):
    sgraph, _, _ = planned("mlp")
    _, gpt_plan, _ = planned("gpt")
    with self.assertRaisesRegex(ValueError, "another graph"):
      pictures.plan_dot(sgraph, gpt_plan)


def _op(name, op_type, kind, inputs, outputs):
  return view.SOp(name, op_type, kind, None, tuple(inputs), tuple(outputs))


class HandMadeDotTest(absltest.TestCase):
  """A graph with awkward names and known conversions: the exact edges and bytes."""

  def setUp(self):
    super().setUp()
    a = 'a/"b":c\\d'
    t = {name: view.STensor(name, shape, "float32", 4) for name, shape in [
        ('in"put:0', (4, 2)), ("w:0", (2, 2)), ("r:0", (2, 2)), ("a:0", (4, 2)),
        ("a:1", (4, 2)), ("p:0", (4, 2)), ("gp:0", (2, 2)), ("q:0", (4, 2)), ("c:0", (4, 2)),
        ("c2:0", (4, 2))]}
    self.graph = view.SearchGraph(tensors=t, ops=[
        _op('in"put', "Placeholder", "source", [], ['in"put:0']),
        _op("w", "VarHandleOp", "source", [], ["w:0"]),
        _op("c", "Const", "source", [], ["c:0"]),
        _op("c2", "Const", "source", [], ["c2:0"]),
        _op("r", "ReadVariableOp", "read", ["w:0"], ["r:0"]),
        _op(a, "MatMul", "compute", ['in"put:0', "r:0"], ["a:0", "a:1"]),
        _op("p", "AddV2", "compute", ["a:0", "a:1", None], ["p:0"]),
        _op("q", "Foo", "single", ["a:0", "c:0", "c2:0"], ["q:0"]),
        _op("gp", "Sum", "compute", ["p:0"], ["gp:0"]),
        _op("u", "AssignSubVariableOp", "update", ["w:0", "gp:0"], []),
    ], variables={"w:0": 'w"var'}, var_gradients={}, forward_op_of={"gp": "p"},
        gradient_of={})
    conversions = (
        {"tensor": "a:0", "what": f"produce {a}", "bytes": 100, "level_bytes": [100]},
        {"tensor": "a:1", "what": "feed p", "bytes": 30, "level_bytes": [30]},
        {"tensor": "a:0", "what": "feed q", "bytes": 20, "level_bytes": [20]},
        {"tensor": "gp:0", "what": "feed u", "bytes": 11, "level_bytes": [11]},
        {"tensor": 'in"put:0', "what": f"feed {a}", "bytes": 7, "level_bytes": [7]},
        {"tensor": "p:0", "what": "feed gp", "bytes": 5, "level_bytes": [5]},
        {"tensor": "c2:0", "what": "feed q", "bytes": 3, "level_bytes": [3]},
    )
    self.plan = Plan(
        planner="tofu", devices=REMOTE[:2], factors=(2,),
        layouts={name: ((REP,) if name in ("w:0", "r:0", "gp:0") else (Cut(0),)) for name in t},
        strategies={a: ("i",), "p": ("i0",), "gp": ("i0",), "q": ("single",)},
        total_bytes=176, level_bytes=(176,),
        op_bytes={a: 107, "p": 30, "gp": 5, "q": 23, "u": 11}, conversions=conversions,
        choices={}, op_groups={a: (a,), "p": ("p", "gp"), "q": ("q",)}, objective=176.0,
        proven_optimal=True, notes=(), graph_signature=graph_signature(self.graph))
    self.a = a

  def test_exact_edges(self):
    defaults, nodes, edges = parse_dot(pictures.plan_dot(self.graph, self.plan))
    a = "group:" + self.a
    # Scope "a" frames its group and the variable only it reads; p and q are top level.
    self.assertEqual(defaults["clusters"], {"a": [a, "var:w:0"]})
    self.assertEqual([n for n, _ in nodes],
                     [a, "var:w:0", "group:p", "group:q", 'feed:in"put', "const:c2"])
    got = {(s, d): (tooltip_bytes(x), x["label"]) for s, d, x in edges}
    self.assertEqual(got, {
        ('feed:in"put', a): ((['in"put:0'], 7), "cut(0)\n7 B"),
        ("var:w:0", a): ((["r:0"], 0), "rep"),
        (a, "group:p"): ((["a:0", "a:1"], 130), "cut(0)\n130 B"),   # merged; not q's feed
        (a, "group:q"): ((["a:0"], 120), "cut(0)\n120 B"),          # production + its feed
        ("const:c2", "group:q"): ((["c2:0"], 3), "cut(0)\n3 B"),
        ("group:p", "group:p"): ((["p:0"], 5), "cut(0)\n5 B"),      # inside the group
        ("group:p", "var:w:0"): ((["gp:0"], 11), "rep\n11 B"),       # the update, into the box
    })
    declared = dict(nodes)
    self.assertEqual(declared[a]["label"], f"{self.a}\nMatMul, 1 op\ni\n107 B")
    self.assertEqual(declared["group:p"]["label"], "p\nAddV2, 2 ops\ni0\n35 B")
    self.assertEqual(declared["group:q"]["fillcolor"], "mistyrose")   # left whole
    self.assertEqual(declared["var:w:0"]["label"], 'w"var\n2x2 float32\nrep\n11 B')
    self.assertEqual(tooltip_bytes(declared["var:w:0"]), (["r", "u"], 11))
    widths = {(s, d): float(x["penwidth"]) for s, d, x in edges}
    self.assertEqual(widths[a, "group:p"], 5.0)   # the heaviest edge is the thickest
    self.assertLess(widths["const:c2", "group:q"], widths[a, "group:q"])

  def test_ops_the_plan_does_not_group_get_a_node(self):
    plan = dataclasses.replace(self.plan, op_groups={"p": ("p", "gp")})
    _, nodes, edges = parse_dot(pictures.plan_dot(self.graph, plan))
    ids = [n for n, _ in nodes]
    self.assertIn("group:" + self.a, ids)
    self.assertIn("group:q", ids)
    self.assertTrue(all(s in ids and d in ids for s, d, _ in edges))


class WriteDotTest(absltest.TestCase):

  def _fake_dot(self, body):
    """A ``dot`` on PATH that runs ``body`` (sh) with Graphviz's ``-T<fmt> <in> -o <out>``."""
    bindir = tempfile.mkdtemp()
    script = os.path.join(bindir, "dot")
    with open(script, "w") as f:
      f.write("#!/bin/sh\nfmt=${1#-T}; src=$2; out=$4\n" + body + "\n")
    os.chmod(script, os.stat(script).st_mode | stat.S_IXUSR)
    return mock.patch.dict(os.environ, {"PATH": bindir + os.pathsep + os.environ["PATH"]})

  def test_writes_the_dot_and_renders_when_graphviz_exists(self):
    sgraph, plan, describer = planned("mlp")
    out = os.path.join(tempfile.mkdtemp(), "new_dir")
    path = os.path.join(out, "plan.dot")
    drawing = pictures.write_dot(path, sgraph, plan, describer)
    written = list(drawing.written)
    with open(path) as f:
      self.assertEqual(f.read(), pictures.plan_dot(sgraph, plan, describer))
    self.assertEqual(sorted(os.listdir(out)), sorted(os.path.basename(w) for w in written))
    if shutil.which("dot") is None:
      self.assertEqual(written, [path])
      self.assertEqual(drawing.notes, ("not rendered: Graphviz's dot program is not installed",))
    else:
      self.assertEqual(drawing.notes, ())
      self.assertEqual(written, [path, os.path.join(out, "plan.svg"),
                                 os.path.join(out, "plan.png")])
      with open(written[1]) as f:
        self.assertIn("<svg", f.read())
      with open(written[2], "rb") as f:
        self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

  def test_renders_svg_and_png_beside_it(self):
    sgraph, plan, describer = planned("mlp")
    out = tempfile.mkdtemp()
    path = os.path.join(out, "plan.dot")
    with self._fake_dot('{ echo "$fmt"; cat "$src"; } > "$out"'):
      drawing = pictures.write_dot(path, sgraph, plan, describer)
    stem = os.path.join(out, "plan")
    self.assertEqual(drawing, pictures.Drawing((path, stem + ".svg", stem + ".png"), ()))
    self.assertEqual(sorted(os.listdir(out)), ["plan.dot", "plan.png", "plan.svg"])  # no temps
    text = pictures.plan_dot(sgraph, plan, describer)
    for fmt in ("svg", "png"):
      with open(f"{stem}.{fmt}") as f:
        self.assertEqual(f.read(), f"{fmt}\n{text}")

  def test_a_failing_dot_is_reported_and_leaves_the_dot_file(self):
    sgraph, plan, describer = planned("mlp")
    out = tempfile.mkdtemp()
    path = os.path.join(out, "plan.dot")
    with self._fake_dot('echo "syntax error in line 1" >&2; echo x > "$out"; exit 3'):
      drawing = pictures.write_dot(path, sgraph, plan, describer)  # reported, not raised
    self.assertEqual(drawing.written, (path,))
    self.assertLen(drawing.notes, 2)
    for fmt, note in zip(("svg", "png"), drawing.notes):
      self.assertRegex(note, f"not rendered as {fmt}: .* failed \\(exit 3\\): syntax error in line 1")
    self.assertEqual(os.listdir(out), ["plan.dot"])

  def test_a_slow_dot_is_reported_and_large_drawings_are_not_rendered(self):
    sgraph, plan, describer = planned("mlp")
    out = tempfile.mkdtemp()
    path = os.path.join(out, "plan.dot")
    with self._fake_dot('sleep 5; echo x > "$out"'), \
        mock.patch.object(pictures, "DOT_TIMEOUT_SECONDS", 0.5):
      drawing = pictures.write_dot(path, sgraph, plan, describer, render="always")
    self.assertEqual(drawing.written, (path,))
    self.assertEqual([n.split(":")[0] for n in drawing.notes],
                     ["not rendered as svg", "not rendered as png"])
    self.assertIn("took over 0.5 s", drawing.notes[0])
    _, nodes, _ = parse_dot(pictures.plan_dot(sgraph, plan, describer))
    with self._fake_dot('echo x > "$out"'), \
        mock.patch.dict(pictures.RENDER_LIMITS, {"svg": len(nodes), "png": len(nodes) - 1}):
      drawing = pictures.write_dot(path, sgraph, plan, describer)
      self.assertEqual(drawing.written, (path, os.path.join(out, "plan.svg")))
      self.assertEqual(drawing.notes, (f"not rendered as png: {len(nodes)} nodes > "
                                       f"{len(nodes) - 1} (render always to force it)",))
      never = pictures.write_dot(path, sgraph, plan, describer, render="never")
      self.assertEqual(never, pictures.Drawing((path,), ()))
    with self.assertRaisesRegex(ValueError, "render='sometimes'"):
      pictures.write_dot(path, sgraph, plan, describer, render="sometimes")

  def test_the_legend_explains_the_letters(self):
    sgraph, plan, describer = planned("mlp")
    defaults, _, _ = parse_dot(pictures.plan_dot(sgraph, plan, describer))
    legend = defaults["legend"]["label"]
    for words in ("op group", "reduction variable", "all-reduce", "cut(d)", "rep", "red edge"):
      self.assertIn(words, legend)

  def test_refuses_a_render_path(self):
    sgraph, plan, describer = planned("mlp")
    path = os.path.join(tempfile.mkdtemp(), "plan.svg")
    with self.assertRaisesRegex(ValueError, "the .dot path"):
      pictures.write_dot(path, sgraph, plan, describer)
    self.assertFalse(os.path.exists(path))


class TensorBoardTest(absltest.TestCase):

  def test_partitioned_graph_round_trips_through_the_event_file(self):
    from tf_tofu.rewrite import partition_graph_def
    sgraph, plan, describer = planned("mlp", REMOTE)   # devices that do not exist here
    gd = partition_graph_def(sgraph, plan, describer).graph_def
    self.assertEqual({n.device for n in gd.node}, set(REMOTE))
    logdir = os.path.join(tempfile.mkdtemp(), "tb")
    path = pictures.write_tensorboard(logdir, gd)
    self.assertEqual(os.path.dirname(path), logdir)
    self.assertIn("tfevents", os.path.basename(path))
    graphs = [tf.compat.v1.GraphDef.FromString(e.graph_def)
              for e in tf.compat.v1.train.summary_iterator(path) if e.HasField("graph_def")]
    self.assertLen(graphs, 1)
    self.assertLen(graphs[0].node, len(gd.node))
    self.assertEqual([(n.name, n.op, n.device) for n in graphs[0].node],
                     [(n.name, n.op, n.device) for n in gd.node])
    again = pictures.write_tensorboard(logdir, gd.SerializeToString())
    self.assertNotEqual(again, path)
    self.assertEqual(sorted(os.listdir(logdir)), sorted([os.path.basename(path),
                                                         os.path.basename(again)]))

  def test_refuses_graph_mode(self):
    logdir = os.path.join(tempfile.mkdtemp(), "tb")
    with tf.Graph().as_default():
      with self.assertRaisesRegex(RuntimeError, "eager"):
        pictures.write_tensorboard(logdir, tf.compat.v1.GraphDef())
    self.assertFalse(os.path.exists(logdir))


if __name__ == "__main__":
  absltest.main()
