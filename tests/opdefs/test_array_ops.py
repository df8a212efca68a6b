"""Tests of the array-op descriptions: known strategies, and every case on the real kernel."""

from __future__ import annotations


import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.opdefs import analysis, registry, validate
from tf_tofu.opdefs.cases import Case, Fixed, Rand, array_cases
from tf_tofu.opdefs.description import DescriptionError, OpContext, TensorInfo
from tf_tofu.core.regions import Interval
from tf_tofu.core.states import PARTIAL, REP, Cut

def _semantics(case: Case):
  ctx, _ = validate.build_case(case)
  return registry.lookup(case.op_type)(ctx)


def _by_output_dim(sem, n: int, output: int = 0) -> dict:
  """Strategies that cut ``output``, keyed by the dim they cut."""
  out = {}
  for s in analysis.strategies(sem, n):
    st = s.outputs[output]
    if isinstance(st, Cut):
      out[st.dim] = s
  return out


def _case_name(i: int, case: Case) -> str:
  label = "".join(ch if ch.isalnum() else "_" for ch in case.label)
  return f"{i:02d}_{case.op_type}" + (f"_{label}" if label else "")


class ReshapeTest(parameterized.TestCase):

  def test_split_cuts_whole_and_major_dims_not_the_minor_one(self):
    # [6, 4] -> [3, 2, 4]: out dim 0 is the major digit of in dim 0, out dim 2 is
    # in dim 1; out dim 1 is the minor digit of in dim 0 (a strided set of rows).
    sem = _semantics(Case("Reshape", [Rand((6, 4)), Fixed([3, 2, 4], "int32")]))
    facts = analysis.facts(sem)
    self.assertEqual(facts.cuttable_dims, ((0, 2),))
    self.assertEqual(facts.opaque_vars, ("o1",))
    for n in (2, 3, 4):
      by_dim = _by_output_dim(sem, n)
      self.assertNotIn(1, by_dim, f"n={n}")
      self.assertEqual(by_dim[2].inputs[0].state, Cut(1))
      self.assertIsNone(by_dim[2].inputs[1])  # the shape is a meta input
    # Cutting out dim 0 (3 rows of 2x4) reads whole pairs of input rows.
    s2 = _by_output_dim(sem, 2)[0]
    self.assertIsNone(s2.inputs[0].state)
    self.assertEqual([r.intervals[0] for r in s2.inputs[0].regions],
                     [Interval(0, 4), Interval(4, 6)])
    self.assertEqual(_by_output_dim(sem, 3)[0].inputs[0].state, Cut(0))

  def test_merge_cuts_the_major_var_of_the_composite(self):
    # [3, 2, 4] -> [3, 8]: out dim 1 = (b, c); b is cut, c is not.
    sem = _semantics(Case("Reshape", [Rand((3, 2, 4)), Fixed([3, 8], "int32")]))
    by_dim = _by_output_dim(sem, 2)
    self.assertEqual(by_dim[0].inputs[0].state, Cut(0))
    self.assertEqual(by_dim[1].var, "o1_0")
    self.assertEqual(by_dim[1].inputs[0].state, Cut(1))
    self.assertNotIn(1, _by_output_dim(sem, 4))  # b has 2 values only

  def test_shared_major_factor_and_entangled_rest(self):
    # [6, 4] -> [4, 6]: only the common major factor 2 is a digit of both.
    sem = _semantics(Case("Reshape", [Rand((6, 4)), Fixed([4, 6], "int32")]))
    strategies = analysis.strategies(sem, 2)
    self.assertEqual([(s.var, s.outputs, s.inputs[0].state) for s in strategies],
                     [("o0_0", (Cut(0),), Cut(0))])
    self.assertEqual(analysis.strategies(sem, 3), ())
    entangled = _semantics(Case("Reshape", [Rand((2, 3)), Fixed([3, 2], "int32")]))
    self.assertEqual(analysis.strategies(entangled, 2), ())

  def test_shard_hook_gives_the_block_shape(self):
    sem = _semantics(Case("Reshape", [Rand((6, 4)), Fixed([3, 2, 4], "int32")]))
    s = _by_output_dim(sem, 3)[0]
    specs = [sem.shard_spec(w).meta_inputs[1].tolist() for w in s.workers]
    self.assertEqual(specs, [[1, 2, 4]] * 3)


