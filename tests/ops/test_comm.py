"""Tests for tf_tofu.ops.comm: attributes, names, keys, rank order, and the nodes it builds."""


import numpy as np
import tensorflow as tf

from tests import cpu_devices  # noqa: E402  (splits the CPU before TensorFlow starts)

K = cpu_devices.COUNT

from absl.testing import absltest, parameterized  # noqa: E402

from tf_tofu.opdefs.kernels import attr_to_python  # noqa: E402
from tf_tofu.core.regions import Region  # noqa: E402
from tf_tofu.ops import comm  # noqa: E402
from tf_tofu.ops.counting import count_transfer_bytes  # noqa: E402


def setUpModule():
  cpu_devices.require(K)


def cpu(i):
  return f"/device:CPU:{i}"


def run(gd, fetches):
  fn = tf.compat.v1.wrap_function(
      lambda: tf.graph_util.import_graph_def(gd, return_elements=[
          f if ":" in f else f + ":0" for f in fetches]), [])
  return [v.numpy() for v in fn()]


class AttrTest(parameterized.TestCase):

  @parameterized.parameters(
      ("abc", "string"), (3, "int"), (0.5, "float"), (True, "bool"), ("float32", "type"),
      ([2, -1, 3], "shape"), (None, "shape"), ([1, 2, 2, 1], "list(int)"),
      (["a", "b"], "list(string)"),
      (["int32", "float32"], "list(type)"), ([[1, 2], [3]], "list(shape)"), ([], "list(int)"),
      ([0.25, 1.5], "list(float)"), ([True, False], "list(bool)"), ("my_fn", "func"))
  def test_round_trip_through_kernels_attr_to_python(self, value, kind):
    self.assertEqual(attr_to_python(comm.attr_value(value, kind)), value)

  def test_tensor_round_trip_keeps_dtype(self):
    v = np.arange(6, dtype=np.int64).reshape(2, 3)
    back = attr_to_python(comm.attr_value(v, "tensor"))
    self.assertEqual(back.dtype, np.int64)
    np.testing.assert_array_equal(back, v)

  def test_underscore_attrs_are_dropped(self):
    attrs = comm.node_attrs("MatMul", {"T": "float32", "transpose_a": True,
                                       "_class": ["loc:@x"], "_XlaCompile": True,
                                       "_output_shapes": [[2, 2]]})
    self.assertEqual(sorted(attrs), ["T", "transpose_a"])

  def test_unknown_attr_is_refused(self):
    with self.assertRaisesRegex(ValueError, "'bogus' is not in the OpDef"):
      comm.node_attrs("MatMul", {"bogus": 1}, "mm")

  def test_bad_value_names_the_attr(self):
    with self.assertRaisesRegex(ValueError, "transpose_a"):
      comm.node_attrs("MatMul", {"transpose_a": "yes please"}, "mm")
    with self.assertRaisesRegex(ValueError, "strides"):
      comm.node_attrs("Conv2D", {"strides": ["one"]}, "conv")

  def test_unknown_op_type(self):
    with self.assertRaisesRegex(ValueError, "not a TensorFlow op type"):
      comm.node_attrs("NoSuchOp", {})


