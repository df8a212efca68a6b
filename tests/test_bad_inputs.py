"""Bad input never gives a silently wrong graph: a clear error, or a correct fallback.

Every case of the verification issue's list, through the public API: each
either raises an error that names the op or tensor and the way out, or runs
and equals the unpartitioned step (float64, the fixed bound of
``tf_tofu.verify.equivalence``).  The command line's own cases (output
paths, --feeds, --devices) are in test_cli.py.
"""

import json

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tests import cpu_devices
import tf_tofu  # noqa: E402
from tf_tofu import api  # noqa: E402
from tf_tofu.graph import TofuGraph  # noqa: E402
from tf_tofu.graph.ingest import IngestError  # noqa: E402
from tf_tofu.opdefs.registry import Describer  # noqa: E402
from tf_tofu.core.plan import Plan, PlanError  # noqa: E402
from tf_tofu.graph import view  # noqa: E402
from tf_tofu.verify import equivalence  # noqa: E402

X = tf.TensorSpec([6, 4], tf.float64)


def setUpModule():
  cpu_devices.require()


def _sgd_step(w):
  @tf.function(autograph=False)
  def step(x):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
    w.assign_sub(0.01 * tape.gradient(loss, w))
    return loss
  return step


def _inputs(n=2, shape=(6, 4)):
  rng = np.random.default_rng(0)
  return [(rng.normal(size=shape),) for _ in range(n)]


class RunsCorrectlyTest(absltest.TestCase):
  """Odd requests that have a right answer: it must be the answer."""

  def assertEquivalent(self, step, inputs, **kw):
    ref = equivalence.Reference(step, inputs)
    f = tf_tofu.function(step, **kw)
    self.assertEqual([str(m) for m in ref.compare(f)], [])
    return f

  def test_one_device(self):
    w = tf.Variable(np.ones((4, 3)), dtype=tf.float64)
    f = self.assertEquivalent(_sgd_step(w), _inputs(), devices=1)
    self.assertEqual(f.plan(*_inputs()[0]).total_bytes, 0)

  def test_more_devices_than_any_dim(self):
    w = tf.Variable(np.linspace(0, 1, 6).reshape(2, 3), dtype=tf.float64)
    self.assertEquivalent(_sgd_step(w), _inputs(shape=(3, 2)), devices=8)

  def test_zero_size_batch(self):
    w = tf.Variable(np.ones((4, 3)), dtype=tf.float64)
    self.assertEquivalent(_sgd_step(w), _inputs(shape=(0, 4)), devices=4)

  def test_step_without_variables(self):
    step = tf.function(lambda x: tf.reduce_sum(tf.nn.relu(x) ** 2), autograph=False)
    self.assertEquivalent(step, _inputs(), devices=3)

  def test_integer_bool_and_string_tensors(self):
    @tf.function(autograph=False)
    def step(x):
      positive = x > 0
      count = tf.reduce_sum(tf.cast(positive, tf.int32), axis=1)
      return count, tf.strings.length(tf.strings.as_string(count)), tf.reduce_all(positive)
    f = tf_tofu.function(step, devices=4)
    (x,) = _inputs()[0]
    for got, want in zip(f(x), step(x)):
      np.testing.assert_array_equal(got.numpy(), want.numpy())

  def test_a_step_that_returns_nothing_still_updates(self):
    w = tf.Variable(np.ones((4, 3)), dtype=tf.float64)

    @tf.function(autograph=False)
    def step(x):
      w.assign_sub(0.1 * tf.matmul(tf.transpose(x), x)[:, :3])
    f = tf_tofu.function(step, devices=2)
    (x,) = _inputs()[0]
    self.assertIsNone(f(x))
    f.sync_variables()
    np.testing.assert_allclose(w.numpy(), 1.0 - 0.1 * (x.T @ x)[:, :3], rtol=1e-12)

  def test_an_op_without_description_is_left_whole_and_reported(self):
    w = tf.Variable(np.ones((4, 3)), dtype=tf.float64)

    @tf.function(autograph=False)
    def step(x):
      with tf.GradientTape() as tape:
        h = tf.matmul(x, w)
        loss = tf.reduce_sum(tf.linalg.band_part(h, 0, -1) ** 2)  # not described
      w.assign_sub(0.01 * tape.gradient(loss, w))
      return loss
    f = self.assertEquivalent(step, _inputs(), devices=4)
    notes = " ".join(f.plan(*_inputs()[0]).notes)
    self.assertRegex(notes, r"\(MatrixBandPart\) is left whole on device 0")


