"""Exact min-sum dynamic programming over tensor-group states (bucket elimination).

The one-cut problem (docs/method.md section 7) assigns a state ``x_g`` to every tensor
group ``g`` and minimises

    C(x) = sum_f  F_f(x_{scope(f)}),

one factor per op, where ``F_f`` already takes the cheapest strategy of the op
given the states of the groups it touches.  Tofu solves it with a DP over BFS
levels of the coarsened graph; this is the same DP in the form of variable
elimination: groups are eliminated one at a time (the one whose combined factor
is smallest first, ties by index), and eliminating ``g`` replaces the factors
that mention it by

    m(x_N) = min_{x_g} sum_{f ∋ g} F_f(x_g, x_N),     N = neighbours of g,

keeping ``argmin`` as a back-pointer.  Back-substitution in reverse order gives
an optimal assignment.  The cost is exponential only in the width of the
elimination (the largest ``N``), which coarsening keeps small.

*Fallback.*  When a combined factor would exceed ``max_table`` entries the
problem is too wide for exact DP.  The solver then conditions: it fixes the
group of largest degree among the offending scope to its value in a
coordinate-descent solution (iterated conditional modes from the per-group
best), and goes on; the result is feasible and at least as good as that
coordinate-descent solution, but not proven optimal (``proven_optimal`` is
False and ``fixed`` lists the conditioned groups).

*Gap bound.*  The solution then comes with a lower bound on the optimum
(:func:`lower_bound`): the same elimination, where every group it would
condition is instead minimised out of each of its factors apart,

    F'_f(x_{scope(f) - v}) = min_{x_v} F_f(x_v, x_{scope(f) - v}),

a relaxation (``sum_f F'_f <= sum_f F_f`` at every assignment: each factor
picks its own ``x_v``), solved exactly.  ``cost - lower_bound`` bounds how far
the solution can be from the optimum; it is 0 when the DP was exact.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from typing import Optional, Sequence

import numpy as np

from tf_tofu.core import progress


@dataclasses.dataclass(frozen=True)
class Factor:
  """A table over the states of the groups in ``scope`` (axis i <-> scope[i])."""

  scope: tuple[int, ...]
  table: np.ndarray

  def __post_init__(self):
    if len(set(self.scope)) != len(self.scope):
      raise ValueError(f"factor scope repeats a group: {self.scope}")
    if self.table.ndim != len(self.scope):
      raise ValueError(f"table of rank {self.table.ndim} for scope {self.scope}")


@dataclasses.dataclass(frozen=True)
class Solution:
  assignment: tuple[int, ...]
  cost: float
  proven_optimal: bool
  fixed: tuple[int, ...]
  width: int
  lower_bound: float = 0.0  # <= the optimum; == cost when proven_optimal (module docstring)


def evaluate(factors: Sequence[Factor], assignment: Sequence[int]) -> float:
  return float(sum(f.table[tuple(assignment[g] for g in f.scope)] for f in factors))


def _aligned(f: Factor, scope: tuple[int, ...]) -> np.ndarray:
  """``f.table`` broadcast to the axes of ``scope`` (a superset of ``f.scope``)."""
  order = sorted(range(len(f.scope)), key=lambda i: scope.index(f.scope[i]))
  t = np.transpose(f.table, order) if order != list(range(len(order))) else f.table
  present = [s for s in scope if s in f.scope]
  shape = [t.shape[present.index(s)] if s in f.scope else 1 for s in scope]
  return t.reshape(shape)


def coordinate_descent(domains: Sequence[int], factors: Sequence[Factor],
                       start: Optional[Sequence[int]] = None, rounds: int = 20) -> list[int]:
  """Iterated conditional modes: each group in turn takes its best state given the rest."""
  x = list(start) if start is not None else [0] * len(domains)
  by_group: dict[int, list[Factor]] = {}
  for f in factors:
    for g in f.scope:
      by_group.setdefault(g, []).append(f)
  for _ in range(rounds):
    changed = False
    for g in range(len(domains)):
      costs = np.zeros(domains[g])
      for f in by_group.get(g, ()):
        idx = tuple(slice(None) if s == g else x[s] for s in f.scope)
        costs += f.table[idx]
      best = int(np.argmin(costs))
      if costs[best] < costs[x[g]]:
        x[g] = best
        changed = True
    if not changed:
      break
  return x


class _FactorGraph:
  """The live factors of a bucket elimination, indexed by the groups they touch.

  ``shared[g][s]`` counts the live factors whose scope holds both ``g`` and ``s``
  (kept as factors come and go), so a group's neighbours are read off in
  O(neighbours), not O(sum of its factors' scopes): a unit's choice variable
  has hundreds of pairwise factors, and the heap asks for the scope of each of
  its neighbours after every elimination next to it.  ``size[g]``, the entries
  of the table eliminating ``g`` would build (``domains[g]`` times its
  neighbours' domains), is kept with it: multiplied when a neighbour comes,
  divided when one goes, an exact int.  A ``symbolic`` graph eliminates without
  tables (its new factors are zero-stride views): the same order, for :func:`fits`.
  """

  def __init__(self, domains: Sequence[int], factors: Sequence[Factor], symbolic: bool = False):
    self.domains = list(domains)
    self.symbolic = symbolic
    self.live: dict[int, Factor] = {}
    self.touching: dict[int, set] = {g: set() for g in range(len(domains))}
    self.shared: dict[int, dict[int, int]] = {g: {} for g in range(len(domains))}
    self.size: list[int] = list(self.domains)
    self.constant = 0.0  # the sum of the constant factors left (the minimum, at the end)
    self._next_id = 0
    for f in factors:
      self.add(f)

  def add(self, f: Factor) -> None:
    """Adds a factor (a constant one is summed into ``constant``)."""
    if not f.scope:
      self.constant += float(f.table)
      return
    self.live[self._next_id] = f
    for s in f.scope:
      self.touching[s].add(self._next_id)
      counts = self.shared[s]
      for t in f.scope:
        if t != s:
          if t in counts:
            counts[t] += 1
          else:
            counts[t] = 1
            self.size[s] *= self.domains[t]
    self._next_id += 1

  def pop(self, fid: int) -> Factor:
    f = self.live.pop(fid)
    for s in f.scope:
      self.touching[s].discard(fid)
      counts = self.shared[s]
      for t in f.scope:
        if t != s:
          if counts[t] == 1:
            del counts[t]
            self.size[s] //= self.domains[t]
          else:
            counts[t] -= 1
    return f

  def scope_of(self, g: int) -> tuple[int, ...]:
    """``g`` and every group sharing a factor with it."""
    return tuple(sorted((g, *self.shared[g])))

  def table_size(self, g: int) -> int:
    """Entries of the table eliminating ``g`` would build (an exact int: a unit's choice
    variable may touch hundreds of groups)."""
    return self.size[g]

  def condition(self, g: int, value: int) -> None:
    """Fixes group ``g`` to state ``value`` in every factor that touches it."""
    for fid in sorted(self.touching[g]):
      f = self.pop(fid)
      i = f.scope.index(g)
      self.add(Factor(f.scope[:i] + f.scope[i + 1:], np.take(f.table, value, axis=i)))

  def relax(self, g: int) -> None:
    """Minimises group ``g`` out of every factor that touches it, each on its own."""
    for fid in sorted(self.touching[g]):
      f = self.pop(fid)
      i = f.scope.index(g)
      self.add(Factor(f.scope[:i] + f.scope[i + 1:], np.min(f.table, axis=i)))

  def eliminate(self, g: int) -> tuple[tuple[int, ...], np.ndarray]:
    """Sums the factors touching ``g`` and minimises ``g`` out:
    ``m(rest) = min_{x_g} sum_f f(x_g, rest)``; returns ``(rest, argmin table)``."""
    scope = self.scope_of(g)
    axis = scope.index(g)
    rest = scope[:axis] + scope[axis + 1:]
    if self.symbolic:
      for fid in sorted(self.touching[g]):
        self.pop(fid)
      self.add(Factor(rest, np.broadcast_to(0.0, [self.domains[s] for s in rest])))
      return rest, None
    total = np.zeros([self.domains[s] for s in scope])
    for fid in sorted(self.touching[g]):
      total = total + _aligned(self.pop(fid), scope)
    self.add(Factor(rest, np.min(total, axis=axis)))
    return rest, np.argmin(total, axis=axis)


def fold_single_states(factors: Sequence[Factor], single: Sequence[bool]) -> list[Factor]:
  """The factors with the axis of every group of one state (``single[g]``) dropped.

  Such a group has one value, so each factor restricted to it is its table
  without that axis (a size-1 axis: the same numbers); a factor of such groups
  only is a constant and is left out (the final cost is evaluated on the
  original factors).  The order is the one that conditioning the groups one
  at a time in index order gives (each conditioning moves the factors it
  touches, in order, to the end): the untouched factors first, then the others
  by their single-state groups in decreasing order, then their index.  The
  elimination sums a group's factors in this order, so its floating-point
  sums, and the ties they break, are those of the one-at-a-time fold.
  """
  kept, folded = [], []
  for i, f in enumerate(factors):
    fixed = tuple(sorted((s for s in f.scope if single[s]), reverse=True))
    if not fixed:
      kept.append(f)
    elif len(fixed) < len(f.scope):
      axes = [a for a, s in enumerate(f.scope) if not single[s]]
      folded.append((fixed, i, Factor(tuple(f.scope[a] for a in axes),
                                      f.table.reshape([f.table.shape[a] for a in axes]))))
  folded.sort(key=lambda x: x[:2])
  return kept + [f for _, _, f in folded]


def _eliminate_all(domains: Sequence[int], factors: Sequence[Factor], max_table: int,
                   too_wide, symbolic: bool = False) -> tuple[_FactorGraph, list, int]:
  """The bucket elimination of :func:`solve`: groups of one state folded, the others
  eliminated cheapest table first (a heap keyed by the size of the table their
  elimination builds, refreshed when a neighbour changes).  When the cheapest table
  exceeds ``max_table`` entries (or 32 groups), the most connected group of that scope
  is passed to ``too_wide(factor graph, group)``, which takes it out of the factors.
  Returns the factor graph, ``(group, rest, argmin)`` per elimination and the width
  (``symbolic``: no tables, no argmins; :func:`fits`)."""
  n = len(domains)
  single = [d == 1 for d in domains]
  fg = _FactorGraph(domains, fold_single_states(factors, single), symbolic)
  free = [g for g in range(n) if not single[g]]
  heap = [(fg.table_size(g), g, 0) for g in free]
  heapq.heapify(heap)
  version = [0] * n
  remaining = set(free)
  eliminated: list[tuple[int, tuple[int, ...], np.ndarray]] = []
  width = 0

  def refresh(groups) -> None:
    for s in groups:
      if s in remaining:
        version[s] += 1
        heapq.heappush(heap, (fg.table_size(s), s, version[s]))

  while remaining:
    size, g, ver = heapq.heappop(heap)
    if g not in remaining or ver != version[g]:
      continue
    scope = fg.scope_of(g)
    if size > max_table or len(scope) > 32:
      victim = max(scope, key=lambda s: (len(fg.touching[s]), -s))
      too_wide(fg, victim)
      remaining.discard(victim)
      refresh(scope)
      continue
    width = max(width, len(scope) - 1)
    rest, argmin = fg.eliminate(g)
    eliminated.append((g, rest, argmin))
    remaining.discard(g)
    refresh(rest)
    if len(eliminated) % 2000 == 0:
      progress.update(f"DP: {n - len(remaining):,} of {n:,} variables eliminated, widest "
                      f"table {width + 1} variables")
  return fg, eliminated, width


class TooWide(Exception):
  """Raised by :func:`solve` with ``exact_only`` when a group is too wide to eliminate."""


def _too_wide(fg: _FactorGraph, victim: int) -> None:
  raise TooWide(f"group {victim} is too wide to eliminate")


def fits(domains: Sequence[int], factors: Sequence[Factor], max_table: int) -> bool:
  """Whether :func:`solve` eliminates every group exactly (else ``exact_only`` raises
  :class:`TooWide`): the same elimination, symbolic, so the same order and answer,
  at the cost of its bookkeeping instead of its tables."""
  try:
    _eliminate_all(domains, factors, max_table, _too_wide, symbolic=True)
  except TooWide:
    return False
  return True


def solve(domains: Sequence[int], factors: Sequence[Factor], max_table: int = 1 << 20,
          exact_only: bool = False) -> Solution:
  """Minimises the sum of factors over the group states; see the module docstring.

  Groups of one state take it (:func:`fold_single_states`); the others are
  eliminated (:func:`_eliminate_all`).  A group too wide to eliminate is
  conditioned on the coordinate-descent solution instead, and the result is
  reported as not proven optimal, with :func:`lower_bound`; with ``exact_only``
  :class:`TooWide` is raised instead, as soon as such a group is met.
  """
  original = list(factors)
  fixed_values: dict[int, int] = {}
  heuristic: list[list[int]] = []

  def condition(fg: _FactorGraph, victim: int) -> None:
    if not heuristic:
      heuristic.append(coordinate_descent(domains, original))
    fixed_values[victim] = heuristic[0][victim]
    fg.condition(victim, heuristic[0][victim])

  _, eliminated, width = _eliminate_all(domains, original, max_table,
                                        _too_wide if exact_only else condition)
  assignment = [0] * len(domains)
  for g, v in fixed_values.items():
    assignment[g] = v
  for g, scope, arg in reversed(eliminated):  # back-pointers, last eliminated first
    assignment[g] = int(arg[tuple(assignment[s] for s in scope)]) if scope else int(arg)
  cost = evaluate(original, assignment)
  bound = lower_bound(domains, original, max_table) if fixed_values else cost
  return Solution(tuple(assignment), cost, not fixed_values, tuple(sorted(fixed_values)), width,
                  min(bound, cost))


def lower_bound(domains: Sequence[int], factors: Sequence[Factor],
                max_table: int = 1 << 20) -> float:
  """A lower bound on ``min_x sum_f F_f(x)``: the elimination of :func:`solve` with each
  group it cannot eliminate minimised out of every factor on its own (module
  docstring, "Gap bound"); exact when no group is too wide."""
  single = [d == 1 for d in domains]
  constant = sum(float(f.table.reshape(-1)[0]) for f in factors
                 if f.scope and all(single[s] for s in f.scope))  # folded away, not summed
  fg, _, _ = _eliminate_all(domains, factors, max_table, _FactorGraph.relax)
  return constant + fg.constant


def brute_force(domains: Sequence[int], factors: Sequence[Factor]) -> tuple[tuple[int, ...], float]:
  """Exhaustive minimum (for tests on tiny problems)."""
  best = None
  for x in itertools.product(*[range(d) for d in domains]):
    c = evaluate(factors, x)
    if best is None or c < best[1]:
      best = (x, c)
  return best
