"""The planners Tofu compares against, on the same cost model and Plan type.

Each is a level solver for ``recursive.search`` (so every baseline gets the
same recursion over factor orders, exact pricing and reporting):

* ``datapar`` - data parallelism: every variable (with its gradient and
  update) is replicated, every other tensor is cut on dim 0 (the batch)
  where it can be; each op then takes its cheapest strategy.  It is the one
  baseline that stores tensors replicated, so it holds k copies of the model.
* ``allrow`` - AllRow-Greedy: every tensor is cut on dim 0 at every level,
  each op picks its cheapest strategy.

Where a tensor's dim 0 cannot be cut (fewer elements than workers), a baseline
lets it take any of the cuts Tofu could give it, never a replicated copy.
* ``spartan`` - greedy by size: tensor groups, largest first, each take the
  state that is cheapest given the groups already decided (undecided ones
  assumed at their best).
* ``equalchop`` - the first level's optimal one-cut decision for every
  tensor, repeated at every level (ops re-optimised per level).
* ``megatron`` - Megatron-style tensor parallelism: the weight of a
  matmul-like op whose output flows (without crossing another weight matmul)
  into a later weight matmul is cut column-wise (on a dim it does not
  contract), that later weight row-wise (on a contracted dim); attention's
  q/k/v and output projections and the MLP's two matmuls pair up this way.
  Every other tensor takes the state the DP prefers given those weights.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tf_tofu.opdefs.registry import Describer
from tf_tofu.core.states import REP, Cut, Partial, State
from tf_tofu.search import dp, onecut
from tf_tofu.graph.view import SearchGraph
from tf_tofu.search.tofu import SearchOptions, group_constraints, level_solver

MATMUL_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"})


def _variable_groups(graph: SearchGraph, groups) -> set[int]:
  return {g for g, members in enumerate(groups) if any(t in graph.variables for t in members)}


def _first_cut(shape, n, dim=0):
  return (Cut(dim),) if len(shape) > dim and shape[dim] >= n else None


def _solver_with(allowed_fn: Callable, describer: Describer, options: SearchOptions,
                 exact: bool = True):
  """A level solver whose group domains are narrowed by ``allowed_fn``."""

  def solve(graph, groups, contexts, shapes, n, level, pricing=None):
    allowed = group_constraints(groups, options.tensor_states, n, shapes)
    for g, states in allowed_fn(graph, groups, shapes, n, level).items():
      cand = onecut.candidate_states(shapes[groups[g][0]], n, True)
      keep = tuple(s for s in states if s in cand and s in allowed.get(g, cand))
      if keep:
        allowed[g] = keep
    res = onecut.solve_level(graph, groups, contexts, shapes, n, describer, allowed,
                             options.allow_rep_storage, options.op_strategies,
                             options.max_table, cache=pricing,
                             needs_once=options.needs_once)
    return dataclasses.replace(res, proven_optimal=False)

  return solve


def datapar(describer, options):
  def allowed(graph, groups, shapes, n, level):
    var_groups = _variable_groups(graph, groups)
    out = {}
    for g, members in enumerate(groups):
      cut = _first_cut(shapes[members[0]], n)
      if g in var_groups:
        out[g] = (REP,)
      elif cut:
        out[g] = cut
    return out
  return _solver_with(allowed, describer, options)


def allrow(describer, options):
  def allowed(graph, groups, shapes, n, level):
    return {g: _first_cut(shapes[m[0]], n) for g, m in enumerate(groups)
            if _first_cut(shapes[m[0]], n)}
  return _solver_with(allowed, describer, options)


def equalchop(describer, options):
  first: dict[int, State] = {}
  tofu_level = level_solver(describer, options)

  def solve(graph, groups, contexts, shapes, n, level, pricing=None):
    if level == 0:
      res = tofu_level(graph, groups, contexts, shapes, n, level, pricing)
      first.clear()
      first.update(enumerate(res.group_states))
      return res
    return _solver_with(lambda *_: {g: (s,) for g, s in first.items()}, describer,
                        options)(graph, groups, contexts, shapes, n, level, pricing)
  return solve


def spartan(describer, options):
  def solve(graph, groups, contexts, shapes, n, level, pricing=None):
    allowed = group_constraints(groups, options.tensor_states, n, shapes)
    # Needs are priced per op group here even with needs_once: the greedy pass below
    # minimises each factor on its own, and would see a shared need's variable at 0.
    problem = onecut.build_level(graph, groups, contexts, shapes, n, describer, allowed,
                                 options.allow_rep_storage, options.op_strategies,
                                 cache=pricing)
    sizes = [graph.tensors[m[0]].itemsize * int(np.prod(shapes[m[0]])) for m in groups]
    decided: dict[int, int] = {}
    by_group: dict[int, list[dp.Factor]] = {}
    for f in problem.factors:
      for g in f.scope:
        by_group.setdefault(g, []).append(f)
    for g in sorted(range(len(groups)), key=lambda g: (-sizes[g], g)):
      cost = np.zeros(len(problem.domains[g]))
      for f in by_group.get(g, ()):
        t = f.table
        for axis in reversed(range(len(f.scope))):
          s = f.scope[axis]
          if s == g:
            continue
          t = np.take(t, decided[s], axis=axis) if s in decided else t.min(axis=axis)
        cost += t
      decided[g] = int(np.argmin(cost))
    return onecut.finish_level(problem, [decided[g] for g in range(len(groups))], False)
  return solve


def _weight_dims(op, sem, describer, n, weight_slot):
  """(free dims, contracted dims) of the weight input, read off the op's strategies."""
  free, contracted = [], []
  for s in describer.strategies(sem, n):
    need = s.inputs[weight_slot]
    if need is not None and isinstance(need.state, Cut):
      (contracted if any(isinstance(o, Partial) for o in s.outputs) else free).append(need.state.dim)
  return sorted(set(free)), sorted(set(contracted))


def megatron(describer, options):
  def allowed(graph, groups, shapes, n, level):
    group_of = {t: g for g, m in enumerate(groups) for t in m}
    var_groups = _variable_groups(graph, groups)
    upstream: dict[str, frozenset] = {}  # tensor -> nearest upstream weight matmuls
    label: dict[str, str] = {}
    out: dict[int, tuple[State, ...]] = {}
    for op in graph.ops:
      if op.kind != "compute" or op.name in graph.forward_op_of:
        continue
      srcs = frozenset().union(*[upstream.get(t, frozenset()) for t in op.inputs if t])
      weight = [i for i, t in enumerate(op.inputs) if t and group_of.get(t) in var_groups]
      if op.op_type in MATMUL_OPS and weight:
        sem, _ = describer(op.context)
        w = weight[0]
        free, contracted = _weight_dims(op, sem, describer, n, w) if sem else ([], [])
        row = any(label.get(s) == "column" for s in srcs)
        label[op.name] = "row" if row else "column"
        dims = contracted if row else free
        if dims:
          out[group_of[op.inputs[w]]] = (Cut(dims[0]),)
        for t in op.outputs:
          upstream[t] = frozenset({op.name})
      else:
        for t in op.outputs:
          upstream[t] = srcs
    return out
  return _solver_with(allowed, describer, options)
