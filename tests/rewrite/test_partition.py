"""Tests for tf_tofu.rewrite: the partitioned GraphDef runs, matches, and moves the plan's bytes.

Every plan of every planner, for k in {2, 3, 4, 8}, on random and handmade
graphs, is rewritten in both comm forms and executed on 8 logical CPU devices
(soft placement off); the outputs must equal the unpartitioned graph's and
``count_transfer_bytes`` must equal ``plan.total_bytes`` exactly (fetches are
assembled on the host, so they add nothing).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from tests import cpu_devices  # noqa: E402  (splits the CPU before TensorFlow starts)

K_MAX = cpu_devices.COUNT

from absl.testing import absltest, parameterized  # noqa: E402
from tensorflow.core.framework import graph_pb2  # noqa: E402

from tests import search_testlib  # noqa: E402

from tf_tofu.core import devices as devices_lib  # noqa: E402
from tf_tofu.core import plan as plans  # noqa: E402
from tf_tofu.opdefs.registry import Describer  # noqa: E402
from tf_tofu.core.states import REP, Cut  # noqa: E402
from tf_tofu.ops import count_transfer_bytes, transfer_count  # noqa: E402
from tf_tofu.rewrite import execute, partition_graph_def  # noqa: E402
from tf_tofu.search import evaluate, planners  # noqa: E402
from tf_tofu.search.tofu import SearchOptions  # noqa: E402
from tf_tofu.graph import view  # noqa: E402
from tf_tofu.layout.tiling import held_regions  # noqa: E402

KS = (2, 3, 4, 8)
COMMS = ("plain", "collective")


def setUpModule():
  cpu_devices.require(K_MAX)


# ------------------------------------------------------------------ graphs


def _placeholder(shape, name):
  return tf.compat.v1.placeholder(tf.float32, shape, name=name)


def matmul_chain():
  g = tf.Graph()
  with g.as_default():
    x = _placeholder((8, 6), "x")
    h = tf.raw_ops.Relu(features=tf.raw_ops.MatMul(a=x, b=_placeholder((6, 12), "w1"), name="mm1"))
    h = tf.raw_ops.MatMul(a=h, b=_placeholder((12, 4), "w2"), name="mm2")
    tf.raw_ops.MatMul(a=h, b=_placeholder((6, 4), "w3"), transpose_b=True, name="mm3")
  return g


def conv():
  g = tf.Graph()
  with g.as_default():
    x = _placeholder((2, 8, 8, 3), "x")
    y = tf.raw_ops.Conv2D(input=x, filter=_placeholder((3, 3, 3, 4), "f1"), strides=[1, 1, 1, 1],
                          padding="SAME", name="conv1")
    y = tf.raw_ops.Relu(features=y)
    tf.raw_ops.Conv2D(input=y, filter=_placeholder((3, 3, 4, 4), "f2"), strides=[1, 2, 2, 1],
                      padding="VALID", name="conv2")
  return g


def sums():
  g = tf.Graph()
  with g.as_default():
    x = _placeholder((6, 8), "x")
    tf.raw_ops.Sum(input=x, axis=tf.constant([1]), keep_dims=False, name="rows")
    s = tf.raw_ops.Sum(input=tf.raw_ops.Tanh(x=x), axis=tf.constant([0]), keep_dims=True,
                       name="cols")
    tf.raw_ops.Mean(input=tf.raw_ops.Mul(x=x, y=s), axis=tf.constant([0, 1]), name="mean")
  return g


def reshape():
  g = tf.Graph()
  with g.as_default():
    x = _placeholder((4, 6), "x")
    r = tf.raw_ops.Reshape(tensor=x, shape=tf.constant([2, 2, 6]), name="r1")
    r = tf.raw_ops.Relu(features=r)
    r = tf.raw_ops.Reshape(tensor=r, shape=tf.constant([4, 6]), name="r2")
    tf.raw_ops.MatMul(a=r, b=_placeholder((6, 3), "w"), name="mm")
  return g


def concat():
  g = tf.Graph()
  with g.as_default():
    a, b = _placeholder((4, 3), "a"), _placeholder((4, 5), "b")
    c = tf.raw_ops.ConcatV2(values=[a, b], axis=tf.constant(1), name="cat")
    tf.raw_ops.MatMul(a=c, b=_placeholder((8, 2), "w"), name="mm")
    tf.raw_ops.ConcatV2(values=[tf.raw_ops.Tanh(x=a), a], axis=tf.constant(0), name="cat0")
  return g


def consts():
  g = tf.Graph()
  with g.as_default():
    x = _placeholder((6, 4), "x")
    c = tf.constant(np.arange(24, dtype=np.float32).reshape(6, 4) / 10, name="c")
    w = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="wc")
    tf.raw_ops.MatMul(a=tf.raw_ops.AddV2(x=x, y=c, name="add"), b=w, name="mm")
  return g


HANDMADE = {"matmul_chain": matmul_chain, "conv": conv, "sums": sums, "reshape": reshape,
            "concat": concat, "consts": consts}


# ------------------------------------------------------------------ helpers


def reference_graph_def(fg) -> graph_pb2.GraphDef:
  gd = graph_pb2.GraphDef()
  for op in fg.ops.values():
    gd.node.add().CopyFrom(op.node_def)
  return gd


def run_reference(fg, feeds, fetches):
  gd = reference_graph_def(fg)
  names = list(feeds)

  def body(*args):
    return tf.graph_util.import_graph_def(gd, input_map=dict(zip(names, args)),
                                          return_elements=list(fetches))

  fn = tf.compat.v1.wrap_function(
      body, [tf.TensorSpec(np.shape(feeds[n]), tf.float32) for n in names])
  return {t: v.numpy() for t, v in zip(fetches, fn(*[tf.constant(feeds[n]) for n in names]))}


def make_plan(graph, factors, layouts, strategies, describer, devices=None):
  """A Plan of fixed decisions, priced by search.evaluate."""
  ev = evaluate.evaluate(graph, factors, layouts, strategies, describer)
  k = int(np.prod(factors))
  return plans.Plan(planner="fixed", devices=tuple(devices or devices_lib.resolve(k)),
                    factors=tuple(factors), layouts=dict(layouts), strategies=dict(strategies),
                    total_bytes=ev.total_bytes, level_bytes=ev.level_bytes, op_bytes=ev.op_bytes,
                    conversions=(), choices={}, op_groups={}, objective=float(ev.total_bytes),
                    proven_optimal=False, notes=(), graph_signature=plans.graph_signature(graph))


def node_devices(gd):
  return {n.name: n.device for n in gd.node}


def same_device(a: str, b: str) -> bool:
  sa, sb = tf.DeviceSpec.from_string(a), tf.DeviceSpec.from_string(b)
  return (sa.device_type, sa.device_index) == (sb.device_type, sb.device_index)


class PartitionCase(parameterized.TestCase):

  def check(self, fg, graph, plan, describer, comm, seed=0):
    """Rewrites, checks devices, bytes and outputs; returns the Partitioned."""
    p = partition_graph_def(graph, plan, describer, comm=comm)
    for n in p.graph_def.node:
      self.assertTrue(n.device, f"node {n.name} has no device")
      self.assertIn(n.device, plan.devices)
      self.assertFalse([a for a in n.attr if a.startswith("_")], n.name)
    self.assertEqual(count_transfer_bytes(p.graph_def), plan.total_bytes)
    rng = np.random.default_rng(seed)
    feeds = {t: rng.standard_normal(p.shapes[t]).astype(np.float32) for t in p.feeds}
    got = execute.wrap(p)(feeds)
    want = run_reference(fg, feeds, list(p.fetches))
    for t in p.fetches:
      scale = max(1.0, float(np.abs(want[t]).max()))
      np.testing.assert_allclose(got[t], want[t], rtol=1e-5, atol=1e-5 * scale, err_msg=t)
    return p

  def check_all_planners(self, fg, seed=0):
    describer = Describer()
    graph = view.from_tofu_graph(fg, describer)
    seen = set()
    used = {"collective": 0, "plain": 0}
    runs = [(planner, None) for planner in planners.PLANNERS] + [
        ("tofu", SearchOptions(never_worse=True))]  # with the exact improvement pass
    for k in KS:
      for planner, options in runs:
        res = planners.run(planner, graph, k, describer, options)
        plan = plans.plan_from_search(res, graph, planner, devices_lib.resolve(k))
        key = (k, plan.factors, tuple(sorted(plan.layouts.items())),
               tuple(sorted(plan.strategies.items())))
        if key in seen:
          continue
        seen.add(key)
        for comm in COMMS:
          with self.subTest(k=k, planner=planner, comm=comm):
            p = self.check(fg, graph, plan, describer, comm, seed)
            used["collective"] += p.collective_conversions
            used["plain"] += p.plain_conversions
    return used


class RandomGraphTest(PartitionCase):

  @parameterized.parameters(*range(8))
  def test_every_planner_and_k(self, seed):
    self.check_all_planners(search_testlib.random_graph(seed), seed)


class HandmadeGraphTest(PartitionCase):

  @parameterized.parameters(*sorted(HANDMADE))
  def test_every_planner_and_k(self, name):
    used = self.check_all_planners(search_testlib.graph_from_tf(HANDMADE[name]()))
    self.assertGreater(used["plain"] + used["collective"], 0, "no plan moved anything")


class FixedPlanTest(PartitionCase):
  """Hand-set decisions that exercise each conversion kind, with known pieces."""

  def setUp(self):
    super().setUp()
    g = tf.Graph()
    with g.as_default():
      x, w = _placeholder((8, 6), "x"), _placeholder((6, 4), "w")
      tf.raw_ops.Relu(features=tf.raw_ops.MatMul(a=x, b=w, name="mm"), name="relu")
    self.fg = search_testlib.graph_from_tf(g)
    self.describer = Describer()
    self.graph = view.from_tofu_graph(self.fg, self.describer)

  def plan(self, factors, mm, out, x=None, w=None, devices=None):
    """x @ w -> mm:0 -> relu, both outputs stored ``out``; relu follows its input's cuts."""
    n = len(factors)
    layouts = {"x:0": x or (Cut(0),) * n, "w:0": w or (Cut(0),) * n, "mm:0": out,
               "relu:0": out}
    relu = tuple(f"i{s.dim}" if isinstance(s, Cut) else "replicate" for s in out)
    return make_plan(self.graph, factors, layouts, {"mm": mm, "relu": relu}, self.describer,
                     devices)

  def ops_of(self, p):
    return [n.op for n in p.graph_def.node]

  def test_partial_to_rep_is_an_all_reduce(self):
    plan = self.plan((4,), ("k",), (REP,), x=(Cut(1),))
    # Reduce-scatter then all-gather: 2 S (n - 1) for S = 8 * 4 floats.
    self.assertEqual(plan.total_bytes, 2 * 128 * 3)
    p = self.check(self.fg, self.graph, plan, self.describer, "collective")
    self.assertEqual(self.ops_of(p).count("CollectiveReduceV2"), 4)
    self.assertNotIn("AddN", self.ops_of(p))
    p = self.check(self.fg, self.graph, plan, self.describer, "plain")
    self.assertEqual(self.ops_of(p).count("AddN"), 4)
    self.assertNotIn("CollectiveReduceV2", self.ops_of(p))

  def test_all_reduce_with_replicas_keeps_the_bytes(self):
    # Level 1 cuts k, levels 2 and 3 replicate: 2 keys held by 4 replicas each.
    plan = self.plan((2, 2, 2), ("k", "replicate", "replicate"), (REP,) * 3,
                     x=(Cut(1), REP, REP), w=(Cut(0), REP, REP))
    self.assertEqual(plan.total_bytes, 128 * (2 - 1 + 8 - 1))
    p = self.check(self.fg, self.graph, plan, self.describer, "collective")
    self.assertEqual(self.ops_of(p).count("CollectiveReduceV2"), 2)
    self.assertEqual(p.collective_conversions, 1)

  def test_cut_to_rep_is_an_all_gather(self):
    # x cut on rows at level 1 only, the matmul replicated: x gathered on every device.
    plan = self.plan((2, 2, 2), ("replicate",) * 3, (REP,) * 3, x=(Cut(0), REP, REP),
                     w=(REP,) * 3)
    self.assertEqual(plan.total_bytes, 8 * 6 * 4 * 4)  # 8 devices receive half of x each
    p = self.check(self.fg, self.graph, plan, self.describer, "collective")
    self.assertEqual(self.ops_of(p).count("CollectiveGatherV2"), 8)
    self.assertNotIn("Unpack", self.ops_of(p))  # blocks along dim 0 in rank order

  def test_two_dim_gather_reassembles_blocks(self):
    plan = self.plan((2, 2), ("replicate",) * 2, (REP,) * 2, x=(Cut(1), Cut(0)), w=(REP,) * 2)
    p = self.check(self.fg, self.graph, plan, self.describer, "collective")
    self.assertEqual(self.ops_of(p).count("CollectiveGatherV2"), 4)
    self.assertIn("Unpack", self.ops_of(p))

  def test_uneven_blocks_fall_back_to_plain_pieces(self):
    plan = self.plan((3,), ("replicate",), (REP,), x=(Cut(1),), w=(REP,))  # 6 cols / 3: even
    p = self.check(self.fg, self.graph, plan, self.describer, "collective")
    self.assertEqual(p.collective_conversions, 1)
    g = tf.Graph()
    with g.as_default():
      x, w = _placeholder((7, 6), "x"), _placeholder((6, 4), "w")
      tf.raw_ops.MatMul(a=x, b=w, name="mm")
    fg = search_testlib.graph_from_tf(g)
    graph = view.from_tofu_graph(fg, self.describer)
    plan = make_plan(graph, (3,), {"x:0": (Cut(0),), "w:0": (REP,), "mm:0": (REP,)},
                     {"mm": ("replicate",)}, self.describer)
    p = self.check(fg, graph, plan, self.describer, "collective")
    self.assertEqual((p.collective_conversions, p.plain_conversions), (0, 1))
    self.assertNotIn("CollectiveGatherV2", self.ops_of(p))

  def test_reduce_scatter_on_gpu_names(self):
    # TensorFlow has no CPU reduce-scatter: on CPUs the conversion is plain pieces,
    # on GPUs it is one CollectiveReduceScatterV2 per device (checked without running).
    cpu = self.plan((4,), ("k",), (Cut(0),), x=(Cut(1),))
    self.assertEqual(cpu.total_bytes, 128 * 3)
    p = self.check(self.fg, self.graph, cpu, self.describer, "collective")
    self.assertNotIn("CollectiveReduceScatterV2", self.ops_of(p))
    gpus = [f"/device:GPU:{i}" for i in range(4)]
    for out in (Cut(0), Cut(1)):
      gpu = self.plan((4,), ("k",), (out,), x=(Cut(1),), devices=gpus)
      p = partition_graph_def(self.graph, gpu, self.describer, comm="collective")
      self.assertEqual(self.ops_of(p).count("CollectiveReduceScatterV2"), 4)
      self.assertEqual(self.ops_of(p).count("Transpose"), 8 if out.dim else 0)
      count = transfer_count(p.graph_def)
      self.assertEqual((count.edge_bytes, count.collective_bytes), (0, gpu.total_bytes))

  def test_single_op_runs_on_device_zero(self):
    plan = self.plan((2, 2), ("single",) * 2, (Cut(0), Cut(1)))
    p = self.check(self.fg, self.graph, plan, self.describer, "plain")
    mm = [n for n in p.graph_def.node if n.op == "MatMul"]
    self.assertEqual([n.name for n in mm], ["mm/tofu_d0"])
    self.assertTrue(same_device(mm[0].device, "/device:CPU:0"))

  def test_feed_and_fetch_maps(self):
    plan = self.plan((2, 3), ("i", "j"), (Cut(0), Cut(1)), x=(Cut(0), REP), w=(REP, Cut(1)))
    p = self.check(self.fg, self.graph, plan, self.describer, "plain")
    held = held_regions((8, 6), (Cut(0), REP), (2, 3))
    self.assertEqual([(s.device, s.box, s.placeholder) for s in p.feeds["x:0"]],
                     [(d, held[d], f"x/tofu_shard_{d}") for d in range(6)])
    self.assertEqual(sorted(p.fetches), ["relu:0"])
    boxes = [s.box for s in p.fetches["relu:0"]]
    self.assertEqual(len(boxes), 6)
    self.assertEqual(sum(b.volume for b in boxes), 8 * 4)
    self.assertEqual(p.fetches["relu:0"][0].device, 0)

  def test_attrs_that_override_devices_are_stripped(self):
    fg = search_testlib.graph_from_tf(matmul_chain())
    fg.ops["mm1"].node_def.attr["_class"].list.s.append(b"loc:@x")
    fg.ops["mm1"].node_def.attr["_XlaCompile"].b = True
    graph = view.from_tofu_graph(fg, self.describer)
    res = planners.run("tofu", graph, 2, self.describer)
    plan = plans.plan_from_search(res, graph, "tofu", devices_lib.resolve(2))
    p = self.check(fg, graph, plan, self.describer, "plain")
    for n in p.graph_def.node:
      self.assertNotIn("_class", n.attr)
      self.assertNotIn("_XlaCompile", n.attr)

  def test_a_read_of_no_variable_is_refused(self):
    plan = self.plan((2,), ("i",), (Cut(0),))
    op = self.graph.ops[0]
    graph = dataclasses.replace(self.graph, ops=self.graph.ops + [
        view.SOp("v/Read", "ReadVariableOp", "read", op.context, ("x:0",), ())])
    plan = dataclasses.replace(plan, graph_signature=plans.graph_signature(graph))
    with self.assertRaisesRegex(NotImplementedError, "not a variable"):
      partition_graph_def(graph, plan, self.describer)

  def test_foreign_plan_is_refused(self):
    plan = self.plan((2,), ("i",), (Cut(0),))
    other = view.from_tofu_graph(search_testlib.graph_from_tf(matmul_chain()), self.describer)
    with self.assertRaisesRegex(plans.PlanError, "another graph"):
      partition_graph_def(other, plan, self.describer)

  def test_unknown_comm_is_refused(self):
    with self.assertRaisesRegex(ValueError, "comm="):
      partition_graph_def(self.graph, self.plan((2,), ("i",), (Cut(0),)), self.describer,
                          comm="nccl")


