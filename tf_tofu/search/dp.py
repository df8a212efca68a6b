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
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from typing import Optional, Sequence

import numpy as np


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


def solve(domains: Sequence[int], factors: Sequence[Factor], max_table: int = 1 << 20) -> Solution:
  """Minimises the sum of factors over the group states; see the module docstring."""
  original = list(factors)
  n = len(domains)
  live: dict[int, Factor] = dict(enumerate(original))
  next_id = len(original)
  touching: dict[int, set] = {g: set() for g in range(n)}
  for fid, f in live.items():
    for g in f.scope:
      touching[g].add(fid)

  def scope_of(g: int) -> tuple[int, ...]:
    sc = {g}
    for fid in touching[g]:
      sc.update(live[fid].scope)
    return tuple(sorted(sc))

  def score(g: int) -> tuple[int, int]:
    return int(np.prod([domains[s] for s in scope_of(g)], dtype=np.float64)), g

  # Groups with a single state are fixed: fold them into their factors first.
  for g in range(n):
    if domains[g] == 1:
      for fid in sorted(touching[g]):
        f = live.pop(fid)
        for s in f.scope:
          touching[s].discard(fid)
        i = f.scope.index(g)
        rest = Factor(f.scope[:i] + f.scope[i + 1:], np.take(f.table, 0, axis=i))
        if rest.scope:
          live[next_id] = rest
          for s in rest.scope:
            touching[s].add(next_id)
          next_id += 1
  heap = [(*score(g), 0) for g in range(n)]
  heapq.heapify(heap)
  version = [0] * n
  remaining = set(range(n))
  fixed_values: dict[int, int] = {}
  heuristic: Optional[list[int]] = None
  eliminated: list[tuple[int, tuple[int, ...], np.ndarray]] = []
  width = 0

  def drop_factor(fid: int) -> None:
    for s in live[fid].scope:
      touching[s].discard(fid)
    del live[fid]

  def add_factor(f: Factor) -> None:
    nonlocal next_id
    if not f.scope:
      return  # a constant; the final cost is re-evaluated on the original factors
    live[next_id] = f
    for s in f.scope:
      touching[s].add(next_id)
    next_id += 1

  def refresh(groups) -> None:
    for s in groups:
      if s in remaining:
        version[s] += 1
        heapq.heappush(heap, (*score(s), version[s]))

  while remaining:
    size, g, ver = heapq.heappop(heap)
    if g not in remaining or ver != version[g]:
      continue
    scope = scope_of(g)
    if size > max_table or len(scope) > 32:
      if heuristic is None:
        heuristic = coordinate_descent(domains, original)
      victim = max(scope, key=lambda s: (len(touching[s]), -s))
      fixed_values[victim] = heuristic[victim]
      for fid in sorted(touching[victim]):
        f = live[fid]
        i = f.scope.index(victim)
        drop_factor(fid)
        add_factor(Factor(f.scope[:i] + f.scope[i + 1:], np.take(f.table, heuristic[victim], axis=i)))
      remaining.discard(victim)
      refresh(scope)
      continue
    width = max(width, len(scope) - 1)
    total = np.zeros([domains[s] for s in scope])
    for fid in sorted(touching[g]):
      total = total + _aligned(live[fid], scope)
      drop_factor(fid)
    axis = scope.index(g)
    new_scope = scope[:axis] + scope[axis + 1:]
    eliminated.append((g, new_scope, np.argmin(total, axis=axis)))
    add_factor(Factor(new_scope, np.min(total, axis=axis)))
    remaining.discard(g)
    refresh(new_scope)
  assignment = [0] * n
  for g, v in fixed_values.items():
    assignment[g] = v
  for g, scope, arg in reversed(eliminated):
    assignment[g] = int(arg[tuple(assignment[s] for s in scope)]) if scope else int(arg)
  return Solution(tuple(assignment), evaluate(original, assignment), not fixed_values,
                  tuple(sorted(fixed_values)), width)


def brute_force(domains: Sequence[int], factors: Sequence[Factor]) -> tuple[tuple[int, ...], float]:
  """Exhaustive minimum (for tests on tiny problems)."""
  best = None
  for x in itertools.product(*[range(d) for d in domains]):
    c = evaluate(factors, x)
    if best is None or c < best[1]:
      best = (x, c)
  return best
