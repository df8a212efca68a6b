"""Tests for tf_tofu.opdefs.common: index variables, broadcasting of shapes and accesses, axes."""

import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.opdefs import common, tdl
from tf_tofu.opdefs.description import DescriptionError, OpContext, TensorInfo


def _op(*shapes, name="b", op_type="AddV2"):
  return OpContext(name=name, op_type=op_type, attrs={},
                   inputs=tuple(TensorInfo(s, "float64") for s in shapes))


def _index_at(access: tdl.Access, point: dict) -> tuple:
  """The concrete index an access reads when each variable takes its value in ``point``."""
  env = {v: (x, x) for v, x in point.items()}
  out = []
  for e in access.index:
    lo, hi = e.interval(env)
    assert lo == hi, (e, lo, hi)
    out.append(lo)
  return tuple(out)


class IndexVarsTest(absltest.TestCase):

  def test_one_variable_per_dim_named_by_prefix_and_position(self):
    self.assertEqual(common.index_vars("i", (3, 1, 5)),
                     (tdl.Var("i0", 3), tdl.Var("i1", 1), tdl.Var("i2", 5)))
    self.assertEqual(common.index_vars("z4_", [0]), (tdl.Var("z4_0", 0),))

  def test_scalar_shape_gives_no_variables(self):
    self.assertEqual(common.index_vars("i", ()), ())

  def test_numpy_sizes_become_python_ints(self):
    vs = common.index_vars("q", np.array([4, 2], np.int64))
    self.assertEqual([(v.name, v.extent) for v in vs], [("q0", 4), ("q1", 2)])
    self.assertTrue(all(type(v.extent) is int for v in vs))


class BroadcastShapeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("same", [(5, 7), (5, 7)], (5, 7)),
      ("size_one_on_both_sides", [(5, 1, 7), (6, 1)], (5, 6, 7)),
      ("reversed", [(6, 1), (5, 1, 7)], (5, 6, 7)),
      ("scalar", [(), (3, 4)], (3, 4)),
      ("three_shapes", [(2, 1, 3), (4, 1), (1,)], (2, 4, 3)),
      ("all_size_one", [(1, 1), (1,)], (1, 1)),
      ("empty_dim_against_one", [(0, 4), (1, 4)], (0, 4)),
      ("one_shape", [(2, 3)], (2, 3)),
  )
  def test_matches_numpy(self, shapes, want):
    got = common.broadcast_shape(_op(*shapes), shapes)
    self.assertEqual(got, want)
    self.assertEqual(got, tuple(np.broadcast_shapes(*shapes)))

  def test_no_shapes_is_a_scalar(self):
    self.assertEqual(common.broadcast_shape(_op(), []), ())

  @parameterized.named_parameters(
      ("trailing", [(5, 7), (6,)], r"shapes \[\(5, 7\), \(6,\)\] do not broadcast"),
      ("leading", [(2, 3), (4, 3)], r"shapes \[\(2, 3\), \(4, 3\)\] do not broadcast"),
      ("empty_against_five", [(0,), (5,)], r"shapes \[\(0,\), \(5,\)\] do not broadcast"),
  )
  def test_shapes_that_do_not_broadcast_raise_naming_the_op(self, shapes, msg):
    with self.assertRaises(ValueError):  # numpy agrees
      np.broadcast_shapes(*shapes)
    with self.assertRaisesRegex(DescriptionError, r"^op 'b' \(AddV2\): " + msg + "$"):
      common.broadcast_shape(_op(*shapes), shapes)


class BroadcastAccessTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("same_shape", (3, 4), (3, 4)),
      ("column", (3, 1), (3, 4)),
      ("row_lower_rank", (4,), (3, 4)),
      ("size_one_middle", (5, 1, 2), (5, 3, 2)),
      ("rank_difference_and_size_one", (3, 1), (2, 3, 4)),
      ("scalar", (), (2, 3)),
  )
  def test_reads_what_numpy_broadcasting_reads(self, x_shape, out_shape):
    op = _op(x_shape)
    x = op.input(0)
    out_vars = common.index_vars("i", out_shape)
    access = common.broadcast_access(x, out_vars)
    self.assertEqual((access.input, access.name, access.shape), (0, "in0", x_shape))
    self.assertFalse(access.guarded)
    data = np.arange(int(np.prod(x_shape)), dtype=np.float64).reshape(x_shape)
    want = np.broadcast_to(data, out_shape)
    for point in np.ndindex(*out_shape):
      idx = _index_at(access, dict(zip(out_vars, point)))
      self.assertEqual(data[idx], want[point], f"at {point}: read {idx}")

  def test_size_one_dims_read_index_zero(self):
    x = _op((6, 1)).input(0)
    i0, i1, i2 = common.index_vars("i", (5, 6, 7))
    access = common.broadcast_access(x, (i0, i1, i2))
    self.assertEqual(access.index, tdl.index_items((i1, 0)))

  def test_size_one_dim_against_size_one_output_reads_the_variable(self):
    x = _op((1, 4)).input(0)
    i0, i1 = common.index_vars("i", (1, 4))
    self.assertEqual(common.broadcast_access(x, (i0, i1)).index, tdl.index_items((i0, i1)))


class NormalizeAxesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("sorted_and_wrapped", [2, -3], 3, (0, 2)),
      ("int", 1, 4, (1,)),
      ("negative_int", -1, 4, (3,)),
      ("tuple", (3, 0), 4, (0, 3)),
      ("numpy_scalar", np.int64(-2), 2, (0,)),
      ("numpy_0d", np.array(2, np.int32), 3, (2,)),
      ("numpy_2d", np.array([[1], [0]], np.int64), 3, (0, 1)),
      ("empty", [], 3, ()),
      ("empty_numpy", np.zeros((0,), np.int32), 2, ()),
      ("same_axis_twice", [1, -2], 3, (1,)),
      ("every_axis", [0, 1, 2], 3, (0, 1, 2)),
  )
  def test_axes(self, axes, rank, want):
    self.assertEqual(common.normalize_axes(_op(op_type="Sum"), axes, rank), want)

  @parameterized.named_parameters(
      ("too_high", [0, 3], 3, "axis 3 is out of range for rank 3"),
      ("too_low", -4, 3, "axis -4 is out of range for rank 3"),
      ("numpy", np.array([5]), 2, "axis 5 is out of range for rank 2"),
      ("negative_on_a_scalar", -1, 0, "axis -1 is out of range for rank 0"),
  )
  def test_out_of_range_raises_naming_the_op(self, axes, rank, msg):
    with self.assertRaisesRegex(DescriptionError, rf"^op 'r' \(Sum\): {msg}$"):
      common.normalize_axes(_op(name="r", op_type="Sum"), axes, rank)


if __name__ == "__main__":
  absltest.main()
