"""Tests of the math-op descriptions: known strategies, facts, and the kernel check."""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tf_tofu.opdefs import analysis, math_ops, registry, validate
from tf_tofu.opdefs.cases import Case, Fixed, Rand, math_cases
from tf_tofu.opdefs.description import DescriptionError, OpContext, Semantics, TensorInfo
from tf_tofu.core.states import PARTIAL, REP, Cut


_ALL_CASES = math_cases.CASES


def _semantics(case: Case) -> Semantics:
  ctx, _ = validate.build_case(case)
  return registry.lookup(case.op_type)(ctx)


def _by_var(strats):
  return {s.var: s for s in strats}


def _check(test: absltest.TestCase, case: Case, describer=None) -> validate.CaseResult:
  res = validate.check_case(case, describer=describer)
  test.assertIsNone(res.error, f"{case}: {res.error}")
  test.assertEqual(res.mismatches, [], f"{case}: {res.mismatches[:3]}")
  return res


def _math_op_types() -> list[str]:
  return [t for t in registry.described_op_types()
          if registry.lookup(t).__module__ == math_ops.__name__]


class MatMulTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("plain", False, False, (6, 5), (5, 7), (Cut(0), REP), (REP, Cut(1)), (Cut(1), Cut(0))),
      ("transpose_a", True, False, (5, 6), (5, 7), (Cut(1), REP), (REP, Cut(1)),
       (Cut(0), Cut(0))),
      ("transpose_b", False, True, (6, 5), (7, 5), (Cut(0), REP), (REP, Cut(0)),
       (Cut(1), Cut(1))),
      ("both", True, True, (5, 6), (7, 5), (Cut(1), REP), (REP, Cut(0)), (Cut(0), Cut(1))),
  )
  def test_three_strategies(self, ta, tb, sa, sb, need_i, need_j, need_k):
    case = Case("MatMul", [Rand(sa), Rand(sb)], {"transpose_a": ta, "transpose_b": tb})
    strats = analysis.strategies(_semantics(case), 2)
    self.assertLen(strats, 3)
    self.assertEqual(sorted(s.kind for s in strats), ["output", "output", "reduce"])
    by = _by_var(strats)
    self.assertEqual(by["i"].outputs, (Cut(0),))
    self.assertEqual(by["j"].outputs, (Cut(1),))
    self.assertEqual(by["k"].kind, "reduce")
    self.assertEqual(by["k"].outputs, (PARTIAL,))
    for var, need in (("i", need_i), ("j", need_j), ("k", need_k)):
      self.assertEqual(tuple(x.state for x in by[var].inputs), need, var)
    _check(self, case)


