"""Work shared by the searches of one graph: one memo per ``planners.run``.

Tofu's recursion, each baseline's (the never-worse pass) and each lambda of the
memory-budget search solve many of the same sub-problems: every planner's
first level sees the graph's own ops, and wherever two planners choose alike
their later levels see the same sub-ops too.  A :class:`SearchMemo` keeps

* level pricing per worker count (``onecut.PricingCache``: prices, tables,
  whole level problems and their DP solutions);
* exact evaluations: whole ones per plan (two planners often return the
  same plan), and the blocks and pieces per factor order
  (``evaluate.EvalCache``) that different plans share (the ops' tiles are kept
  by the describer, ``tiling.op_tiles``).

Every entry is a pure function of its key (for one describer), so sharing a
memo never changes a plan, a price or a byte count; it only skips repeated
work.  A memo lives as long as the run that made it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from tf_tofu.core.states import State
from tf_tofu.graph.view import SearchGraph
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search.evaluate import EvalCache, Evaluation, evaluate
from tf_tofu.search.onecut import PricingCache


def plan_key(factors: Sequence[int], layouts: Mapping[str, Sequence[State]],
             strategies: Mapping[str, Sequence[str]]) -> tuple:
  """A hashable identity of a plan of one graph: equal keys, equal plans."""
  return tuple(factors), tuple(layouts.items()), tuple(strategies.items())


class SearchMemo:
  """The caches of the searches of one graph with one describer (module docstring)."""

  def __init__(self, describer: Describer):
    self.describer = describer
    self._pricing: dict[int, PricingCache] = {}
    self._evaluation: dict[tuple[int, ...], EvalCache] = {}
    self._evaluated: dict = {}

  def check(self, describer: Describer) -> None:
    """ValueError unless ``describer`` is the one this memo's entries came from."""
    if describer is not self.describer:
      raise ValueError("a SearchMemo is shared only by searches with one Describer")

  def pricing(self, n: int) -> PricingCache:
    """Level pricing with ``n`` workers."""
    if n not in self._pricing:
      self._pricing[n] = PricingCache(n)
    return self._pricing[n]

  def eval_cache(self, factors: Sequence[int]) -> EvalCache:
    """The blocks and pieces of the plans with these factors."""
    factors = tuple(factors)
    if factors not in self._evaluation:
      self._evaluation[factors] = EvalCache(factors)
    return self._evaluation[factors]

  def evaluate(self, graph: SearchGraph, factors: Sequence[int],
               layouts: Mapping[str, Sequence[State]],
               strategies: Mapping[str, Sequence[str]]) -> Evaluation:
    """``evaluate.evaluate`` of the plan, once per plan."""
    factors = tuple(factors)
    key = (id(graph),) + plan_key(factors, layouts, strategies)
    got = self._evaluated.get(key)
    if got is None:
      got = (graph, evaluate(graph, factors, layouts, strategies, self.describer,
                             self.eval_cache(factors)))
      self._evaluated[key] = got
    return got[1]
