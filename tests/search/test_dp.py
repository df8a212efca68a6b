"""Tests for tf_tofu.search.dp: exact elimination equals brute force; the fallback is sound."""

import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.search import dp


def random_problem(seed, groups=8, factors=10, max_scope=3, max_domain=3):
  rng = np.random.default_rng(seed)
  domains = [int(rng.integers(1, max_domain + 1)) for _ in range(groups)]
  fs = []
  for _ in range(factors):
    k = int(rng.integers(1, max_scope + 1))
    scope = tuple(sorted(rng.choice(groups, size=k, replace=False).tolist()))
    table = rng.integers(0, 50, size=[domains[g] for g in scope]).astype(float)
    fs.append(dp.Factor(scope, table))
  return domains, fs


class SolveTest(parameterized.TestCase):

  @parameterized.parameters(range(12))
  def test_equals_brute_force(self, seed):
    domains, fs = random_problem(seed)
    sol = dp.solve(domains, fs)
    _, best = dp.brute_force(domains, fs)
    self.assertTrue(sol.proven_optimal)
    self.assertEqual(sol.cost, best)
    self.assertEqual(dp.evaluate(fs, sol.assignment), sol.cost)

  @parameterized.parameters(range(6))
  def test_single_states_fold_as_one_at_a_time_conditioning(self, seed):
    # Same factors, same tables, same order as conditioning each one-state group in
    # index order (which moves the factors it touches to the end).
    domains, fs = random_problem(seed, groups=10, factors=25, max_domain=2)
    single = [d == 1 for d in domains]
    self.assertTrue(any(single) and not all(single))
    graph = dp._FactorGraph(domains, fs)
    for g in range(len(domains)):
      if single[g]:
        graph.condition(g, 0)
    want = [graph.live[i] for i in sorted(graph.live)]
    got = dp.fold_single_states(fs, single)
    self.assertEqual([f.scope for f in got], [f.scope for f in want])
    for a, b in zip(got, want):
      np.testing.assert_array_equal(a.table, b.table)

  @parameterized.parameters(range(12))
  def test_fits_tells_when_the_exact_elimination_is_too_wide(self, seed):
    # dp.fits runs the same elimination without tables: it says False exactly
    # when solve(exact_only=True) raises TooWide.
    domains, fs = random_problem(seed, groups=12, factors=24, max_scope=3, max_domain=3)
    seen = set()
    for max_table in (1, 3, 9, 27, 81, 243, 729, 1 << 20):
      try:
        dp.solve(domains, fs, max_table=max_table, exact_only=True)
        exact = True
      except dp.TooWide:
        exact = False
      self.assertEqual(dp.fits(domains, fs, max_table), exact, max_table)
      seen.add(exact)
    self.assertEqual(seen, {True, False})

  def test_chain_has_width_one(self):
    domains = [3] * 20
    fs = [dp.Factor((g, g + 1), np.arange(9.0).reshape(3, 3)) for g in range(19)]
    sol = dp.solve(domains, fs)
    self.assertEqual(sol.width, 1)
    self.assertEqual(sol.cost, 0.0)

  def test_fallback_when_too_wide(self):
    # A clique of 10 ternary groups: eliminating any one needs 3^10 entries.
    rng = np.random.default_rng(0)
    domains = [3] * 10
    fs = [dp.Factor((a, b), rng.integers(0, 9, size=(3, 3)).astype(float))
          for a in range(10) for b in range(a + 1, 10)]
    sol = dp.solve(domains, fs, max_table=3 ** 4)
    self.assertFalse(sol.proven_optimal)
    self.assertNotEmpty(sol.fixed)
    icm = dp.coordinate_descent(domains, fs)
    self.assertLessEqual(sol.cost, dp.evaluate(fs, icm))
    _, best = dp.brute_force(domains, fs)
    self.assertGreaterEqual(sol.cost, best)
    self.assertLess(sol.lower_bound, best)   # the gap bound's relaxation: strictly below here
    self.assertGreater(sol.lower_bound, sum(float(f.table.min()) for f in fs))  # not trivial
    exact = dp.solve(domains, fs)
    self.assertTrue(exact.proven_optimal)
    self.assertEqual(exact.cost, best)

  @parameterized.parameters(range(8))
  def test_gap_bound_brackets_the_optimum(self, seed):
    # Dense random problems solved with a small table limit: the fallback conditions
    # some groups; the lower bound (those groups minimised out of each factor apart)
    # is <= the brute-force optimum <= the solution's cost.
    domains, fs = random_problem(seed, groups=9, factors=24, max_scope=3, max_domain=3)
    fs.append(dp.Factor((), np.array(5.0)))  # a constant counts in the bound too
    _, best = dp.brute_force(domains, fs)
    sol = dp.solve(domains, fs, max_table=9)
    self.assertLessEqual(sol.lower_bound, best)
    self.assertLessEqual(best, sol.cost)
    if sol.proven_optimal:
      self.assertEqual(sol.lower_bound, sol.cost)
    else:
      self.assertEqual(sol.lower_bound, dp.lower_bound(domains, fs, max_table=9))
    self.assertEqual(dp.lower_bound(domains, fs), best)  # no fallback: exact
    exact = dp.solve(domains, fs)
    self.assertEqual((exact.lower_bound, exact.cost), (best, best))

  def test_a_choice_touching_hundreds_of_groups_is_solved_exactly(self):
    # A wide op's choice variable (3 options) with a pairwise factor per input group (700
    # groups of 3 states: 3^700 entries, beyond a float): the scope of the choice is far
    # beyond any table, but eliminating the groups first leaves one factor over the choice.
    rng = np.random.default_rng(0)
    wide = 700
    tables = [rng.integers(0, 50, size=(3, 3)).astype(float) for _ in range(wide)]
    factors = [dp.Factor((wide, g), t) for g, t in enumerate(tables)]
    sol = dp.solve([3] * wide + [3], factors)
    want = min(sum(t[c].min() for t in tables) for c in range(3))
    self.assertTrue(sol.proven_optimal)
    self.assertEqual(sol.cost, want)
    self.assertEqual(sol.width, 1)

  @parameterized.parameters(range(6))
  def test_kept_neighbours_and_sizes_match_the_live_factors(self, seed):
    # What the factor graph keeps as factors come and go (conditioning, elimination)
    # equals what its live factors say, recounted from scratch.
    domains, fs = random_problem(seed, groups=10, factors=14, max_scope=4)
    fg = dp._FactorGraph(domains, fs)
    rng = np.random.default_rng(seed)
    for step, g in enumerate(rng.permutation(len(domains)).tolist()):
      if step % 3 == 0:
        fg.condition(g, 0)
      else:
        fg.eliminate(g)
      for h in range(len(domains)):
        scope = {h}
        for f in fg.live.values():
          if h in f.scope:
            scope.update(f.scope)
        self.assertEqual(fg.scope_of(h), tuple(sorted(scope)))
        self.assertEqual(fg.table_size(h), int(np.prod([domains[s] for s in scope])))

  def test_deterministic(self):
    domains, fs = random_problem(3)
    self.assertEqual(dp.solve(domains, fs), dp.solve(domains, fs))


if __name__ == "__main__":
  absltest.main()
