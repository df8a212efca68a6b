"""k-way partitioning by recursive one-cut search (docs/method.md section 8).

``k`` is factored into primes ``p_1 ... p_L``; for each distinct order of the
factors, level ``l`` solves one ``p_l``-way cut of the sub-problem that the
last worker of the previous levels faces (its blocks are the smallest, so a
cut it can make every worker can make) (each op shrunk by its chosen strategy, each
tensor by its chosen state; uneven blocks allowed).  Tofu's search objective
is

    D = sum_l  G_l * d_l,    G_l = p_1 * ... * p_{l-1} (groups at level l),

with ``d_l`` the level's one-cut optimum.  Every order's plan is then priced
exactly (``evaluate``: every piece of every device, uneven groups included)
and the cheapest order is kept; ties go to the earlier order in sorted
order, so the same input always gives the same plan.  Every order's plan is
kept too (``SearchResult.candidates``): under a topology
(``search.topology_search.place``) the order and the device order are chosen
again, by predicted time.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Callable, Optional, Sequence


from tf_tofu.core import progress
from tf_tofu.opdefs.registry import Describer
from tf_tofu.core.states import Cut, State
from tf_tofu.search import onecut
from tf_tofu.search.evaluate import Evaluation
from tf_tofu.search.memo import SearchMemo
from tf_tofu.graph.view import SearchGraph
from tf_tofu.core.regions import block
from tf_tofu.layout import tiling


def prime_factors(k: int) -> tuple[int, ...]:
  if k < 1:
    raise ValueError(f"device count must be >= 1, got {k}")
  out, p = [], 2
  while p * p <= k:
    while k % p == 0:
      out.append(p)
      k //= p
    p += 1
  if k > 1:
    out.append(k)
  return tuple(out)


def factor_orders(k: int) -> list[tuple[int, ...]]:
  return sorted(set(itertools.permutations(prime_factors(k))))


@dataclasses.dataclass(frozen=True)
class SearchResult:
  factors: tuple[int, ...]
  layouts: dict[str, tuple[State, ...]]
  strategies: dict[str, tuple[str, ...]]
  levels: tuple[onecut.LevelResult, ...]
  evaluation: Evaluation
  objective: float                # sum_l G_l d_l
  proven_optimal: bool            # every level's DP was exact
  orders_tried: tuple[tuple[int, ...], ...]
  seconds: float
  found_by: str = ""              # the planner whose search produced this plan
  notes: tuple[str, ...] = ()
  # Per level of the search ``proven_optimal`` speaks of (``level_summary``).
  level_search: tuple[dict, ...] = ()
  # Every factor order's result (in the order tried; each without candidates of its own).
  candidates: tuple["SearchResult", ...] = ()


# A level solver: (graph, groups, contexts, shapes, n, level index, pricing) -> LevelResult,
# ``pricing`` the onecut.PricingCache for n workers that its level pricing may share.
LevelSolver = Callable[..., onecut.LevelResult]


def block_shape(shape: tuple[int, ...], state: State, n: int) -> tuple[int, ...]:
  """The shape of the last worker's block of a tensor in ``state`` over n workers."""
  if isinstance(state, Cut):
    s = list(shape)
    lo, hi = block(s[state.dim], n, n - 1)
    s[state.dim] = hi - lo
    return tuple(s)
  return shape