class BuilderTest(absltest.TestCase):

  def test_names_are_unique(self):
    b = comm.GraphBuilder()
    a = comm.const(b, "c", 1.0, "float32", cpu(0))
    c = comm.const(b, "c", 1.0, "float32", cpu(0))
    self.assertEqual((a, c), ("c", "c_1"))

  def test_helper_constants_are_pooled_per_device_and_value(self):
    b = comm.GraphBuilder()
    a = comm.const(b, "a", [0, 2], "int32", cpu(0), shared=True)
    self.assertEqual(comm.const(b, "b", np.array([0, 2]), "int32", cpu(0), shared=True), a)
    self.assertNotEqual(comm.const(b, "c", [0, 2], "int32", cpu(1), shared=True), a)
    self.assertNotEqual(comm.const(b, "d", [0, 2], "int64", cpu(0), shared=True), a)
    self.assertNotEqual(comm.const(b, "e", [[0, 2]], "int32", cpu(0), shared=True), a)
    self.assertLen(b.nodes, 4)
    with self.assertRaisesRegex(ValueError, "shared constant"):
      b.add_control(a, [comm.const(b, "f", 1.0, "float32", cpu(0))])

  def test_every_node_needs_a_device(self):
    with self.assertRaisesRegex(ValueError, "needs a device"):
      comm.const(comm.GraphBuilder(), "c", 1.0, "float32", "")

  def test_slice_outside_the_held_box_is_refused(self):
    b = comm.GraphBuilder()
    x = comm.const(b, "x", np.zeros((4, 4)), "float32", cpu(0))
    with self.assertRaisesRegex(ValueError, "not inside"):
      comm.slice_box(b, "s", x, Region.of([(4, 8), (0, 4)]), Region.of([(2, 6), (0, 4)]),
                     "float32", cpu(0))

  def test_local_ops_compute_what_they_say(self):
    b = comm.GraphBuilder()
    v = np.arange(24, dtype=np.float32).reshape(4, 6)
    # x holds rows 2..6 of a global (8, 6) tensor, on device 1.
    x = comm.const(b, "x", v, "float32", cpu(1))
    s = comm.slice_box(b, "s", x, Region.of([(2, 6), (0, 6)]), Region.of([(3, 5), (1, 4)]),
                       "float32", cpu(1))
    c = comm.concat(b, "cat", [s, s], 1, "float32", cpu(2))
    n = comm.add_n(b, "sum", [c, c, c], "float32", cpu(3))
    m = comm.scale(b, "half", n, 0.5, "float32", cpu(3))
    e = comm.expand_dims(b, "e", m, 0, "float32", cpu(3))
    rows = comm.unstack(b, "u", e, 1, "float32", cpu(3))
    t = comm.transpose(b, "t", rows[0], [1, 0], "float32", cpu(4))
    z = comm.empty(b, "z", (0, 3), "float32", cpu(5))
    got_s, got_m, got_t, got_z = run(b.graph_def(), [s, m, t, z])
    np.testing.assert_array_equal(got_s, v[1:3, 1:4])
    np.testing.assert_array_equal(got_m, 1.5 * np.concatenate([v[1:3, 1:4]] * 2, axis=1))
    np.testing.assert_array_equal(got_t, got_m.T)
    self.assertEqual(got_z.shape, (0, 3))
    # s crosses 1 -> 2 (24 bytes); the concat crosses 2 -> 3, the unstacked row 3 -> 4.
    self.assertEqual(count_transfer_bytes(b.graph_def()), 24 + 48 + 48)

  def test_scale_refuses_integers(self):
    b = comm.GraphBuilder()
    x = comm.const(b, "x", np.ones(3), "int32", cpu(0))
    with self.assertRaisesRegex(ValueError, "cannot scale"):
      comm.scale(b, "s", x, 0.5, "int32", cpu(0))


class CollectiveTest(absltest.TestCase):

  def test_rank_order_is_numeric(self):
    self.assertEqual(comm.rank_order([cpu(10), cpu(2), cpu(0)]), [cpu(0), cpu(2), cpu(10)])
    self.assertEqual(comm.rank_order(["/job:w/task:1/device:GPU:0", "/job:w/task:0/device:GPU:3"]),
                     ["/job:w/task:0/device:GPU:3", "/job:w/task:1/device:GPU:0"])

  def test_group_keys_name_the_device_set(self):
    a, b = comm.CollectiveKeys(), comm.CollectiveKeys()
    self.assertEqual(a.group([cpu(1), cpu(0)]), a.group([cpu(0), cpu(1)]))
    self.assertEqual(a.group([cpu(0), cpu(1)]), b.group([cpu(0), cpu(1)]))
    self.assertNotEqual(a.group([cpu(0), cpu(1)]), a.group([cpu(0), cpu(2)]))
    self.assertGreater(a.group([cpu(0)]), 0)

  def test_instance_keys_are_deterministic_and_unique_per_graph(self):
    a, b = comm.CollectiveKeys(), comm.CollectiveKeys()
    k1, k2 = a.instance("x"), a.instance("x")
    self.assertNotEqual(k1, k2)
    self.assertEqual(b.instance("x"), k1)
    self.assertTrue(0 < k1 < 2**31)

  def test_gather_and_all_reduce_run_between_logical_devices(self):
    b = comm.GraphBuilder()
    keys = comm.CollectiveKeys()
    members = [cpu(3), cpu(1), cpu(6)]
    ranked = comm.rank_order(members)
    gkey = keys.group(members)
    ig, ir = keys.instance("test gather"), keys.instance("test reduce")
    outs = {}
    for d in members:
      x = comm.const(b, f"x{d[-1]}", np.full((2, 3), float(d[-1])), "float32", d)
      tok = comm.ordering_token(b, f"tok{d[-1]}", d)
      g = comm.collective_gather(b, f"g{d[-1]}", x, "float32", d, 3, gkey, ig, [tok])
      r = comm.collective_all_reduce(b, f"r{d[-1]}", x, "float32", d, 3, gkey, ir, [tok],
                                     control=[g])
      outs[d] = (g, r)
    gd = b.graph_def()
    got = run(gd, [t for d in members for t in outs[d]])
    want_g = np.concatenate([np.full((2, 3), float(d[-1])) for d in ranked])
    for i in range(3):
      np.testing.assert_array_equal(got[2 * i], want_g)
      np.testing.assert_array_equal(got[2 * i + 1], np.full((2, 3), 10.0))
    # Gather: 3 members x 24 bytes x 2 others; all-reduce: 2 x 24 x 2.
    self.assertEqual(count_transfer_bytes(gd), 3 * 24 * 2 + 2 * 24 * 2)
    r_node = next(n for n in gd.node if n.name == "r3")
    self.assertIn("^g3", r_node.input)
    self.assertEqual(r_node.attr["Nordering_token"].i, 1)


if __name__ == "__main__":
  absltest.main()