class ScalarSharingTest(absltest.TestCase):

  def test_equal_scalar_work_runs_once_per_device_and_reads_after_a_write_stay(self):
    import tf_tofu
    from tf_tofu.verify import sweep
    counter = tf.Variable(3.0, dtype=tf.float64)
    w1 = tf.Variable(np.arange(12.0).reshape(4, 3))
    w2 = tf.Variable(np.arange(12.0).reshape(4, 3) / 7)

    @tf.function(autograph=False)
    def step(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x, w1) ** 2) + tf.reduce_sum(tf.matmul(x, w2) ** 2)
      g1, g2 = tape.gradient(loss, [w1, w2])
      # The same read of the counter and the same scalar arithmetic per update, as a Keras
      # optimizer does it; then a read after the counter's increment, which must stay.
      w1.assign_sub(1e-3 / tf.sqrt(counter.read_value()) * g1)
      w2.assign_sub(1e-3 / tf.sqrt(counter.read_value()) * g2)
      counter.assign_add(tf.constant(1.0, tf.float64))
      return loss + counter.read_value()

    x = np.random.default_rng(0).normal(size=(6, 4))
    row = sweep.check_step("scalars", step, [(x,), (x * 2,)], 2)
    self.assertEqual(row.mismatches, ())
    self.assertEqual(row.counted, row.predicted)
    p = tf_tofu.function(step, devices=2).partitioned(x)
    (counter_shards,) = [v.shards for v in p.variables.values() if v.shape == ()]
    placeholders = {s.placeholder.split(":")[0] for s in counter_shards}
    sqrt, reads = {}, {}
    for n in p.graph_def.node:
      if n.op == "Sqrt":
        sqrt[n.device] = sqrt.get(n.device, 0) + 1
      if n.op == "ReadVariableOp" and n.input[0].split(":")[0] in placeholders:
        reads[n.device] = reads.get(n.device, 0) + 1
    self.assertEqual(sqrt, {d: 1 for d in p.devices})
    self.assertEqual(reads, {d: 2 for d in p.devices})  # before and after the increment


