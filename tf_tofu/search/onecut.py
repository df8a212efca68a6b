"""One cut: choose every tensor group's state and every op's strategy for n workers.

For the level's sub-problem (each op's sub-op as worker 0 of the previous
levels sees it, each tensor's block likewise), an op ``f`` with strategies
``sigma`` (its cuttable index variables, plus ``replicate``; ``single`` for an
op left whole) touching tensor groups ``g`` costs

    F_f(x) = min_sigma [ sum_{inputs i} gather(held(x_{g(i)}) -> need_sigma(i))
                       + sum_{outputs o} produce(made_sigma(o) -> held(x_{g(o)})) ]

bytes, with the conversions of ``tf_tofu.transfers`` evaluated on the sub-op's
own shapes.  Source, read and update ops cost nothing (their tensors are
tied to what they feed or store).  ``dp.solve`` minimises ``sum_f F_f``
exactly; each op then takes its argmin strategy, and the runner-up's cost is
kept for the report.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np
from absl import logging

from tf_tofu import transfers
from tf_tofu.opdefs.regions import Region
from tf_tofu.opdefs.registry import Describer, context_key
from tf_tofu.opdefs.strategy import REP, Cut, Partial, State
from tf_tofu.search import dp
from tf_tofu.search.problem import SOp, SearchGraph
from tf_tofu.tiling import REPLICATE, SINGLE, held_regions


@dataclasses.dataclass(frozen=True)
class Choice:
  """An op's decision at one level, with its cost and the runner-up's."""

  strategy: str
  cost: float
  next_best: Optional[str]
  next_best_cost: Optional[float]


@dataclasses.dataclass(frozen=True)
class LevelResult:
  n: int
  group_states: tuple[State, ...]
  choices: dict[str, Choice]
  objective: float
  proven_optimal: bool
  width: int
  fixed_groups: int


def candidate_states(shape: Sequence[int], n: int, allow_rep: bool) -> tuple[State, ...]:
  """Cuts of every dim of size >= n; REP when none exists or when allowed."""
  cuts = tuple(Cut(d) for d, s in enumerate(shape) if s >= n)
  return cuts + (REP,) if (allow_rep or not cuts) else cuts


def _op_strategies(op: SOp, ctx, n: int, describer: Describer):
  """``[(name, need per input slot, made per output)]`` of an op's options at this level."""
  whole_in = [Region.whole(t.shape) for t in ctx.inputs]
  whole_out = [Region.whole(t.shape) for t in ctx.outputs]
  if op.kind == "single":
    return [(SINGLE, [[r] + [None] * (n - 1) for r in whole_in],
             [([r] + [None] * (n - 1), [()] * n) for r in whole_out])], ()
  sem, _ = describer(ctx)
  options = []
  meta = frozenset()
  if sem is not None:
    meta = sem.meta_inputs - sem.accessed_inputs
    for s in describer.strategies(sem, n):
      needs = [None if need is None else list(need.regions) for need in s.inputs]
      made = []
      for o, st in enumerate(s.outputs):
        regions = [w.output_regions[o] for w in s.workers]
        keys = [(w.w,) if isinstance(st, Partial) else () for w in s.workers]
        made.append((regions, keys))
      options.append((s.var, needs, made))
  options.append((REPLICATE, [[r] * n for r in whole_in],
                  [([r] * n, [()] * n) for r in whole_out]))
  return options, meta


def _slot_costs(op: SOp, ctx, n, describer, slot_states, itemsizes):
  """Per option, per slot, the cost vector over that slot's candidate states."""
  options, meta = _op_strategies(op, ctx, n, describer)
  names, costs = [], []
  for name, needs, made in options:
    per_slot = []
    for slot, (kind, idx) in enumerate(_slots(op, ctx, meta)):
      states = slot_states[slot]
      vec = np.zeros(len(states))
      for j, st in enumerate(states):
        if kind == "in":
          held = held_regions(ctx.inputs[idx].shape, [st], (n,))
          pieces = transfers.gather(held, needs[idx], (n,))
        else:
          held = held_regions(ctx.outputs[idx].shape, [st], (n,))
          regions, keys = made[idx]
          pieces = transfers.produce_into(regions, keys, held, (n,))
        vec[j] = sum(p.elements for p in pieces) * itemsizes[slot]
      per_slot.append(vec)
    names.append(name)
    costs.append(per_slot)
  return names, costs


def _slots(op: SOp, ctx, meta) -> list[tuple[str, int]]:
  slots = [("in", i) for i, t in enumerate(op.inputs) if t is not None and i not in meta]
  slots += [("out", o) for o in range(len(op.outputs))]
  return slots


