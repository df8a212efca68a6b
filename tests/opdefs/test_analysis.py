"""Tests for tf_tofu.opdefs.analysis: strategies and regions derived from TDL lambdas."""

from absl.testing import absltest, parameterized

from tf_tofu.opdefs import analysis, tdl
from tf_tofu.opdefs.description import DescriptionError, OpContext, Semantics, TensorInfo
from tf_tofu.core.regions import Pool, Region
from tf_tofu.core.states import PARTIAL, REP, Cut


def ctx(*shapes, op_type="Test"):
  return OpContext(name="t", op_type=op_type, attrs={},
                   inputs=tuple(TensorInfo(s, "float32") for s in shapes))


def matmul_sem(m=6, k=5, n=7):
  op = ctx((m, k), (k, n))
  a, b = op.input(0), op.input(1)
  i, j, kk = tdl.Var("i", m), tdl.Var("j", n), tdl.Var("k", k)
  return Semantics(op, [tdl.Output((i, j), tdl.Sum(kk, a[i, kk] * b[kk, j]))])


def conv1d_sem(length=10, taps=3, pad=1, stride=1):
  """Y[x] = Sum_dx X[x*stride + dx - pad] (guarded)."""
  op = ctx((length,), (taps,))
  x, f = op.input(0), op.input(1)
  out_len = (length + 2 * pad - taps) // stride + 1
  xv, dx = tdl.Var("x", out_len), tdl.Var("dx", taps)
  return Semantics(op, [tdl.Output((xv,), tdl.Sum(dx, x.at(xv * stride + dx - pad) * f[dx]))])


class MatmulTest(absltest.TestCase):

  def test_three_strategies(self):
    strats = analysis.strategies(matmul_sem(), 2)
    self.assertEqual([(s.var, s.kind) for s in strats],
                     [("i", "output"), ("j", "output"), ("k", "reduce")])
    by_var = {s.var: s for s in strats}
    self.assertEqual([n.state for n in by_var["i"].inputs], [Cut(0), REP])
    self.assertEqual(by_var["i"].outputs, (Cut(0),))
    self.assertEqual([n.state for n in by_var["j"].inputs], [REP, Cut(1)])
    self.assertEqual([n.state for n in by_var["k"].inputs], [Cut(1), Cut(0)])
    self.assertEqual(by_var["k"].outputs, (PARTIAL,))

  def test_uneven_blocks(self):
    s = analysis.strategies(matmul_sem(m=7), 3)[0]
    self.assertEqual([w.output_regions[0].shape for w in s.workers], [(3, 7), (2, 7), (2, 7)])
    self.assertEqual([w.input_regions[0].shape for w in s.workers], [(3, 5), (2, 5), (2, 5)])

  def test_a_shared_pool_gives_equal_boxes_one_object(self):
    # Two ops reading an A of one shape: the boxes of their strategies are one object
    # per distinct box, and the strategies equal those derived with a pool of their own.
    pool = Pool()
    first = analysis.strategies(matmul_sem(m=6, k=5, n=7), 3, pool)
    second = analysis.strategies(matmul_sem(m=6, k=5, n=4), 3, pool)
    self.assertEqual(first, analysis.strategies(matmul_sem(m=6, k=5, n=7), 3))
    self.assertEqual(second, analysis.strategies(matmul_sem(m=6, k=5, n=4), 3))
    for a, b in zip(first[0].inputs[0].regions, second[0].inputs[0].regions):
      self.assertIs(a, b)
    self.assertIs(first[1].inputs[0].regions[0], pool.whole((6, 5)))

  def test_a_dim_of_one_element_read_by_worker_zero_alone_is_cut(self):
    # y[i] = x.at(i), i of extent 2, x of one element: worker 0 reads x whole, worker 1
    # reads nothing (its access is padding), which is block w of x's dim cut 2 ways.
    op = ctx((1,))
    i = tdl.Var("i", 2)
    sem = Semantics(op, [tdl.Output((i,), op.input(0).at(i))])
    (s,) = analysis.strategies(sem, 2)
    self.assertEqual([r.shape for r in s.inputs[0].regions], [(1,), (0,)])
    self.assertEqual(s.inputs[0].state, Cut(0))

  def test_var_smaller_than_n_is_not_cut(self):
    strats = analysis.strategies(matmul_sem(m=3, k=2, n=8), 4)
    self.assertEqual([s.var for s in strats], ["j"])

  def test_work_is_the_iteration_space(self):
    self.assertEqual(analysis.work(matmul_sem(m=6, k=5, n=7)), 6 * 5 * 7)
    self.assertEqual(analysis.work(conv1d_sem(length=10, taps=3, pad=1)), 10 * 3)
    op = ctx((4, 3))
    i, j = tdl.Var("i", 4), tdl.Var("j", 3)
    relu = Semantics(op, [tdl.Output((i, j), op.input(0)[i, j] * op.input(0)[i, j])])
    self.assertEqual(analysis.work(relu), 12)

  def test_n_below_two_rejected(self):
    with self.assertRaisesRegex(ValueError, "n >= 2"):
      analysis.strategies(matmul_sem(), 1)