def run_levels(graph: SearchGraph, groups, factors: Sequence[int], describer: Describer,
               solve: LevelSolver, memo: Optional[SearchMemo] = None
               ) -> tuple[list[onecut.LevelResult], dict, dict]:
  """Solves the levels in turn, shrinking the sub-problem after each (``memo``: work
  shared with other searches of this graph)."""
  memo = memo if memo is not None else SearchMemo(describer)
  memo.check(describer)
  contexts = {op.name: op.context for op in graph.ops}
  shapes = {t: s.shape for t, s in graph.tensors.items()}
  layouts = {t: [] for t in graph.tensors}
  strategies = {op.name: [] for op in graph.ops if op.kind in ("compute", "single")}
  results = []
  for level, n in enumerate(factors):
    with progress.phase(f"factor order {tuple(factors)}, level {level + 1} of {len(factors)} "
                        f"(n={n}, {len(groups):,} tensor groups)"):
      res = solve(graph, groups, contexts, shapes, n, level, memo.pricing(n))
    results.append(res)
    for g, members in enumerate(groups):
      state = res.group_states[g]
      shape = block_shape(shapes[members[0]], state, n)  # a group's members share a shape
      for t in members:
        layouts[t].append(state)
        shapes[t] = shape
    # (id of a context, decision) -> (the context, kept alive so the id stays its own, and
    # its sub-op): the ops that share a context descend once.
    sub_ops: dict = {}
    for name, choice in res.choices.items():
      strategies[name].append(choice.strategy)
      # Equal ops (and planners that agree) hold the same sub-op objects afterwards.
      ctx = contexts[name]
      got = sub_ops.get((id(ctx), choice.strategy))
      if got is None:
        got = sub_ops[(id(ctx), choice.strategy)] = (ctx, tiling.descend(
            ctx, choice.strategy, n, n - 1, describer, level + 1).context)
      contexts[name] = got[1]
  return results, {t: tuple(v) for t, v in layouts.items()}, {o: tuple(v) for o, v in strategies.items()}


def level_notes(levels: Sequence[onecut.LevelResult]) -> tuple[str, ...]:
  """What the plan report says of levels whose DP was not exact."""
  return tuple(f"level {i + 1}: too wide for exact DP (limit reached); {lvl.fixed_groups} tensor "
               "groups were fixed by coordinate descent, so it is not proven optimal; its "
               f"cost is within {lvl.gap_bound:,.0f} B of the level's optimum (gap bound)"
               for i, lvl in enumerate(levels) if lvl.fixed_groups)


def level_summary(levels: Sequence[onecut.LevelResult]) -> tuple[dict, ...]:
  """Per level: workers ``n``, whether its DP was ``exact``, the DP ``width`` (the most
  variables a table of its elimination spans, less one), the tensor groups it
  ``fixed`` by coordinate descent, the ``gap_bound`` (bytes; 0 when exact), and how
  it priced a need several op groups make (``needs``: ``onecut``, "Shared needs")."""
  return tuple(dict(n=lvl.n, exact=bool(lvl.proven_optimal), width=int(lvl.width),
                    fixed=int(lvl.fixed_groups), gap_bound=float(lvl.gap_bound),
                    needs=str(lvl.needs))
               for lvl in levels)


def search(graph: SearchGraph, groups, k: int, describer: Describer, solve: LevelSolver,
           orders: Optional[Sequence[tuple[int, ...]]] = None,
           memo: Optional[SearchMemo] = None) -> SearchResult:
  """Tries every order of k's prime factors with ``solve`` per level; keeps the cheapest.
  ``memo``: work shared with the other searches of this graph (``search.memo``)."""
  start = time.perf_counter()
  memo = memo if memo is not None else SearchMemo(describer)
  orders = list(orders) if orders is not None else factor_orders(k)
  if k == 1:
    orders = [()]
  best: Optional[SearchResult] = None
  candidates = []
  for order in orders:
    results, layouts, strategies = run_levels(graph, groups, order, describer, solve, memo)
    progress.update(f"factor order {tuple(order)}: counting the plan's bytes exactly")
    ev = memo.evaluate(graph, order, layouts, strategies)
    objective, groups_at = 0.0, 1
    for n, r in zip(order, results):
      objective += groups_at * r.objective
      groups_at *= n
    cand = SearchResult(tuple(order), layouts, strategies, tuple(results), ev, objective,
                        all(r.proven_optimal for r in results), tuple(orders), 0.0,
                        notes=level_notes(results), level_search=level_summary(results))
    progress.update(f"factor order {order}: {ev.total_bytes:,} bytes per step")
    candidates.append(cand)
    if best is None or ev.total_bytes < best.evaluation.total_bytes:
      best = cand
  return dataclasses.replace(best, seconds=time.perf_counter() - start,
                             candidates=tuple(candidates))
