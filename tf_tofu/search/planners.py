"""The planners by name, and one entry point that runs any of them on a graph view.

    result = planners.run("tofu", view, k, describer, options)

Every planner is a level solver for :func:`recursive.search`: Tofu's exact
one-cut DP (``tofu.level_solver``) or a baseline of ``baselines``; so all of
them get the same coarsening, recursion over the factor orders of k, exact
pricing (``evaluate``) and reporting.

**Never worse than a baseline.**  Each level of Tofu's recursion is solved
exactly, but the levels one after the other, so a baseline that cuts the
first level differently can move fewer bytes in total.  With
``options.never_worse`` (``never_worse=True`` in ``tf_tofu.plan``,
``tf_tofu.function`` and ``tofu plan/rewrite --never_worse``; off by default,
as it runs the four baselines' searches too) ``run("tofu", ...)`` also runs every
baseline of :func:`rivals` on the same groups, takes the plan with the
fewest exactly evaluated bytes (Tofu's on a tie), its ``found_by`` naming the
planner that found it, and ends with the exact improvement pass of
:mod:`tf_tofu.search.improve` on it: tensor groups moved one level's state
at a time, each move taken only when the exactly counted bytes fall (a note
says how many and what they saved).  The guarantee, in the space the options
allow:

* cut-only storage (Tofu's, the default): Tofu's bytes <= those of every
  baseline that stores cut-only too (allrow, spartan, equalchop, megatron);
  datapar stores the variables replicated, outside that space;
* ``allow_rep_storage``: Tofu's bytes <= every baseline's, datapar included.

``proven_optimal`` keeps its meaning: every level of Tofu's recursion was
solved exactly (optimal per level, cut-only storage unless replication is
allowed); the plan returned moves no more bytes than that recursion's.

Under a topology of several link classes (``search.topology_search``) the
planner and the improvement pass are still chosen by bytes; the factor order
and device order of least predicted time are then chosen among the chosen
planner's factor orders, the improved plan in place of the one it improved.

**Memory budget.**  With ``options.memory_budget`` set, ``run("tofu", ...)``
is the budget search of :mod:`tf_tofu.search.budget` (its candidates include
datapar, and with ``never_worse`` every rival of replicated storage; no
improvement pass there: its moves would change the memory the budget search
measured).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Mapping, Optional

from tf_tofu.core import progress
from tf_tofu.core.errors import TofuError
from tf_tofu.graph.view import SearchGraph
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import baselines, budget, coarsen, improve, recursive
from tf_tofu.search.memo import SearchMemo
from tf_tofu.search.tofu import SearchOptions, level_solver

PLANNERS: Mapping[str, Callable] = {
    "tofu": level_solver,
    "datapar": baselines.datapar,
    "allrow": baselines.allrow,
    "spartan": baselines.spartan,
    "equalchop": baselines.equalchop,
    "megatron": baselines.megatron,
}


def check(planner: str) -> str:
  """``planner`` if it is a planner's name, else ValueError listing them."""
  if planner not in PLANNERS:
    raise TofuError(f"unknown planner {planner!r}; choose one of {sorted(PLANNERS)}")
  return planner


# The baselines that store cut-only, like Tofu by default.
CUT_ONLY = ("allrow", "spartan", "equalchop", "megatron")


def rivals(options: SearchOptions) -> tuple[str, ...]:
  """The baselines Tofu's plan must not lose to under ``options`` (module docstring)."""
  return CUT_ONLY + (("datapar",) if options.allow_rep_storage else ())


def _search(planner: str, graph: SearchGraph, groups, k: int, describer: Describer,
            options: SearchOptions, memo: SearchMemo) -> recursive.SearchResult:
  result = recursive.search(graph, groups, k, describer, PLANNERS[planner](describer, options),
                            memo=memo)
  return dataclasses.replace(result, found_by=planner)