@dataclasses.dataclass(frozen=True)
class LevelProblem:
  """The priced one-cut problem: group domains, op factors, and per-op option tables."""

  n: int
  domains: tuple[tuple[State, ...], ...]
  factors: tuple[dp.Factor, ...]
  op_tables: tuple[tuple[SOp, tuple[int, ...], tuple[str, ...], np.ndarray], ...]


def build_level(graph: SearchGraph, groups: Sequence[Sequence[str]], contexts: Mapping[str, object],
                shapes: Mapping[str, tuple], n: int, describer: Describer,
                allowed: Mapping[int, tuple[State, ...]], allow_rep: bool = False,
                forced_ops: Mapping[str, str] = {}) -> LevelProblem:
  """Prices every op's options against every state of its groups; see the module docstring."""
  group_of = {t: g for g, members in enumerate(groups) for t in members}
  domains = []
  for g, members in enumerate(groups):
    states = allowed.get(g) or candidate_states(shapes[members[0]], n, allow_rep)
    domains.append(tuple(states))
  factors, tables = [], []
  cache: dict = {}
  ops = [o for o in graph.ops if o.kind in ("compute", "single")]
  for count, op in enumerate(ops):
    ctx = contexts[op.name]
    sem_meta = frozenset()
    if op.kind == "compute":
      sem, _ = describer(ctx)
      if sem is not None:
        sem_meta = sem.meta_inputs - sem.accessed_inputs
    slots = _slots(op, ctx, sem_meta)
    tensors = [op.inputs[i] if kind == "in" else op.outputs[i] for kind, i in slots]
    slot_groups = [group_of[t] for t in tensors]
    slot_states = [domains[g] for g in slot_groups]
    itemsizes = [graph.tensors[t].itemsize for t in tensors]
    scope = tuple(sorted(set(slot_groups)))
    pattern = tuple(scope.index(g) for g in slot_groups)
    forced = forced_ops.get(op.name)
    key = (context_key(ctx), op.kind, pattern, tuple(slot_states), tuple(itemsizes), forced)
    if key not in cache:
      names, costs = _slot_costs(op, ctx, n, describer, slot_states, itemsizes)
      if forced is not None:
        keep = [i for i, nm in enumerate(names) if nm == forced]
        if not keep:
          raise ValueError(f"op {op.name!r} ({op.op_type}): the forced strategy {forced!r} is not "
                           f"available with {n} workers; its options are {names}")
        names, costs = [names[i] for i in keep], [costs[i] for i in keep]
      stack = np.zeros((len(names),) + tuple(len(domains[g]) for g in scope))
      for s_i, per_slot in enumerate(costs):
        for slot, vec in enumerate(per_slot):
          shape = [1] * len(scope)
          shape[pattern[slot]] = len(vec)
          stack[s_i] = stack[s_i] + vec.reshape(shape)
      cache[key] = (tuple(names), stack)
    names, stack = cache[key]
    if scope:
      factors.append(dp.Factor(scope, stack.min(axis=0)))
    tables.append((op, scope, names, stack))
    if (count + 1) % 2000 == 0:
      logging.info("level n=%d: priced %d/%d ops", n, count + 1, len(ops))
  return LevelProblem(n, tuple(domains), tuple(factors), tuple(tables))


def finish_level(problem: LevelProblem, assignment: Sequence[int], proven_optimal: bool,
                 width: int = 0, fixed_groups: int = 0) -> LevelResult:
  """Given group states, every op takes its cheapest option (first on ties)."""
  choices = {}
  for op, scope, names, stack in problem.op_tables:
    vec = stack[(slice(None),) + tuple(assignment[g] for g in scope)]
    order = np.argsort(vec, kind="stable")
    best = int(order[0])
    alt = int(order[1]) if len(order) > 1 else None
    choices[op.name] = Choice(names[best], float(vec[best]),
                              names[alt] if alt is not None else None,
                              float(vec[alt]) if alt is not None else None)
  states = tuple(problem.domains[g][assignment[g]] for g in range(len(problem.domains)))
  return LevelResult(n=problem.n, group_states=states, choices=choices,
                     objective=dp.evaluate(problem.factors, assignment),
                     proven_optimal=proven_optimal, width=width, fixed_groups=fixed_groups)


def solve_level(graph: SearchGraph, groups: Sequence[Sequence[str]], contexts: Mapping[str, object],
                shapes: Mapping[str, tuple], n: int, describer: Describer,
                allowed: Mapping[int, tuple[State, ...]], allow_rep: bool = False,
                forced_ops: Mapping[str, str] = {}, max_table: int = 1 << 20) -> LevelResult:
  """Builds the level's factors and solves them exactly with ``dp.solve``."""
  problem = build_level(graph, groups, contexts, shapes, n, describer, allowed, allow_rep,
                        forced_ops)
  sol = dp.solve([len(d) for d in problem.domains], problem.factors, max_table=max_table)
  return finish_level(problem, sol.assignment, sol.proven_optimal, sol.width, len(sol.fixed))
