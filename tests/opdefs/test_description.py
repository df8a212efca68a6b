"""Tests for tf_tofu.opdefs.description: construction, validation and errors of its types.

OpContext, TensorInfo, TensorRef, Semantics, WorkerView and ShardSpec, and the
DescriptionError messages that name the op.
"""

import dataclasses
import math
import re

import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.core.regions import Region
from tf_tofu.opdefs import analysis, description, tdl
from tf_tofu.opdefs.description import (DescriptionError, OpContext, Semantics, ShardSpec,
                                        TensorInfo, TensorRef, WorkerView)


def _op(*inputs, outputs=(), name="m", op_type="MatMul", attrs=None):
  """An op whose inputs are TensorInfos or shapes (float32)."""
  infos = tuple(t if isinstance(t, TensorInfo) else TensorInfo(t, "float32") for t in inputs)
  outs = tuple(t if isinstance(t, TensorInfo) else TensorInfo(t, "float32") for t in outputs)
  return OpContext(name=name, op_type=op_type, attrs=attrs or {}, inputs=infos, outputs=outs)


def _matmul(op):
  a, b = op.input(0), op.input(1)
  i, j, k = tdl.Var("i", a.shape[0]), tdl.Var("j", b.shape[1]), tdl.Var("k", a.shape[1])
  return Semantics(op, [tdl.Output((i, j), tdl.Sum(k, a[i, k] * b[k, j]))])


class DescriptionErrorTest(absltest.TestCase):

  def test_is_a_value_error(self):
    self.assertTrue(issubclass(DescriptionError, ValueError))
    with self.assertRaises(ValueError):
      raise _op((2, 3)).fail("bad attrs")


class TensorInfoTest(parameterized.TestCase):

  def test_shape_becomes_a_tuple_of_python_ints(self):
    t = TensorInfo([np.int64(2), np.int32(3), 0], "int32")
    self.assertEqual(t.shape, (2, 3, 0))
    self.assertEqual([type(d) for d in t.shape], [int, int, int])
    self.assertEqual(t.dtype, "int32")
    self.assertIsNone(t.value)

  def test_scalar_and_constant(self):
    value = np.array([[1, 2, 3]], np.int64)
    t = TensorInfo((1, 3), "int64", value)
    self.assertIs(t.value, value)
    self.assertEqual(TensorInfo((), "float32").shape, ())

  @parameterized.named_parameters(
      ("unknown", (None, 3), r"tensor has unknown dims \(None, 3\)"),
      ("negative", (2, -1), r"tensor has unknown dims \(2, -1\)"),
  )
  def test_unknown_dims_raise(self, shape, msg):
    with self.assertRaisesRegex(DescriptionError, "^" + msg + "$"):
      TensorInfo(shape, "float32")

  def test_frozen(self):
    t = TensorInfo((2,), "float32")
    with self.assertRaises(dataclasses.FrozenInstanceError):
      t.shape = (3,)

  @parameterized.named_parameters(("bytes", (4, 8)), ("digest", (64, 64)))
  def test_value_key_is_equal_exactly_when_the_values_are(self, shape):
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    key = TensorInfo(shape, "float32", a).value_key()
    self.assertEqual(key, TensorInfo(shape, "float32", a.copy()).value_key())
    changed = a.copy()
    changed[-1, -1] += 1
    self.assertNotEqual(key, TensorInfo(shape, "float32", changed).value_key())
    self.assertNotEqual(key, TensorInfo(shape[::-1], "float32", a.T).value_key())
    self.assertNotEqual(key, TensorInfo(shape, "float64", a.astype(np.float64)).value_key())
    self.assertIsNone(TensorInfo(shape, "float32").value_key())
    # Beyond DIGEST_ABOVE bytes the key holds a 16-byte digest, not the bytes.
    self.assertLen(key[-1], 16 if a.nbytes > description.DIGEST_ABOVE else a.nbytes)

  def test_block_slices_the_value_and_keys_it_by_its_region(self):
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    t = TensorInfo(a.shape, "float32", a)
    top, bottom = Region.of([(0, 32), (0, 64)]), Region.of([(32, 64), (0, 64)])
    b0, b1 = t.block(top), t.block(bottom)
    np.testing.assert_array_equal(b1.value, a[32:])
    self.assertEqual(b0.shape, (32, 64))
    self.assertNotEqual(b0.value_key(), b1.value_key())
    self.assertEqual(b0.value_key(), t.block(top).value_key())
    small = TensorInfo((4,), "int32", np.arange(4, dtype=np.int32)).block(Region.of([(1, 3)]))
    self.assertEqual(small.value_key(), TensorInfo((2,), "int32", np.array([1, 2], np.int32)).value_key())
    self.assertIsNone(TensorInfo((4,), "int32").block(Region.of([(1, 3)])).value)