class ElementwiseTest(parameterized.TestCase):

  def test_every_case_is_elementwise_and_every_dim_cuttable(self):
    cases = [c for c in _ALL_CASES if c.op_type in math_ops._ELEMENTWISE]
    self.assertGreater(len(cases), 100)
    for case in cases:
      sem = _semantics(case)
      f = analysis.facts(sem)
      self.assertTrue(f.elementwise, str(case))
      shape = sem.outputs[0].shape
      self.assertEqual(f.cuttable_dims, (tuple(d for d, s in enumerate(shape) if s >= 2),),
                       str(case))
      self.assertEqual(f.reduction_vars, (), str(case))

  def test_broadcast_input_is_replicated_along_its_size_one_dims(self):
    # x (5, 1, 7) * y (6, 1) -> (5, 6, 7): x broadcasts dim 1, y dims 0 and 2.
    case = Case("Mul", [Rand((5, 1, 7)), Rand((6, 1))])
    by = _by_var(analysis.strategies(_semantics(case), 2))
    self.assertEqual(set(by), {"i0", "i1", "i2"})
    self.assertEqual([x.state for x in by["i0"].inputs], [Cut(0), REP])
    self.assertEqual([x.state for x in by["i1"].inputs], [REP, Cut(0)])
    self.assertEqual([x.state for x in by["i2"].inputs], [Cut(2), REP])
    for s in by.values():
      self.assertEqual(s.outputs, (Cut(int(s.var[1])),))
    _check(self, case)

  def test_scalar_operand_is_replicated(self):
    case = Case("Maximum", [Rand((5, 7)), Rand(())])
    for s in analysis.strategies(_semantics(case), 3):
      self.assertEqual(s.inputs[1].state, REP)
      self.assertEqual(s.inputs[0].state, s.outputs[0])

  def test_select_row_vector_condition(self):
    case = Case("Select", [Rand((5,), "bool"), Rand((5, 7)), Rand((5, 7))])
    sem = _semantics(case)
    by = _by_var(analysis.strategies(sem, 2))
    self.assertEqual([x.state for x in by["i0"].inputs], [Cut(0), Cut(0), Cut(0)])
    self.assertEqual([x.state for x in by["i1"].inputs], [REP, Cut(1), Cut(1)])
    self.assertFalse(analysis.facts(sem).elementwise)  # the vector is not NumPy-broadcast

  def test_add_n_reads_every_input(self):
    case = Case("AddN", [[Rand((5, 7)), Rand((5, 7)), Rand((5, 7))]])
    for s in analysis.strategies(_semantics(case), 2):
      self.assertEqual({x.state for x in s.inputs}, {s.outputs[0]})

  def test_zeros_like_reads_its_input(self):
    sem = _semantics(Case("ZerosLike", [Rand((5, 7))]))
    self.assertEqual(sem.accessed_inputs, frozenset({0}))
    s = _by_var(analysis.strategies(sem, 2))["i1"]
    self.assertEqual(s.workers[1].input_regions[0].shape, (5, 3))

  def test_every_math_op_type_has_a_case(self):
    with_cases = {c.op_type for c in _ALL_CASES}
    self.assertEqual(sorted(set(_math_op_types()) - with_cases), [])

  def test_broadcasting_ops_have_size_one_dims_on_each_side(self):
    for op in math_cases._BINARY:
      shapes = {tuple(tuple(x.shape) for x in c.flat_inputs())
                for c in math_cases.CASES if c.op_type == op}
      self.assertIn(((5, 1, 7), (6, 1)), shapes, op)
      self.assertIn(((6, 1), (5, 1, 7)), shapes, op)

  def test_broadcast_shapes_that_do_not_broadcast_fail(self):
    ctx = OpContext("bad", "AddV2", {}, [TensorInfo((5, 7), "float32"),
                                          TensorInfo((6,), "float32")])
    with self.assertRaisesRegex(DescriptionError, "do not broadcast"):
      math_ops.elementwise(ctx)


class ReductionTest(parameterized.TestCase):

  def _case(self, op, axes, keep=False, shape=(5, 6, 7), dtype="float32"):
    return Case(op, [Rand(shape, dtype), Fixed(axes, "int32")], {"keep_dims": keep})

  def test_sum_reduced_dim_is_partial_max_is_not(self):
    for op in ("Sum", "Mean"):
      by = _by_var(analysis.strategies(_semantics(self._case(op, [1])), 2))
      self.assertEqual(set(by), {"i0", "i1", "i2"}, op)
      self.assertEqual(by["i1"].kind, "reduce")
      self.assertEqual(by["i1"].outputs, (PARTIAL,))
      self.assertEqual(by["i2"].outputs, (Cut(1),))
    for op in ("Max", "Min", "Prod", "EuclideanNorm"):
      sem = _semantics(self._case(op, [1]))
      by = _by_var(analysis.strategies(sem, 2))
      self.assertEqual(set(by), {"i0", "i2"}, op)
      self.assertEqual(analysis.facts(sem).reduction_vars, ("i1",))
      self.assertEqual(analysis.facts(sem).cuttable_dims, ((0, 1),))

  def test_keep_dims_and_negative_axes(self):
    sem = _semantics(self._case("Sum", [2, -3], keep=True))
    self.assertEqual(sem.outputs[0].shape, (1, 6, 1))
    by = _by_var(analysis.strategies(sem, 2))
    self.assertEqual(by["i1"].outputs, (Cut(1),))
    self.assertEqual(by["i0"].outputs, (PARTIAL,))
    self.assertEqual(by["i2"].outputs, (PARTIAL,))
    self.assertIsNone(by["i0"].inputs[1])  # the axes are a constant
    self.assertEqual(sem.meta_inputs, frozenset({1}))

  def test_empty_axes_is_elementwise(self):
    sem = _semantics(self._case("Max", []))
    self.assertEqual(sem.outputs[0].shape, (5, 6, 7))
    self.assertTrue(analysis.facts(sem).elementwise)

  def test_mean_partial_needs_the_scale(self):
    case = self._case("Mean", [0, 2])
    res = _check(self, case)
    self.assertTrue(any(s.startswith("reduce") for s in res.strategies[2]))

    def unscaled(ctx):
      sem = math_ops.reduction(ctx)
      return dataclasses.replace(sem, shard=None)

    bad = validate.check_case(case, describer=unscaled)
    self.assertIsNone(bad.error)
    self.assertNotEmpty(bad.mismatches)
    self.assertTrue(all("reduce" in m for m in bad.mismatches))

  def test_integer_mean_has_no_partial(self):
    sem = _semantics(self._case("Mean", [1], dtype="int32"))
    self.assertEqual(set(_by_var(analysis.strategies(sem, 2))), {"i0", "i2"})

  def test_all_and_any_cut_only_kept_dims(self):
    for op in ("All", "Any"):
      sem = _semantics(self._case(op, [0], dtype="bool"))
      self.assertEqual(set(_by_var(analysis.strategies(sem, 2))), {"i1", "i2"}, op)

  def test_l2_loss_is_partial_on_every_dim(self):
    strats = analysis.strategies(_semantics(Case("L2Loss", [Rand((5, 7))])), 2)
    self.assertLen(strats, 2)
    for s in strats:
      self.assertEqual((s.kind, s.outputs), ("reduce", (PARTIAL,)))


