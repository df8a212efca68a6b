"""Tests for tf_tofu.search.recursive: prime factors, factor orders, k-way plans for any k."""

from absl.testing import absltest, parameterized

from tests import search_testlib
from tf_tofu.graph import view
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import planners, recursive


class RecursionTest(parameterized.TestCase):

  @parameterized.parameters((1, ()), (2, (2,)), (8, (2, 2, 2)), (12, (2, 2, 3)), (7, (7,)))
  def test_prime_factors(self, k, want):
    self.assertEqual(recursive.prime_factors(k), want)

  def test_factor_orders(self):
    self.assertEqual(recursive.factor_orders(12), [(2, 2, 3), (2, 3, 2), (3, 2, 2)])

  def test_deterministic(self):
    fg = search_testlib.random_graph(4)
    a = planners.run("tofu", view.from_tofu_graph(fg), 6, Describer())
    b = planners.run("tofu", view.from_tofu_graph(search_testlib.random_graph(4)), 6, Describer())
    self.assertEqual(a.layouts, b.layouts)
    self.assertEqual(a.strategies, b.strategies)
    self.assertEqual(a.evaluation, b.evaluation)

  def test_uneven_sizes_run_on_every_device(self):
    fg = search_testlib.random_graph(2)
    res = planners.run("tofu", view.from_tofu_graph(fg), 5, Describer())
    self.assertEqual(res.factors, (5,))
    self.assertGreaterEqual(res.evaluation.total_bytes, 0)


if __name__ == "__main__":
  absltest.main()