class TensorRefTest(absltest.TestCase):

  def test_facts_of_the_input(self):
    op = _op((2, 3), (3, 4))
    ref = op.input(1)
    self.assertIsInstance(ref, TensorRef)
    self.assertEqual((ref.index, ref.name, ref.shape, ref.rank), (1, "in1", (3, 4), 2))
    self.assertIs(ref.info, op.inputs[1])

  def test_indexing_builds_an_unguarded_access(self):
    ref = _op((2, 3), (3, 4)).input(1)
    k = tdl.Var("k", 3)
    a = ref[k + 0, 2]
    self.assertIsInstance(a, tdl.Access)
    self.assertEqual((a.input, a.name, a.shape), (1, "in1", (3, 4)))
    self.assertEqual(a.index, (tdl.Affine(((k, 1),), 0), tdl.Affine((), 2)))
    self.assertEqual((a.guarded, a.pad), (False, 0.0))
    self.assertEqual(a.vars(), frozenset({k}))

  def test_single_item_and_whole_dim(self):
    op = _op((5,), (4, 6))
    i = tdl.Var("i", 5)
    self.assertEqual(op.input(0)[i].index, (tdl.Affine(((i, 1),), 0),))
    self.assertEqual(op.input(1)[1, :].index, (tdl.Affine((), 1), tdl.FULL))
    with self.assertRaisesRegex(ValueError, "only a whole-dimension slice"):
      op.input(1)[1, 0:2]

  def test_wrong_number_of_indices_raises(self):
    with self.assertRaisesRegex(ValueError, "gives 1 indices for a tensor of rank 2"):
      _op((2, 3)).input(0)[1]

  def test_at_builds_a_guarded_access_with_its_pad(self):
    ref = _op((2, 7)).input(0)
    y = tdl.Var("y", 7)
    a = ref.at(1, y - 1, pad=-math.inf)
    self.assertEqual((a.guarded, a.pad), (True, -math.inf))
    self.assertEqual(a.index, (tdl.Affine((), 1), tdl.Affine(((y, 1),), -1)))
    self.assertEqual(ref.at(0, y).pad, 0.0)


class OpContextTest(parameterized.TestCase):

  def test_attr_with_default(self):
    op = _op((2, 3), attrs={"transpose_a": True, "alpha": 0.0})
    self.assertIs(op.attr("transpose_a"), True)
    self.assertEqual(op.attr("alpha", 1.0), 0.0)  # a falsy value is not replaced
    self.assertIsNone(op.attr("missing"))
    self.assertEqual(op.attr("missing", 7), 7)

  @parameterized.named_parameters(("past_the_end", 2), ("negative", -1))
  def test_input_index_out_of_range(self, i):
    op = _op((2, 3), (3, 4))
    for get in (op.input, op.replicated, op.const):
      with self.assertRaisesRegex(DescriptionError,
                                  rf"^op 'm' \(MatMul\) has no input {i}; it has 2$"):
        get(i)

  def test_replicated_marks_the_input(self):
    op = _op((2, 3), (3, 4))
    ref = op.replicated(1)
    self.assertEqual((ref.index, ref.shape), (1, (3, 4)))
    self.assertEqual(op._replicated, {1})
    self.assertEqual(op._meta, set())

  def test_const_returns_the_value_and_marks_the_input_meta(self):
    op = _op((6, 4), TensorInfo((2,), "int32", [3, 8]), op_type="Reshape", name="r")
    got = op.const(1)
    self.assertIsInstance(got, np.ndarray)
    np.testing.assert_array_equal(got, [3, 8])
    self.assertEqual(op._meta, {1})

  def test_const_of_a_non_constant_raises_naming_op_and_input(self):
    op = _op((6, 4), (2,), op_type="Reshape", name="r")
    with self.assertRaisesRegex(DescriptionError,
                                r"^op 'r' \(Reshape\): input 1 must be a constant to describe"):
      op.const(1)
    self.assertEqual(op._meta, set())

  def test_fail_returns_the_error_without_raising(self):
    err = _op((2, 3), name="conv", op_type="Conv2D").fail("data_format NCHW is not described")
    self.assertIsInstance(err, DescriptionError)
    self.assertEqual(str(err), "op 'conv' (Conv2D): data_format NCHW is not described")