def run(planner: str, graph: SearchGraph, k: int, describer: Describer,
        options: Optional[SearchOptions] = None) -> recursive.SearchResult:
  """Runs ``planner`` over every factor order of k; the cheapest order's result (for
  ``"tofu"`` with ``options.never_worse``, the cheapest of it and its rivals')."""
  check(planner)
  options = options or SearchOptions()
  groups = coarsen.tensor_groups(graph, describer)
  memo = SearchMemo(describer)
  if options.memory_budget is not None:
    return _within_budget(planner, graph, groups, k, describer, options, memo)
  result = _search(planner, graph, groups, k, describer, options, memo)
  if planner != "tofu" or not options.never_worse or k == 1:
    return result
  best, seconds = result, result.seconds
  for rival in rivals(options):
    progress.update(f"never-worse pass: {rival}'s plan")
    other = _search(rival, graph, groups, k, describer, options, memo)
    seconds += other.seconds
    if other.evaluation.total_bytes < best.evaluation.total_bytes:
      best = other
  notes = result.notes
  if best is not result:
    notes += (f"never-worse pass: {best.found_by}'s plan moves "
              f"{best.evaluation.total_bytes:,} B, Tofu's recursion "
              f"{result.evaluation.total_bytes:,} B; the plan is {best.found_by}'s",)
  start = time.perf_counter()
  progress.update(f"exact improvement pass on {best.found_by}'s plan")
  best, notes = _improved(best, graph, groups, describer, options, memo, notes)
  return dataclasses.replace(best, proven_optimal=result.proven_optimal, notes=notes,
                             level_search=result.level_search,
                             seconds=seconds + time.perf_counter() - start)


def _improved(best: recursive.SearchResult, graph: SearchGraph, groups, describer: Describer,
              options: SearchOptions, memo: SearchMemo, notes: tuple[str, ...]):
  """``best`` after the exact improvement pass (``search.improve``), with its note."""
  found = improve.improve(graph, groups, best.factors, best.layouts, best.strategies,
                          describer, memo.eval_cache(best.factors),
                          options.allow_rep_storage, options.tensor_states)
  if not found.moves:
    return best, notes
  ev = memo.evaluate(graph, best.factors, found.layouts, best.strategies)
  if ev.total_bytes != best.evaluation.total_bytes - found.saved_bytes:
    raise TofuError(f"internal error: the exact improvement pass expected "
                    f"{best.evaluation.total_bytes - found.saved_bytes:,} B, the plan moves "
                    f"{ev.total_bytes:,} B; plan without never_worse")
  notes += (f"exact improvement pass: {found.moves} tensor group "
            f"move{'s' if found.moves != 1 else ''} on "
            f"{best.found_by}'s plan, {best.evaluation.total_bytes:,} B -> "
            f"{ev.total_bytes:,} B",)
  improved = dataclasses.replace(best, layouts=found.layouts, evaluation=ev, candidates=())
  candidates = tuple(improved if c.factors == best.factors else c for c in best.candidates)
  return dataclasses.replace(improved, candidates=candidates), notes


def _within_budget(planner: str, graph: SearchGraph, groups, k: int, describer: Describer,
                   options: SearchOptions, memo: SearchMemo) -> recursive.SearchResult:
  """``budget.search`` with :func:`budget_rivals`."""
  if planner != "tofu":
    raise TofuError(f"memory_budget is an option of the tofu planner, not of {planner!r}; "
                    "drop it, or plan with planner='tofu'")
  if options.allow_rep_storage:
    raise TofuError("memory_budget decides which tensors are stored replicated; drop "
                    "allow_rep_storage")
  return budget.search(graph, groups, k, describer, options, budget_rivals(options), memo)


def budget_rivals(options: SearchOptions) -> dict[str, Callable]:
  """The baselines whose plans the budget search weighs too: datapar (it stores
  replicated), and with ``never_worse`` every rival of replicated storage."""
  names = rivals(dataclasses.replace(options, allow_rep_storage=True)) if (
      options.never_worse) else ("datapar",)
  return {name: PLANNERS[name] for name in names}


def trade_off(graph: SearchGraph, k: int, describer: Describer, budgets,
              options: Optional[SearchOptions] = None) -> list:
  """``run("tofu", ...)`` at each of ``budgets`` (bytes, math.inf) from one set of
  candidates (``budget.frontier`` at the smallest budget: the same bytes as planning
  each budget apart); per budget ``(SearchResult, exact worst-device peak)``, or the
  TofuError it raises."""
  options = dataclasses.replace(options or SearchOptions(), memory_budget=min(budgets))
  groups = coarsen.tensor_groups(graph, describer)
  tried = budget.frontier(graph, groups, k, describer, options, budget_rivals(options))
  out = []
  for b in budgets:
    try:
      out.append(budget.pick(tried, b, graph))
    except TofuError as e:
      out.append(e)
  return out