class HaloTest(absltest.TestCase):

  def test_conv1d_halo_regions_and_padding(self):
    sem = conv1d_sem(length=10, taps=3, pad=1)
    s = next(s for s in analysis.strategies(sem, 2) if s.var == "x")
    self.assertIsNone(s.inputs[0].state)  # a halo, not a plain cut
    self.assertEqual(s.inputs[0].regions, (Region.of([(0, 6)]), Region.of([(4, 10)])))
    self.assertEqual(s.workers[0].input_padding[0], ((1, 0),))
    self.assertEqual(s.workers[1].input_padding[0], ((0, 1),))
    self.assertEqual(s.inputs[1].state, REP)

  def test_strided_window(self):
    sem = conv1d_sem(length=9, taps=3, pad=0, stride=2)  # 4 outputs
    s = next(s for s in analysis.strategies(sem, 2) if s.var == "x")
    self.assertEqual(s.inputs[0].regions, (Region.of([(0, 5)]), Region.of([(4, 9)])))

  def test_taps_give_partial(self):
    sem = conv1d_sem()
    s = next(s for s in analysis.strategies(sem, 3) if s.var == "dx")
    self.assertEqual(s.outputs, (PARTIAL,))
    self.assertEqual(s.inputs[1].state, Cut(0))


class LinearityTest(parameterized.TestCase):

  def _row_reduce(self, make_body):
    op = ctx((4, 6))
    x = op.input(0)
    i, j = tdl.Var("i", 4), tdl.Var("j", 6)
    return Semantics(op, [tdl.Output((i,), make_body(x, i, j))])

  @parameterized.named_parameters(
      ("sum", lambda x, i, j: tdl.Sum(j, x[i, j]), True),
      ("mean", lambda x, i, j: tdl.Mean(j, x[i, j]), True),
      ("scaled_sum", lambda x, i, j: 2.0 * tdl.Sum(j, x[i, j]) / 3.0, True),
      ("divided_by_an_element_of_the_row", lambda x, i, j: tdl.Sum(j, x[i, j]) / x[i, 0], False),
      ("neg_sum", lambda x, i, j: -tdl.Sum(j, x[i, j]), True),
      ("max", lambda x, i, j: tdl.Max(j, x[i, j]), False),
      ("prod", lambda x, i, j: tdl.Prod(j, x[i, j]), False),
      ("exp_of_sum", lambda x, i, j: tdl.call("exp", tdl.Sum(j, x[i, j])), False),
      ("plus_constant", lambda x, i, j: x[i, 0] + tdl.Sum(j, x[i, j]), False),
      ("sum_times_sum", lambda x, i, j: tdl.Sum(j, x[i, j]) * tdl.Sum(j, x[i, j]), False),
  )
  def test_partial_only_when_linear(self, make_body, partial):
    strats = analysis.strategies(self._row_reduce(make_body), 2)
    self.assertEqual("j" in [s.var for s in strats], partial)
    self.assertIn("i", [s.var for s in strats])

  def test_opaque_vars_are_never_cut(self):
    op = ctx((4, 6, 6))
    m = op.input(0)
    b, i, j = tdl.Var("b", 4), tdl.Var("i", 6), tdl.Var("j", 6)
    sem = Semantics(op, [tdl.Output((b, i, j), tdl.Opaque("chol", (m[b, :, :],), over=(i, j)))])
    s = analysis.strategies(sem, 2)
    self.assertEqual([x.var for x in s], ["b"])
    self.assertEqual(analysis.facts(sem).opaque_vars, ("i", "j"))