class ClearErrorTest(absltest.TestCase):
  """Requests that cannot be met: the error names what and how to fix it."""

  def setUp(self):
    super().setUp()
    self.w = tf.Variable(np.ones((4, 3)), dtype=tf.float64)
    self.step = _sgd_step(self.w)

  def test_device_counts_and_names(self):
    for bad, pattern in ((0, "need at least one device"), (-2, "need at least one device"),
                         (["/GPU:0", "/FOO:1"], "'/FOO:1' is not a device name"),
                         (["/CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0"],
                          "listed twice"), ([], "empty list")):
      with self.assertRaisesRegex(ValueError, pattern):
        tf_tofu.plan(self.step, X, devices=bad)
    with self.assertRaisesRegex(ValueError, "'/GPU:3' does not exist here"):
      tf_tofu.function(self.step, devices=["/GPU:3"])

  def test_dynamic_shapes(self):
    with self.assertRaisesRegex(IngestError, r"has shape \(\?, 4\); tf_tofu needs every dim"):
      tf_tofu.plan(self.step, tf.TensorSpec([None, 4], tf.float64), devices=2)
    own = tf.function(lambda x: tf.reduce_sum(x), autograph=False,
                      input_signature=[tf.TensorSpec([None, 4], tf.float64)])
    with self.assertRaisesRegex(IngestError, "own input_signature leaves a dim unknown"):
      tf_tofu.plan(own, devices=2)

  def test_control_flow(self):
    @tf.function
    def loop(x):
      for _ in tf.range(3):
        x = x * 2.0
      return tf.reduce_sum(x)

    @tf.function
    def branch(x):
      if tf.reduce_sum(x) > 0:
        return tf.reduce_sum(x)
      return tf.reduce_sum(x * 2)

    @tf.function(autograph=False)
    def case(x):
      return tf.switch_case(tf.constant(1), [lambda: tf.reduce_sum(x), lambda: tf.reduce_max(x)])
    with self.assertRaisesRegex(IngestError, "is a loop: .* unroll the loop"):
      tf_tofu.plan(loop, X, devices=2)
    with self.assertRaisesRegex(IngestError, "is a conditional: .* tf.where"):
      tf_tofu.plan(branch, X, devices=2)
    with self.assertRaisesRegex(IngestError, "Case.* is a conditional"):
      tf_tofu.plan(case, X, devices=2)

  def test_unsupported_variable_updates_are_refused_at_planning(self):
    v = tf.Variable(np.ones((8, 3)), dtype=tf.float64)
    updates = {
        "ResourceStridedSliceAssign": lambda x: v[2:5].assign(tf.zeros((3, 3), tf.float64)
                                                              + tf.reduce_sum(x)),
        "ResourceScatterUpdate": lambda x: v.scatter_update(tf.IndexedSlices(
            tf.ones((2, 3), tf.float64) * tf.reduce_sum(x), tf.constant([1, 5]))),
        "ResourceScatterNdAdd": lambda x: v.scatter_nd_add(
            tf.constant([[1], [5]]), tf.ones((2, 3), tf.float64) * tf.reduce_sum(x)),
        "ResourceApplyAdagrad": lambda x: tf.raw_ops.ResourceApplyAdagrad(
            var=v.handle, accum=v.handle, lr=tf.constant(0.1, tf.float64),
            grad=tf.ones((8, 3), tf.float64) * tf.reduce_sum(x)),
        "ResourceGatherNd": lambda x: tf.raw_ops.ResourceGatherNd(
            resource=v.handle, indices=tf.constant([[1]]), dtype=tf.float64) * tf.reduce_sum(x),
    }
    for op_type, body in updates.items():
      def fn(x, body=body):
        out = body(x)
        return tf.reduce_sum(v) + (0.0 if out is None or isinstance(out, tf.Operation)
                                   else tf.reduce_sum(tf.convert_to_tensor(out)))
      step = tf.function(fn, autograph=False)
      with self.assertRaisesRegex(view.UnsupportedVariableOpError,
                                  rf"\({op_type}\) uses variable .* write the update as a whole"):
        tf_tofu.plan(step, X, devices=2)


class GraphDefTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    g = tf.Graph()
    with g.as_default():
      a = tf.compat.v1.placeholder(tf.float32, (4, 4), name="a")
      tf.identity(tf.reduce_sum(a), name="loss")
    self.gd = g.as_graph_def()

  def edited(self, edit):
    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(self.gd)
    edit(gd)
    return gd

  def node(self, gd, name):
    return next(n for n in gd.node if n.name == name)

  def test_broken_graphs(self):
    def unknown(gd):
      n = gd.node.add(name="mystery", op="TotallyUnknownOp")
      n.input.append("a")
    cases = [
        (tf.compat.v1.GraphDef(), ["a"], ["loss"], "no nodes"),
        (self.edited(unknown), ["a"], ["mystery"],
         "'mystery' has type 'TotallyUnknownOp', which this TensorFlow does not register"),
        (self.edited(lambda gd: self.node(gd, "loss").input.append("nowhere")), ["a"], ["loss"],
         "reads 'nowhere', which names no node"),
        (self.edited(lambda gd: self.node(gd, "Sum").input.__setitem__(0, "loss")), ["a"],
         ["loss"], "cycle through 2 nodes: .*Sum.*loss"),
        (self.gd, ["a"], ["loss:3"], "tensor 'loss:3': op 'loss' has 1 output"),
        (self.gd, ["a"], ["lost"], "fetch 'lost:0' is not in the GraphDef; did you mean 'loss'"),
    ]
    for gd, feeds, fetches, pattern in cases:
      with self.assertRaisesRegex(IngestError, pattern):
        TofuGraph.from_graph_def(gd, feeds=feeds, fetches=fetches)

  def test_unreadable_files(self):
    import os
    import tempfile
    d = tempfile.mkdtemp()
    truncated = os.path.join(d, "t.pb")
    with open(truncated, "wb") as f:
      f.write(self.gd.SerializeToString()[:-7])
    with self.assertRaisesRegex(IngestError, "is not a GraphDef"):
      TofuGraph.from_graph_def(truncated, feeds=["a"], fetches=["loss"])
    with self.assertRaisesRegex(IngestError, "cannot read GraphDef file"):
      TofuGraph.from_graph_def(os.path.join(d, "missing.pb"), feeds=["a"], fetches=["loss"])
    with self.assertRaisesRegex(IngestError, "cannot load the SavedModel"):
      TofuGraph.from_saved_model(os.path.join(d, "no_model"))


class PlanFileTest(absltest.TestCase):
  """A plan JSON that does not fit its graph is refused; an edited one is re-priced."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    w = tf.Variable(np.ones((4, 3)), dtype=tf.float64)
    cls.graph = tf_tofu.trace(_sgd_step(w), X)
    cls.describer = Describer()
    cls.sgraph = view.from_tofu_graph(cls.graph, cls.describer)
    cls.plan = tf_tofu.plan(cls.graph, devices=2, describer=cls.describer)

  def load(self, d, **kw):
    return api.load_plan(json.dumps(d), self.sgraph, self.describer, **kw)

  def test_round_trip_keeps_the_price(self):
    loaded = self.load(json.loads(self.plan.to_json()))
    self.assertEqual(loaded.total_bytes, self.plan.total_bytes)
    self.assertEqual(loaded.to_json(), self.plan.to_json())

  def test_edited_layouts_are_repriced(self):
    d = json.loads(self.plan.to_json())
    for t in d["layouts"]:
      d["layouts"][t] = ["rep"]
    d["strategies"] = {o: ["replicate"] for o in d["strategies"]}
    edited = self.load(d)
    self.assertNotEqual(edited.total_bytes, self.plan.total_bytes)
    self.assertIn(f"the file said {self.plan.total_bytes} B", " ".join(edited.notes))
    self.assertIn(f"({edited.total_bytes} B)", edited.report())
    self.assertFalse(edited.proven_optimal)

  def test_mismatches(self):
    base = json.loads(self.plan.to_json())
    missing = json.loads(self.plan.to_json())
    handle = next(v.handle for v in self.graph.variables)
    del missing["layouts"][handle]  # a variable without layout: its shards are undefined
    no_op = json.loads(self.plan.to_json())
    del no_op["strategies"][sorted(no_op["strategies"])[0]]
    dup = dict(base, devices=[base["devices"][0]] * 2)
    other = dict(base, graph_signature="0" * 16)
    stranger = json.loads(self.plan.to_json())
    stranger["layouts"]["nope:0"] = ["rep"]
    bad_strategy = json.loads(self.plan.to_json())
    bad_strategy["strategies"]["MatMul"] = ["nonsense"]
    bad_state = json.loads(self.plan.to_json())
    bad_state["layouts"][sorted(bad_state["layouts"])[0]] = ["cut(7)"]
    for d, pattern in ((missing, "no layout for tensor"), (no_op, "no strategy for op"),
                       (dup, "listed twice"), (other, "made for another graph"),
                       (bad_state, r"on dim 7; use a dim below \d"),
                       (bad_strategy, "no index variable 'nonsense'"),
                       (stranger, "lays out 'nope:0', which is not a tensor of this graph")):
      with self.assertRaisesRegex(PlanError, pattern):
        self.load(d)
    with self.assertRaisesRegex(PlanError, "3 devices given, the plan has 2"):
      self.load(base, devices=3)
    with self.assertRaisesRegex(PlanError, "does not parse"):
      Plan.from_json(self.plan.to_json()[:-20])


if __name__ == "__main__":
  absltest.main()
