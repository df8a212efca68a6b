"""Tests for tf_tofu.opdefs.tdl: index arithmetic, interval evaluation, value trees."""

import pickle

from absl.testing import absltest

from tf_tofu.opdefs import tdl


class IndexTest(absltest.TestCase):

  def test_affine_interval_is_exact(self):
    x, dx = tdl.Var("x", 5), tdl.Var("dx", 3)
    e = x * 2 + dx - 1
    self.assertEqual(e.interval({x: (0, 4), dx: (0, 2)}), (-1, 9))
    self.assertEqual(e.interval({x: (2, 3), dx: (0, 2)}), (3, 7))
    self.assertEqual(e.coefficient(x), 2)

  def test_negative_coefficient(self):
    i = tdl.Var("i", 6)
    e = 5 - i
    self.assertEqual(e.interval({i: (1, 3)}), (2, 4))

  def test_terms_merge(self):
    i = tdl.Var("i", 4)
    e = i + i - i
    self.assertEqual(e.terms, ((i, 1),))
    self.assertEqual((i - i).terms, ())

  def test_exact_division_rounds_inward(self):
    y, k = tdl.Var("y", 10), tdl.Var("k", 3)
    d = tdl.Div(y - k + 1, 2, exact=True)
    # y - k + 1 ranges over [3 - 2 + 1, 6 + 1] = [2, 7] for y in [3, 6].
    self.assertEqual(d.interval({y: (3, 6), k: (0, 2)}), (1, 3))
    f = tdl.Div(y - k + 1, 2, exact=False)
    self.assertEqual(f.interval({y: (2, 6), k: (0, 2)}), (0, 3))

  def test_non_affine_multiplication_raises(self):
    i, j = tdl.Var("i", 2), tdl.Var("j", 2)
    with self.assertRaisesRegex(TypeError, "affine"):
      (i + 0) * j

  def test_var_needs_static_extent(self):
    with self.assertRaisesRegex(ValueError, "static extent"):
      tdl.Var("i", None)

  def test_var_hash_is_that_of_its_fields_and_not_copied(self):
    # The hash is kept on the variable once computed; equal variables still hash and
    # compare alike, and a pickled copy (another process's string hashes) computes its own.
    i = tdl.Var("i", 4)
    self.assertEqual(hash(i), hash(("i", 4)))
    self.assertEqual(hash(i), hash(tdl.Var("i", 4)))
    self.assertEqual({i: 1}[tdl.Var("i", 4)], 1)
    self.assertNotEqual(i, tdl.Var("i", 5))
    copy = pickle.loads(pickle.dumps(i))
    self.assertNotIn("_hash", copy.__dict__)
    self.assertEqual((copy, hash(copy)), (i, hash(i)))


class ValueTest(absltest.TestCase):

  def test_access_rank_checked(self):
    i = tdl.Var("i", 2)
    with self.assertRaisesRegex(ValueError, "rank 2"):
      tdl.Access(0, "X", (2, 3), (tdl.Affine(((i, 1),)),))

  def test_mean_is_sum_over_size(self):
    i, j = tdl.Var("i", 2), tdl.Var("j", 4)
    x = tdl.Access(0, "X", (2, 4), tdl.index_items((i, j)))
    m = tdl.Mean(j, x)
    self.assertIsInstance(m, tdl.Apply)
    self.assertEqual(m.fn, "div")
    self.assertEqual(m.args[0].reducer, "sum")
    self.assertEqual(m.args[1].value, 4.0)

  def test_walk_and_accesses(self):
    i, k = tdl.Var("i", 2), tdl.Var("k", 3)
    a = tdl.Access(0, "A", (2, 3), tdl.index_items((i, k)))
    b = tdl.Access(1, "B", (3,), tdl.index_items((k,)))
    body = tdl.Sum(k, a * b + 1.0)
    self.assertEqual([x.name for x in tdl.accesses(body)], ["A", "B"])
    self.assertLen(list(tdl.walk(body)), 6)
    # Pre-order: Sum, add, mul, A, B, 1.0.
    self.assertEqual([type(x).__name__ for x in tdl.walk(body)],
                     ["Reduce", "Apply", "Apply", "Access", "Access", "Const"])

  def test_walk_of_a_deep_chain(self):
    # An AddN of many inputs is a left-deep chain: walked in order, however deep.
    i = tdl.Var("i", 2)
    xs = [tdl.Access(t, f"X{t}", (2,), tdl.index_items((i,))) for t in range(3000)]
    body = xs[0]
    for x in xs[1:]:
      body = body + x
    self.assertEqual([a.input for a in tdl.accesses(body)], list(range(3000)))
    self.assertLen(list(tdl.walk(body)), 2 * 3000 - 1)

  def test_output_shape_of_composite_dims(self):
    i, j = tdl.Var("i", 3), tdl.Var("j", 4)
    out = tdl.Output(((i, j),), tdl.Const(0.0))
    self.assertEqual(out.shape, (12,))

  def test_only_whole_slices(self):
    with self.assertRaisesRegex(ValueError, "whole-dimension"):
      tdl.index_items((slice(0, 2),))


if __name__ == "__main__":
  absltest.main()
