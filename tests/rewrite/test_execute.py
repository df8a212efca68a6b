"""Tests for tf_tofu.rewrite.execute: feeds sliced, shards made and read back, fetches assembled."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.eager import context

from tests import cpu_devices
import tf_tofu  # noqa: E402
from tf_tofu.rewrite import execute  # noqa: E402


def _key(ref: str) -> str:
  return ref if ":" in ref else ref + ":0"


def setUpModule():
  cpu_devices.require()


class ExecuteTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    w = tf.Variable(np.arange(12.0).reshape(4, 3), dtype=tf.float64)
    cls.variables = [w]

    @tf.function(autograph=False)
    def step(x):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
      w.assign_sub(1e-3 * tape.gradient(loss, w))
      return loss
    graph = tf_tofu.trace(step, tf.TensorSpec([6, 4], tf.float64))
    # 4 rows of w over 3 devices: uneven blocks, so the shards differ in shape.
    cls.job = tf_tofu.partition(graph, devices=3,
                                constraints={graph.variables[0].handle: "cut(0)"})
    cls.x = np.random.default_rng(0).normal(size=(6, 4))
    cls.step = [step]

  def test_feed_slices_cover_the_feed(self):
    p = self.job.partitioned
    (feed,) = p.feeds
    slices = execute.feed_slices(p, {feed: self.x})
    whole = np.zeros_like(self.x)
    for s in p.feeds[feed]:
      whole[s.box.slices()] = slices[_key(s.placeholder)]
    np.testing.assert_array_equal(whole, self.x)
    with self.assertRaisesRegex(ValueError, "has shape"):
      execute.feed_slices(p, {feed: self.x[:2]})
    with self.assertRaisesRegex(ValueError, "no value for feeds"):
      execute.feed_slices(p, {})

  def test_shards_round_trip_and_the_step_runs_on_them(self):
    p = self.job.partitioned
    values = self.job.graph.variable_values()
    shards = execute.create_shards(p, values)
    for v in p.variables.values():
      for s in v.shards:
        var = shards[_key(s.placeholder)]
        self.assertEqual(tuple(var.shape), s.box.shape)
        self.assertEqual(tf.DeviceSpec.from_string(var.device).device_index,
                         tf.DeviceSpec.from_string(p.devices[s.device]).device_index)
    back = execute.assemble_variables(p, shards)
    for h, value in values.items():
      np.testing.assert_array_equal(back[h], value)
    (feed,) = p.feeds
    got = execute.wrap(p, variables=shards)({feed: self.x})
    want = self.step[0](self.x)   # the original step, on the original variable
    (fetch,) = p.fetches
    np.testing.assert_allclose(got[fetch], want.numpy(), rtol=1e-12)
    trained = execute.assemble_variables(p, shards)
    (h,) = values
    np.testing.assert_allclose(trained[h], self.variables[0].numpy(), rtol=1e-12)
    with self.assertRaisesRegex(ValueError, "no value for variables"):
      execute.create_shards(p, {})

  def test_every_imported_node_is_on_its_graph_def_device(self):
    p = self.job.partitioned
    run = execute.wrap(p, variables=execute.create_shards(p, self.job.graph.variable_values()))
    want = {n.name: tf.DeviceSpec.from_string(n.device) for n in p.graph_def.node}
    imported = {op.name.partition("/")[2]: op for op in run.function.graph.get_operations()
                if op.name.startswith(execute._SCOPE + "/")}
    self.assertEqual(set(imported), set(want))
    for name, op in imported.items():
      self.assertEqual(tf.DeviceSpec.from_string(op.device), want[name], name)


class GrapplerConfigTest(absltest.TestCase):
  RC = rewriter_config_pb2.RewriterConfig

  def test_defaults_are_changed_and_explicit_options_kept(self):
    base = config_pb2.ConfigProto(allow_soft_placement=True)
    cpu = execute.grappler_config(base, ["/device:CPU:0", "/device:CPU:1"])
    self.assertEqual(cpu.graph_options.rewrite_options.meta_optimizer_iterations, self.RC.ONE)
    self.assertEqual(cpu.graph_options.rewrite_options.memory_optimization, self.RC.NO_MEM_OPT)
    self.assertTrue(cpu.allow_soft_placement)
    self.assertEqual(base, config_pb2.ConfigProto(allow_soft_placement=True))  # not mutated
    self.assertEqual(cpu.graph_options.rewrite_options.layout_optimizer, self.RC.OFF)
    self.assertEqual(cpu.graph_options.rewrite_options.constant_folding, self.RC.OFF)
    nchw = execute.grappler_config(base, ["/device:CPU:0"], channels_first=True)
    self.assertEqual(nchw.graph_options.rewrite_options.layout_optimizer, self.RC.DEFAULT)
    gpu = execute.grappler_config(base, ["/device:GPU:0", "/device:CPU:0"])
    self.assertEqual(gpu.graph_options.rewrite_options.memory_optimization,
                     self.RC.DEFAULT_MEM_OPT)
    self.assertEqual(gpu.graph_options.rewrite_options.layout_optimizer, self.RC.DEFAULT)
    self.assertEqual(gpu.graph_options.rewrite_options.constant_folding, self.RC.OFF)
    user = config_pb2.ConfigProto()
    user.graph_options.rewrite_options.meta_optimizer_iterations = self.RC.TWO
    user.graph_options.rewrite_options.memory_optimization = self.RC.MANUAL
    user.graph_options.rewrite_options.layout_optimizer = self.RC.ON
    user.graph_options.rewrite_options.constant_folding = self.RC.ON
    kept = execute.grappler_config(user, ["/device:CPU:0"]).graph_options.rewrite_options
    self.assertEqual((kept.meta_optimizer_iterations, kept.memory_optimization,
                      kept.layout_optimizer, kept.constant_folding),
                     (self.RC.TWO, self.RC.MANUAL, self.RC.ON, self.RC.ON))

  def test_channels_first_is_read_off_the_data_formats(self):
    def graph(data_format):
      gd = tf.compat.v1.GraphDef()
      node = gd.node.add(name="conv", op="Conv2D")
      node.attr["data_format"].s = data_format
      return gd
    self.assertTrue(execute.channels_first(graph(b"NCHW")))
    self.assertFalse(execute.channels_first(graph(b"NHWC")))
    self.assertFalse(execute.channels_first(tf.compat.v1.GraphDef()))

  def test_call_options_apply_inside_and_are_restored(self):
    ctx = context.context()
    before = ctx.function_call_options.config_proto_serialized
    with execute._call_options(["/device:CPU:0"]):
      inside = config_pb2.ConfigProto.FromString(ctx.function_call_options.config_proto_serialized)
      self.assertEqual(inside.graph_options.rewrite_options.meta_optimizer_iterations,
                       self.RC.ONE)
    self.assertEqual(ctx.function_call_options.config_proto_serialized, before)


if __name__ == "__main__":
  absltest.main()