class LayoutOpsTest(parameterized.TestCase):

  @parameterized.parameters(([2, 0, 1],), ([1, 2, 0],), ([0, 2, 1],))
  def test_transpose_cut_of_output_dim_needs_input_cut_of_perm(self, perm):
    shape = (4, 5, 6)
    sem = _semantics(Case("Transpose", [Rand(shape), Fixed(perm, "int32")]))
    for n in (2, 3, 4):
      by_dim = _by_output_dim(sem, n)
      self.assertEqual(sorted(by_dim), [0, 1, 2])
      for d, s in by_dim.items():
        self.assertEqual(s.inputs[0].state, Cut(perm[d]), f"perm={perm} n={n} d={d}")

  def test_concat_along_axis_needs_regions_elsewhere_plain_cuts(self):
    sem = _semantics(Case("ConcatV2", [[Rand((5, 3)), Rand((5, 4)), Rand((5, 2))],
                                       Fixed(1, "int32")]))
    by_dim = _by_output_dim(sem, 2)
    along = by_dim[1]
    self.assertEqual([need.state for need in along.inputs[:3]], [None, Cut(1), None])
    self.assertIsNone(along.inputs[3])
    # Output columns [0, 5) and [5, 9): worker 0 holds X0 and X1[:, :2], worker 1
    # X1[:, 2:] and X2; the operand a worker does not touch is an empty box.
    cols = [[r.intervals[1] for r in need.regions] for need in along.inputs[:3]]
    self.assertEqual(cols, [[Interval(0, 3), Interval(3, 3)],
                            [Interval(0, 2), Interval(2, 4)],
                            [Interval(0, 0), Interval(0, 2)]])
    across = by_dim[0]
    self.assertEqual([need.state for need in across.inputs[:3]], [Cut(0)] * 3)

  def test_tile_cuts_the_tile_index_not_the_inner_index(self):
    # [3, 4] tiled [2, 1]: out dim 0 = (t, i), cut t with X replicated.
    sem = _semantics(Case("Tile", [Rand((3, 4)), Fixed([2, 1], "int32")]))
    by_dim = _by_output_dim(sem, 2)
    self.assertEqual(by_dim[0].var, "t0")
    self.assertEqual(by_dim[0].inputs[0].state, REP)
    self.assertEqual(by_dim[1].inputs[0].state, Cut(1))
    self.assertEqual([sem.shard_spec(w).meta_inputs[1].tolist() for w in by_dim[0].workers],
                     [[1, 1], [1, 1]])
    self.assertNotIn(0, _by_output_dim(sem, 3))  # 3 workers cannot split 2 tiles

  def test_squeeze_hook_makes_squeeze_dims_explicit(self):
    sem = _semantics(Case("Squeeze", [Rand((5, 1, 6, 1))]))
    s = _by_output_dim(sem, 4)[0]
    self.assertEqual(sem.shard_spec(s.workers[3]).attrs, {"squeeze_dims": [1, 3]})


