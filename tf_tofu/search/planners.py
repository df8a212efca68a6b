"""The planners by name, and one entry point that runs any of them on a graph view.

    result = planners.run("tofu", view, k, describer, options)

Every planner is a level solver for :func:`recursive.search`: Tofu's exact
one-cut DP (``tofu.level_solver``) or a baseline of ``baselines``; so all of
them get the same coarsening, recursion over the factor orders of k, exact
pricing (``evaluate``) and reporting.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from tf_tofu.core.errors import TofuError
from tf_tofu.graph.view import SearchGraph
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import baselines, coarsen, recursive
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


def run(planner: str, graph: SearchGraph, k: int, describer: Describer,
        options: Optional[SearchOptions] = None) -> recursive.SearchResult:
  """Runs ``planner`` over every factor order of k; the cheapest order's result."""
  check(planner)
  options = options or SearchOptions()
  groups = coarsen.tensor_groups(graph, describer)
  return recursive.search(graph, groups, k, describer, PLANNERS[planner](describer, options))