class PlacementTest(PartitionCase):
  """The run's partition graphs hold every node where the rewrite put it."""

  @parameterized.parameters(*COMMS)
  def test_partition_graphs(self, comm):
    describer = Describer()
    g = tf.Graph()
    with g.as_default():
      x, w = _placeholder((8, 6), "x"), _placeholder((6, 4), "w")
      tf.raw_ops.Relu(features=tf.raw_ops.MatMul(a=x, b=w, name="mm"), name="relu")
    fg = search_testlib.graph_from_tf(g)
    graph = view.from_tofu_graph(fg, describer)
    # Level 1 cuts the contraction, level 2 the rows: mm:0 is all-reduced within groups
    # of 2 (with a copy to the replicas of level 3), relu:0 is then all-gathered.
    layouts = {"x:0": (Cut(1), Cut(0), REP), "w:0": (Cut(0), REP, REP),
               "mm:0": (REP, Cut(0), REP), "relu:0": (REP, REP, REP)}
    plan = make_plan(graph, (2, 2, 2), layouts, {"mm": ("k", "i", "replicate"),
                                                 "relu": ("replicate", "i0", "replicate")},
                     describer)
    p = partition_graph_def(graph, plan, describer, comm=comm)
    ops = [n.op for n in p.graph_def.node]
    if comm == "collective":
      self.assertEqual((ops.count("CollectiveReduceV2"), ops.count("CollectiveGatherV2")), (4, 8))
    count = transfer_count(p.graph_def)
    self.assertEqual(count.total, plan.total_bytes)
    # Grappler would fold and rename nodes; without it the partition graphs are ours.
    with cpu_devices.run_metadata() as collected:
      rng = np.random.default_rng(0)
      feeds = {t: rng.standard_normal(p.shapes[t]).astype(np.float32) for t in p.feeds}
      got = execute.wrap(p)(feeds)
    md = collected[0]
    want = run_reference(fg, feeds, list(p.fetches))
    for t in p.fetches:
      np.testing.assert_allclose(got[t], want[t], rtol=1e-5, atol=1e-5)
    placed = {}
    sends = []
    for f in md.function_graphs:
      for pg in f.partition_graphs:
        for n in pg.node:
          placed[n.name] = n.device
          if n.op == "_Send":
            sends.append(n.input[0].split(":")[0])
    ours = node_devices(p.graph_def)
    found = {n: placed["import/" + n] for n in ours if "import/" + n in placed}
    self.assertEqual(len(found), len(ours))
    for n, dev in found.items():
      self.assertTrue(same_device(dev, ours[n]), f"{n}: placed on {dev}, rewritten to {ours[n]}")
    # One data Send per cross-device (tensor, destination): exactly the counted edges.
    # (Control edges - collectives -> the targets' NoOp - send a dummy constant of TF's.)
    data_sends = [s for s in sends if s.startswith("import/") and s[len("import/"):] in ours]
    self.assertEqual(len(data_sends), len(count.edges))
    self.assertEqual(count.collective_bytes > 0, comm == "collective")


if __name__ == "__main__":
  absltest.main()