class WideningTest(absltest.TestCase):

  def test_normaliser_over_the_row_blocks_its_cut(self):
    """exp(x[i, j]) / Sum_k exp(x[i, k]): j cannot be cut, i can."""
    op = ctx((4, 6))
    x = op.input(0)
    i, j, k = tdl.Var("i", 4), tdl.Var("j", 6), tdl.Var("k", 6)
    body = tdl.call("exp", x[i, j]) / tdl.Sum(k, tdl.call("exp", x[i, k]))
    sem = Semantics(op, [tdl.Output((i, j), body)])
    self.assertEqual([s.var for s in analysis.strategies(sem, 2)], ["i"])

  def test_a_reduction_whose_input_is_read_whole_elsewhere_is_not_partial(self):
    """Sum_k x[i, k] * Sum_l x[i, l]: cutting k leaves x needed whole along dim 1."""
    op = ctx((4, 6))
    x = op.input(0)
    i, k, l = tdl.Var("i", 4), tdl.Var("k", 6), tdl.Var("l", 6)
    sem = Semantics(op, [tdl.Output((i,), tdl.Sum(k, x[i, k] * tdl.Sum(l, x[i, l])))])
    self.assertEqual([s.var for s in analysis.strategies(sem, 2)], ["i"])


class CompositeDimTest(absltest.TestCase):

  def _merge(self, a, b):
    """Reshape [a, b] -> [a*b]: out[(i, j)] = X[i, j]."""
    op = ctx((a, b))
    x = op.input(0)
    i, j = tdl.Var("i", a), tdl.Var("j", b)
    return Semantics(op, [tdl.Output(((i, j),), x[i, j])])

  def test_major_var_cuts_minor_does_not(self):
    strats = analysis.strategies(self._merge(4, 3), 2)
    self.assertEqual([s.var for s in strats], ["i"])
    self.assertEqual(strats[0].outputs, (Cut(0),))
    self.assertEqual(strats[0].inputs[0].state, Cut(0))

  def test_blocks_must_land_on_canonical_blocks(self):
    # 3 rows of 4 into 2: blocks of i are [0, 2), [2, 3) -> [0, 8), [8, 12), but the
    # canonical blocks of 12 are [0, 6), [6, 12): no strategy.
    self.assertEqual(analysis.strategies(self._merge(3, 4), 2), ())
    self.assertLen(analysis.strategies(self._merge(3, 4), 3), 1)


class ChecksTest(absltest.TestCase):

  def test_unguarded_out_of_bounds_access_raises(self):
    op = ctx((5,))
    x = op.input(0)
    i = tdl.Var("i", 5)
    sem = Semantics(op, [tdl.Output((i,), x[i + 1])])
    with self.assertRaisesRegex(DescriptionError, "unguarded access"):
      analysis.strategies(sem, 2)

  def test_unbound_variable_rejected(self):
    op = ctx((5, 5))
    x = op.input(0)
    i, j = tdl.Var("i", 5), tdl.Var("j", 5)
    with self.assertRaisesRegex(DescriptionError, "neither index the output nor are reduced"):
      Semantics(op, [tdl.Output((i,), x[i, j])])

  def test_undescribed_input_rejected(self):
    op = ctx((5,), (5,))
    x = op.input(0)
    i = tdl.Var("i", 5)
    with self.assertRaisesRegex(DescriptionError, r"inputs \[1\]"):
      Semantics(op, [tdl.Output((i,), x[i])])

  def test_same_name_different_extent_rejected(self):
    op = ctx((5,), (4,))
    x, y = op.input(0), op.input(1)
    i = tdl.Var("i", 5)
    k = tdl.Var("i", 4)
    sem = Semantics(op, [tdl.Output((i,), x[i] * tdl.Sum(k, y[k]))])
    with self.assertRaisesRegex(DescriptionError, "two index variables"):
      analysis.strategies(sem, 2)


class FactsTest(absltest.TestCase):

  def test_matmul_facts(self):
    f = analysis.facts(matmul_sem())
    self.assertFalse(f.elementwise)
    self.assertEqual(f.output_vars, ("i", "j"))
    self.assertEqual(f.reduction_vars, ("k",))
    self.assertEqual(f.cuttable_dims, ((0, 1),))

  def test_elementwise_with_broadcast(self):
    op = ctx((4, 6), (1, 6))
    x, y = op.input(0), op.input(1)
    i, j = tdl.Var("i", 4), tdl.Var("j", 6)
    sem = Semantics(op, [tdl.Output((i, j), x[i, j] + y[0, j])])
    f = analysis.facts(sem)
    self.assertTrue(f.elementwise)
    s = analysis.strategy_for(sem, i, 2)
    self.assertEqual([n.state for n in s.inputs], [Cut(0), REP])

  def test_transpose_is_not_elementwise(self):
    op = ctx((4, 6))
    x = op.input(0)
    i, j = tdl.Var("i", 6), tdl.Var("j", 4)
    sem = Semantics(op, [tdl.Output((i, j), x[j, i])])
    self.assertFalse(analysis.facts(sem).elementwise)


if __name__ == "__main__":
  absltest.main()