class SemanticsTest(parameterized.TestCase):

  def _three_kinds(self):
    """out[i] = Sum_j x[i, j] * t[0]: x data, t replicated, input 2 a meta constant."""
    op = _op((4, 3), (5,), TensorInfo((1,), "int32", np.array([1], np.int32)),
             outputs=[(4,)], name="s", op_type="Test")
    x, t = op.input(0), op.replicated(1)
    op.const(2)
    i, j = tdl.Var("i", 4), tdl.Var("j", 3)
    return Semantics(op, [tdl.Output((i,), tdl.Sum(j, x[i, j]) * t[0])])

  def test_input_kinds(self):
    sem = self._three_kinds()
    self.assertEqual(sem.accessed_inputs, frozenset({0, 1}))
    self.assertEqual(sem.replicated_inputs, frozenset({1}))
    self.assertEqual(sem.meta_inputs, frozenset({2}))
    self.assertIsInstance(sem.outputs, tuple)
    self.assertEqual(sem.outputs[0].shape, (4,))
    self.assertEqual(sem.undefined_outputs, frozenset())
    self.assertIsNone(sem.shard)

  def test_opaque_arguments_count_as_accessed(self):
    op = _op((4, 6, 6), op_type="Cholesky")
    m = op.input(0)
    b, i, j = tdl.Var("b", 4), tdl.Var("i", 6), tdl.Var("j", 6)
    sem = Semantics(op, [tdl.Output((b, i, j), tdl.Opaque("chol", (m[b, :, :],), over=(i, j)))])
    self.assertEqual(sem.accessed_inputs, frozenset({0}))

  def test_output_count_must_match_the_op(self):
    op = _op((2, 3), (3, 4), outputs=[(2, 4), (2, 4)])
    with self.assertRaisesRegex(DescriptionError,
                                r"^op 'm' \(MatMul\): description gives 1 outputs, the op has 2$"):
      _matmul(op)

  def test_output_shape_must_match_the_op(self):
    op = _op((2, 3), (3, 4), outputs=[(4, 2)])
    with self.assertRaisesRegex(DescriptionError, r"description gives output 0 shape \(2, 4\), "
                                r"the op's is \(4, 2\)$"):
      _matmul(op)

  def test_without_output_facts_nothing_is_compared(self):
    sem = _matmul(_op((2, 3), (3, 4)))
    self.assertEqual([o.shape for o in sem.outputs], [(2, 4)])

  def test_matching_output_facts_pass(self):
    sem = _matmul(_op((2, 3), (3, 4), outputs=[(2, 4)]))
    self.assertEqual(sem.accessed_inputs, frozenset({0, 1}))

  @parameterized.named_parameters(
      ("same_var", lambda i, j: (i, i), ["i", "i"]),
      ("same_name", lambda i, j: (i, tdl.Var("i", 3)), ["i", "i"]),
      ("in_a_composite_dim", lambda i, j: ((i, j), j), ["i", "j", "j"]),
  )
  def test_an_index_variable_used_twice(self, dims, names):
    op = _op((4, 3))
    x = op.input(0)
    i, j = tdl.Var("i", 4), tdl.Var("j", 3)
    want = f"op 'm' (MatMul): output 0 uses an index variable twice: {names}"
    with self.assertRaisesRegex(DescriptionError, f"^{re.escape(want)}$"):
      Semantics(op, [tdl.Output(dims(i, j), x[i, 0])])

  @parameterized.named_parameters(
      ("unbound", lambda x, i, j, k: x[i, j], ["j"]),
      ("bound_elsewhere", lambda x, i, j, k: tdl.Sum(j, x[i, j]) + x[i, j], ["j"]),
      ("two", lambda x, i, j, k: x[j, k], ["j", "k"]),
      ("opaque_over", lambda x, i, j, k: tdl.Opaque("f", (x[i, :],), over=(j,)), ["j"]),
  )
  def test_stray_variables(self, body, names):
    op = _op((4, 3))
    x = op.input(0)
    i, j, k = tdl.Var("i", 4), tdl.Var("j", 3), tdl.Var("k", 3)
    want = (f"op 'm' (MatMul): output 0 reads index variables {names} that neither index "
            "the output nor are reduced")
    with self.assertRaisesRegex(DescriptionError, f"^{re.escape(want)}$"):
      Semantics(op, [tdl.Output((i,), body(x, i, j, k))])

  def test_reduced_and_opaque_output_variables_are_bound(self):
    op = _op((4, 3))
    x = op.input(0)
    i, j, k = tdl.Var("i", 4), tdl.Var("j", 3), tdl.Var("k", 3)
    body = tdl.Sum(k, x[i, k]) * tdl.Opaque("f", (x[i, :],), over=(j,))
    sem = Semantics(op, [tdl.Output((i, j), body)])
    self.assertEqual(sem.outputs[0].shape, (4, 3))

  def test_an_input_of_no_kind_raises(self):
    op = _op((4,), (4,), (2,))
    x = op.input(0)
    i = tdl.Var("i", 4)
    with self.assertRaisesRegex(DescriptionError, r"^op 'm' \(MatMul\): inputs \[1, 2\] are "
                                "neither accessed, replicated nor constant$"):
      Semantics(op, [tdl.Output((i,), x[i])])
    op.replicated(1)
    op.replicated(2)
    self.assertEqual(Semantics(op, [tdl.Output((i,), x[i])]).replicated_inputs,
                     frozenset({1, 2}))

  def test_undefined_outputs_are_kept(self):
    op = _op((3,))
    i = tdl.Var("i", 3)
    sem = Semantics(op, [tdl.Output((i,), op.input(0)[i]),
                         tdl.Output((tdl.Var("z", 0),), tdl.Opaque("reserve", ()))],
                    undefined_outputs=frozenset({1}))
    self.assertEqual(sem.undefined_outputs, frozenset({1}))
    self.assertEqual([o.shape for o in sem.outputs], [(3,), (0,)])