class DataDependentOpsTest(parameterized.TestCase):

  @parameterized.parameters((0,), (1,), (2,))
  def test_gather_axis_is_not_cuttable_other_dims_are(self, axis):
    params = (4, 9, 5)
    sem = _semantics(Case("GatherV2", [Rand(params), Rand((2, 3), "int32", 0, params[axis]),
                                       Fixed(axis, "int32")]))
    facts = analysis.facts(sem)
    self.assertEqual(facts.cuttable_dims, ((0, 1, 2, 3),))
    for n in (2, 3, 4):
      for s in analysis.strategies(sem, n):
        self.assertNotEqual(s.inputs[0].state, Cut(axis), str(s))
        for r in s.inputs[0].regions:
          self.assertEqual(r.intervals[axis], Interval(0, params[axis]), str(s))
    # Cutting an indices dim leaves params replicated.
    s = _by_output_dim(sem, 2)[axis]
    self.assertEqual((s.inputs[0].state, s.inputs[1].state), (REP, Cut(0)))

  def test_unsorted_segment_sum_cut_of_ids_is_partial(self):
    sem = _semantics(Case("UnsortedSegmentSum", [Rand((9, 4)), Rand((9,), "int32", 0, 5),
                                                 Fixed(5, "int32")]))
    facts = analysis.facts(sem)
    self.assertEqual(facts.opaque_vars, ("s",))
    self.assertEqual(facts.reduction_vars, ("q0",))
    self.assertEqual(facts.cuttable_dims, ((1,),))
    for n in (2, 3, 4):
      by_var = {s.var: s for s in analysis.strategies(sem, n)}
      self.assertEqual(sorted(by_var), ["q0", "t0"])
      q = by_var["q0"]
      self.assertEqual((q.kind, q.outputs), ("reduce", (PARTIAL,)))
      self.assertEqual((q.inputs[0].state, q.inputs[1].state), (Cut(0), Cut(0)))
      self.assertEqual(by_var["t0"].inputs[1].state, REP)

  def test_unsorted_segment_max_cut_of_ids_is_not_a_strategy(self):
    sem = _semantics(Case("UnsortedSegmentMax", [Rand((8, 3)), Rand((8,), "int32", 0, 4),
                                                 Fixed(4, "int32")]))
    self.assertEqual([s.var for s in analysis.strategies(sem, 2)], ["t0"])

  def test_one_hot_depth_is_opaque(self):
    sem = _semantics(Case("OneHot", [Rand((4, 3), "int32", 0, 5), Fixed(5, "int32"),
                                     Rand(()), Rand(())], {"axis": 1}))
    self.assertEqual(analysis.facts(sem).cuttable_dims, ((0, 2),))

  def test_cumsum_axis_and_top_k_rows_are_opaque(self):
    cumsum = _semantics(Case("Cumsum", [Rand((6, 3, 4)), Fixed(1, "int32")]))
    self.assertEqual(analysis.facts(cumsum).cuttable_dims, ((0, 2),))
    top_k = _semantics(Case("TopKV2", [Rand((2, 4, 7)), Fixed(2, "int32")]))
    self.assertEqual(analysis.facts(top_k).cuttable_dims, ((0, 1), (0, 1)))

  def test_scatter_nd_cut_of_rows_is_partial_and_slices_are_free(self):
    sem = _semantics(Case("ScatterNd", [Rand((6, 1), "int32", 0, 5), Rand((6, 3)),
                                        Fixed([5, 3], "int32")]))
    facts = analysis.facts(sem)
    self.assertEqual(facts.opaque_vars, ("s0",))
    self.assertEqual(facts.reduction_vars, ("q0",))
    by_var = {s.var: s for s in analysis.strategies(sem, 2)}
    self.assertEqual(sorted(by_var), ["q0", "t0"])
    self.assertEqual((by_var["q0"].kind, by_var["q0"].outputs), ("reduce", (PARTIAL,)))
    self.assertEqual(by_var["t0"].inputs[0].state, REP)   # every index row, whole


class FailuresTest(absltest.TestCase):

  def test_empty_strided_slice_is_left_whole(self):
    case = Case("StridedSlice", [Rand((5, 4)), Fixed([3], "int32"), Fixed([3], "int32"),
                                 Fixed([1], "int32")])
    with self.assertRaisesRegex(DescriptionError, "empty"):
      _semantics(case)

  def test_non_constant_shape_is_rejected(self):
    ctx = OpContext(name="r", op_type="Reshape", attrs={"T": "float32"},
                    inputs=(TensorInfo((6, 4), "float32"), TensorInfo((2,), "int32")))
    with self.assertRaisesRegex(DescriptionError, "'r' \\(Reshape\\).*must be a constant"):
      registry.lookup("Reshape")(ctx)

  def test_concat_of_mismatched_operands_fails(self):
    ctx = OpContext(name="c", op_type="ConcatV2", attrs={},
                    inputs=(TensorInfo((2, 3), "float32"), TensorInfo((4, 5), "float32"),
                            TensorInfo((), "int32", np.asarray(0, np.int32))))
    with self.assertRaisesRegex(DescriptionError, "do not concatenate"):
      registry.lookup("ConcatV2")(ctx)


class KernelCheckTest(parameterized.TestCase):
  """Every case, every strategy, n in {2, 3, 4}, on the real kernel."""

  def _check(self, case: Case):
    res = validate.check_case(case)
    self.assertIsNone(res.error, f"{case}: {res.error}")
    self.assertEqual(res.mismatches, [], f"{case}: {len(res.mismatches)} mismatches:\n"
                     + "\n".join(res.mismatches[:5]))
    self.assertEqual(sorted(res.strategies), list(validate.WORKER_COUNTS), str(case))
    if case.label != "entangled":
      self.assertGreater(res.checked, 0, f"{case}: no strategy was derived")

  @parameterized.named_parameters(
      (_case_name(i, c), c) for i, c in enumerate(array_cases.CASES))
  def test_case(self, case):
    self._check(case)


if __name__ == "__main__":
  absltest.main()