class BatchMatMulTest(parameterized.TestCase):

  def test_broadcast_batch_dims(self):
    case = Case("BatchMatMulV2", [Rand((2, 1, 5, 6)), Rand((3, 6, 7))])
    sem = _semantics(case)
    self.assertEqual(sem.outputs[0].shape, (2, 3, 5, 7))
    by = _by_var(analysis.strategies(sem, 2))
    self.assertEqual([x.state for x in by["b0"].inputs], [Cut(0), REP])
    self.assertEqual([x.state for x in by["b1"].inputs], [REP, Cut(0)])
    self.assertEqual([x.state for x in by["k"].inputs], [Cut(3), Cut(1)])
    self.assertEqual(by["k"].outputs, (PARTIAL,))

  def test_adjoints(self):
    case = Case("BatchMatMulV3", [Rand((4, 6, 5)), Rand((7, 6))],
                {"adj_x": True, "adj_y": True, "Tout": "float32"})
    by = _by_var(analysis.strategies(_semantics(case), 2))
    self.assertEqual([x.state for x in by["i"].inputs], [Cut(2), REP])
    self.assertEqual([x.state for x in by["j"].inputs], [REP, Cut(0)])
    self.assertEqual([x.state for x in by["k"].inputs], [Cut(1), Cut(1)])
    _check(self, case)