class ShardSpecTest(absltest.TestCase):

  def test_defaults(self):
    spec = ShardSpec()
    self.assertEqual((dict(spec.attrs), dict(spec.meta_inputs), spec.output_scale),
                     ({}, {}, None))
    self.assertIsNot(ShardSpec().attrs, ShardSpec().attrs)
    self.assertEqual(ShardSpec(), ShardSpec())
    with self.assertRaises(dataclasses.FrozenInstanceError):
      spec.output_scale = (0.5,)

  def test_without_hook_every_worker_gets_the_default(self):
    sem = _matmul(_op((6, 5), (5, 7)))
    for s in analysis.strategies(sem, 3):
      for w in s.workers:
        self.assertEqual(sem.shard_spec(w), ShardSpec())

  def test_hook_is_called_with_each_worker(self):
    op = _op((7, 3), op_type="Mean")
    x = op.input(0)
    i, j = tdl.Var("i", 7), tdl.Var("j", 3)
    seen = []

    def hook(w: WorkerView) -> ShardSpec:
      seen.append(w)
      lo, hi = w.var_block
      return ShardSpec(attrs={"w": w.w}, output_scale=((hi - lo) / w.var_extent,))

    sem = Semantics(op, [tdl.Output((j,), tdl.Mean(i, x[i, j]))], shard=hook)
    s = next(s for s in analysis.strategies(sem, 3) if s.var == "i")
    specs = [sem.shard_spec(w) for w in s.workers]
    self.assertEqual(seen, list(s.workers))
    self.assertEqual([dict(p.attrs) for p in specs], [{"w": 0}, {"w": 1}, {"w": 2}])
    self.assertEqual([p.output_scale for p in specs], [(3 / 7,), (2 / 7,), (2 / 7,)])


class WorkerViewTest(absltest.TestCase):

  def test_output_shapes_are_the_region_shapes(self):
    w = WorkerView(w=1, n=2, var="i", var_block=(3, 5), var_extent=5,
                   input_regions=(Region.of([(3, 5), (0, 4)]), None),
                   input_padding=(((0, 0), (0, 0)), None),
                   output_regions=(Region.of([(3, 5), (0, 7)]), Region.of([(0, 0)])))
    self.assertEqual(w.output_shapes, ((2, 7), (0,)))
    with self.assertRaises(dataclasses.FrozenInstanceError):
      w.w = 0

  def test_views_of_a_shifted_guarded_read(self):
    """out[i] = X.at(i - 2), i in [0, 9), X of 6 (a Pad of 2 before, 1 after); cut i 2 ways.

    Worker 0 has i in [0, 5): reads [-2, 2], clamped [0, 3), padding (2, 0).
    Worker 1 has i in [5, 9): reads [3, 6], clamped [3, 6), padding (0, 1).
    Input 1 is a meta constant: no region and no padding.
    """
    op = _op((6,), TensorInfo((1, 2), "int32", np.array([[2, 1]], np.int32)), op_type="Pad")
    x = op.input(0)
    op.const(1)
    i = tdl.Var("i", 9)
    sem = Semantics(op, [tdl.Output((i,), x.at(i - 2))])
    (s,) = analysis.strategies(sem, 2)
    w0, w1 = s.workers
    self.assertEqual([(w.w, w.n, w.var, w.var_block, w.var_extent) for w in s.workers],
                     [(0, 2, "i", (0, 5), 9), (1, 2, "i", (5, 9), 9)])
    self.assertEqual(w0.input_regions, (Region.of([(0, 3)]), None))
    self.assertEqual(w1.input_regions, (Region.of([(3, 6)]), None))
    self.assertEqual(w0.input_padding, (((2, 0),), None))
    self.assertEqual(w1.input_padding, (((0, 1),), None))
    self.assertEqual((w0.output_shapes, w1.output_shapes), (((5,),), ((4,),)))


if __name__ == "__main__":
  absltest.main()
