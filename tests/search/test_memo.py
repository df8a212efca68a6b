"""Tests for tf_tofu.search.memo: sharing work between searches never changes a result."""

import math

from absl.testing import absltest, parameterized

from tests import search_testlib
from tf_tofu.graph import view
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import budget, coarsen, onecut, planners, recursive
from tf_tofu.search.evaluate import EvalCache, evaluate
from tf_tofu.search.memo import SearchMemo
from tf_tofu.search.planners import PLANNERS
from tf_tofu.search.tofu import SearchOptions


def _same(test, a: recursive.SearchResult, b: recursive.SearchResult, what: str):
  test.assertEqual(a.factors, b.factors, what)
  test.assertEqual(a.layouts, b.layouts, what)
  test.assertEqual(a.strategies, b.strategies, what)
  test.assertEqual(a.evaluation.total_bytes, b.evaluation.total_bytes, what)
  test.assertEqual(a.evaluation.level_bytes, b.evaluation.level_bytes, what)
  test.assertEqual(a.evaluation.pair_bytes, b.evaluation.pair_bytes, what)
  test.assertEqual(a.objective, b.objective, what)
  test.assertEqual(a.proven_optimal, b.proven_optimal, what)


class SharedMemoTest(parameterized.TestCase):

  @parameterized.parameters(*[(seed, k) for seed in range(8) for k in (2, 4, 6)])
  def test_every_planner_through_one_memo_equals_each_alone(self, seed, k):
    graph = view.from_tofu_graph(search_testlib.random_graph(seed, max_ops=10))
    describer = Describer()
    groups = coarsen.tensor_groups(graph, describer)
    memo = SearchMemo(describer)
    for name in PLANNERS:  # in turn through one memo, as the never-worse pass runs them
      shared = recursive.search(graph, groups, k, describer,
                                PLANNERS[name](describer, SearchOptions()), memo=memo)
      alone_describer = Describer()
      alone = recursive.search(graph, coarsen.tensor_groups(graph, alone_describer), k,
                               alone_describer, PLANNERS[name](alone_describer, SearchOptions()))
      _same(self, shared, alone, f"seed {seed}, k {k}, {name}")

  @parameterized.parameters(0, 1, 2)
  def test_never_worse_equals_the_cheapest_planner_run_alone(self, seed):
    graph = view.from_tofu_graph(search_testlib.random_graph(seed, max_ops=10))
    for k in (2, 4):
      best = min(planners.run(p, graph, k, Describer()).evaluation.total_bytes
                 for p in ("tofu",) + planners.CUT_ONLY)
      got = planners.run("tofu", graph, k, Describer(), SearchOptions(never_worse=True))
      improved = [n for n in got.notes if n.startswith("exact improvement pass")]
      self.assertLessEqual(got.evaluation.total_bytes, best, f"seed {seed}, k {k}")
      self.assertEqual(bool(improved), got.evaluation.total_bytes < best, f"seed {seed}, k {k}")

  def test_budget_search_through_a_warm_memo_equals_a_fresh_one(self):
    graph = view.from_tofu_graph(search_testlib.random_graph(3, max_ops=10))
    options = SearchOptions(memory_budget=math.inf)
    rivals = planners.budget_rivals(options)
    describer = Describer()
    groups = coarsen.tensor_groups(graph, describer)
    warm = SearchMemo(describer)
    for name in PLANNERS:  # entries from other searches of the graph
      recursive.search(graph, groups, 4, describer, PLANNERS[name](describer, SearchOptions()),
                       memo=warm)
    shared = budget.frontier(graph, groups, 4, describer, options, rivals, warm)
    fresh_describer = Describer()
    fresh = budget.frontier(graph, coarsen.tensor_groups(graph, fresh_describer), 4,
                            fresh_describer, options, rivals)
    self.assertEqual([c.label for c in shared], [c.label for c in fresh])
    for a, b in zip(shared, fresh):
      _same(self, a.result, b.result, a.label)
      self.assertEqual(a.peak, b.peak, a.label)


class MemoPartsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.graph = view.from_tofu_graph(search_testlib.random_graph(1, max_ops=10))
    self.describer = Describer()

  def test_a_memo_belongs_to_one_describer(self):
    memo = SearchMemo(self.describer)
    groups = coarsen.tensor_groups(self.graph, self.describer)
    with self.assertRaisesRegex(ValueError, "one Describer"):
      recursive.search(self.graph, groups, 2, Describer(),
                       PLANNERS["tofu"](self.describer, SearchOptions()), memo=memo)

  def test_one_eval_cache_per_factor_order(self):
    memo = SearchMemo(self.describer)
    self.assertIs(memo.eval_cache([2, 2]), memo.eval_cache((2, 2)))
    self.assertIsNot(memo.eval_cache((2, 2)), memo.eval_cache((4,)))
    self.assertEqual(memo.eval_cache((2, 3)).factors, (2, 3))

  def test_caches_refuse_another_worker_count_or_factor_order(self):
    groups = coarsen.tensor_groups(self.graph, self.describer)
    contexts = {op.name: op.context for op in self.graph.ops}
    shapes = {t: s.shape for t, s in self.graph.tensors.items()}
    with self.assertRaisesRegex(ValueError, "PricingCache for 3 workers used for 2"):
      onecut.build_level(self.graph, groups, contexts, shapes, 2, self.describer, {},
                         cache=onecut.PricingCache(3))
    with self.assertRaisesRegex(ValueError, r"EvalCache of factors \(2, 2\)"):
      evaluate(self.graph, (4,), {t: () for t in self.graph.tensors}, {}, self.describer,
               EvalCache((2, 2)))

  def test_equal_level_problems_are_built_once_and_narrowed_ones_apart(self):
    groups = coarsen.tensor_groups(self.graph, self.describer)
    contexts = {op.name: op.context for op in self.graph.ops}
    shapes = {t: s.shape for t, s in self.graph.tensors.items()}
    cache = onecut.PricingCache(2)
    full = onecut.build_level(self.graph, groups, contexts, shapes, 2, self.describer, {},
                              cache=cache)
    self.assertIs(full, onecut.build_level(self.graph, groups, dict(contexts), dict(shapes), 2,
                                           self.describer, {}, cache=cache))
    g = next(g for g, d in enumerate(full.domains) if len(d) > 1)
    narrowed = {g: full.domains[g][:1]}
    wirings = dict(cache.wirings)  # per op group (none is split here), how its members
    self.assertLen(wirings, len(full.units))  # share tensors
    shared = onecut.build_level(self.graph, groups, contexts, shapes, 2, self.describer,
                                narrowed, cache=cache)
    self.assertEqual(cache.wirings, wirings)  # another domain, the same wiring
    fresh = onecut.build_level(self.graph, groups, contexts, shapes, 2, self.describer,
                               narrowed)
    self.assertIsNot(shared, full)
    self.assertEqual(shared.domains, fresh.domains)
    self.assertEqual(len(shared.factors), len(fresh.factors))
    for a, b in zip(shared.factors, fresh.factors):
      self.assertEqual(a.scope, b.scope)
      self.assertEqual(a.table.tolist(), b.table.tolist())


if __name__ == "__main__":
  absltest.main()