class EinsumTest(parameterized.TestCase):

  _OP = OpContext("e", "Einsum", {}, [])

  @parameterized.named_parameters(
      ("explicit", "abc,cd->abd", [(4, 5, 6), (6, 7)], [list("abc"), list("cd")], list("abd")),
      ("implicit", "ij,jk", [(2, 3), (3, 4)], [list("ij"), list("jk")], list("ik")),
      ("implicit_sorted", "ba,cb", [(2, 3), (4, 2)], [list("ba"), list("cb")], list("ac")),
      ("implicit_trace", "ii", [(3, 3)], [list("ii")], []),
      ("ellipsis", "...ij,...jk->...ik", [(5, 1, 2, 3), (6, 3, 4)],
       [["...0", "...1", "i", "j"], ["...1", "j", "k"]], ["...0", "...1", "i", "k"]),
      ("implicit_ellipsis", "...ij,jk", [(5, 2, 3), (3, 4)],
       [["...0", "i", "j"], ["j", "k"]], ["...0", "i", "k"]),
      ("empty_ellipsis", "...ij,jk->...ik", [(2, 3), (3, 4)], [list("ij"), list("jk")],
       list("ik")),
  )
  def test_parse(self, eq, shapes, want_in, want_out):
    got_in, got_out, _ = math_ops.einsum_labels(self._OP, eq, shapes)
    self.assertEqual(got_in, want_in)
    self.assertEqual(got_out, want_out)

  def test_broadcast_sizes(self):
    _, _, sizes = math_ops.einsum_labels(self._OP, "...ij,...jk->...ik",
                                         [(5, 1, 2, 3), (6, 3, 4)])
    self.assertEqual(sizes, {"...0": 5, "...1": 6, "i": 2, "j": 3, "k": 4})

  @parameterized.named_parameters(
      ("repeated_output", "ij->iij", [(2, 3)], "output label is repeated"),
      ("unknown_output", "ij->ik", [(2, 3)], "occur in no operand"),
      ("sizes_differ", "ij,jk->ik", [(2, 3), (4, 5)], "has sizes 3 and 4"),
      ("dropped_broadcast", "...ij,...jk->ik", [(5, 2, 3), (3, 4)], "write '...'"),
      ("two_ellipses", "...i...,i->i", [(2, 3), (3,)], "more than one"),
      ("bad_char", "i j,jk->ik", [(2, 3), (3, 4)], "must be letters"),
      ("rank", "ijk,jk->i", [(2, 3), (3, 4)], "do not fit"),
      ("operands", "ij->i", [(2, 3), (3, 4)], "names 1 operands"),
      ("no_broadcast", "...i,...i->...i", [(2, 3), (4, 3)], "do not broadcast"),
  )
  def test_parse_fails(self, eq, shapes, msg):
    with self.assertRaisesRegex(DescriptionError, msg):
      math_ops.einsum_labels(self._OP, eq, shapes)

  def test_contracted_labels_are_partials(self):
    sem = _semantics(math_cases.einsum_case("abde,cde->abc"))
    by = _by_var(analysis.strategies(sem, 2))
    self.assertEqual({v for v, s in by.items() if s.kind == "output"}, {"a", "b", "c"})
    self.assertEqual({v for v, s in by.items() if s.outputs == (PARTIAL,)}, {"d", "e"})
    self.assertEqual(analysis.facts(sem).reduction_vars, ("d", "e"))

  def test_gradient_equations_are_all_cased(self):
    """tf.einsum's gradients (traced with GradientTape in tf.function) use only cased equations."""
    cased = {c.attrs["equation"]: tuple(tuple(x.shape) for x in c.flat_inputs())
             for c in math_cases.CASES if c.op_type == "Einsum"}
    seen = set()
    for eq in math_cases.EINSUM_EQUATIONS:
      lhs = eq.split("->")[0].split(",")
      a, b = (tf.Variable(np.ones([math_cases.EINSUM_SIZES[c] for c in t], np.float32))
              for t in lhs)

      @tf.function
      def step(eq=eq, a=a, b=b):
        with tf.GradientTape() as tape:
          z = tf.einsum(eq, a, b)
          loss = tf.reduce_sum(z * z)
        return tape.gradient(loss, [a, b])

      graph = step.get_concrete_function().graph
      for op in graph.get_operations():
        if op.type == "Einsum":
          seen.add((op.get_attr("equation").decode(),
                    tuple(tuple(x.shape.as_list()) for x in op.inputs)))
    self.assertGreaterEqual(len(seen), len(math_cases.EINSUM_EQUATIONS))
    for eq, shapes in sorted(seen):
      self.assertIn(eq, cased, "an Einsum of a gradient has no case")
      self.assertEqual(cased[eq], shapes, eq)

  def test_keras_attention_train_step(self):
    """Every Einsum and batched matmul of a Keras 3 attention + EinsumDense step checks."""
    import keras
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    dense = keras.layers.EinsumDense("abc,cd->abd", output_shape=(None, 7), bias_axes="d")
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 5, 6)).astype(np.float32))
    dense(mha(x, x))
    weights = mha.trainable_variables + dense.trainable_variables

    @tf.function
    def step(x):
      with tf.GradientTape() as tape:
        z = dense(mha(x, x, use_causal_mask=True))
        loss = tf.reduce_sum(z * z)
      return tape.gradient(loss, weights)

    cases = {}
    for op in step.get_concrete_function(x).graph.get_operations():
      shapes = [tuple(t.shape.as_list()) for t in op.inputs]
      if op.type == "Einsum":
        eq = op.get_attr("equation").decode()
        cases[(eq, tuple(shapes))] = Case("Einsum", [[Rand(s) for s in shapes]],
                                          {"equation": eq})
      elif op.type in ("BatchMatMulV2", "BatchMatMulV3", "MatMul"):
        keys = ("adj_x", "adj_y") if op.type != "MatMul" else ("transpose_a", "transpose_b")
        attrs = {k: op.get_attr(k) for k in keys}
        cases[(op.type, tuple(shapes), tuple(attrs.items()))] = Case(
            op.type, [Rand(s) for s in shapes], attrs)
    self.assertTrue(any(c.op_type == "Einsum" for c in cases.values()))
    for case in cases.values():
      res = _check(self, case)
      self.assertGreater(res.checked, 0, str(case))


def _case_params():
  return [(f"{k:03d}_{c.op_type}", c) for k, c in enumerate(_ALL_CASES)]


class KernelCheckTest(parameterized.TestCase):

  @parameterized.named_parameters(*_case_params())
  def test_case(self, case):
    res = _check(self, case)
    self.assertGreater(res.checked, 0, f"{case}: no strategy was derived")


if __name__ == "__main__":
  absltest.main()
