"""The exact improvement pass: one tensor group's state at one level at a time, each move
taken only when the plan's exactly counted bytes fall.

With every op's strategy fixed, what ``evaluate`` counts is a sum over tensors,

    B = sum_t s_t * ( P_t(L_t) + sum_{u in U_t} F_{t,u}(L_t) ),

``s_t`` the item size, ``L_t`` the tensor's layout (its state at every level),
``P_t`` the elements of producing it from its producer's tiles into its
blocks and ``F_{t,u}`` those of gathering its distinct need ``u`` (the boxes
some of its readers' tiles read) from them.  The tiles are the ops', fixed by
their strategies, so a tensor's term depends on its own layout alone
(``evaluate.PlanPricer.tensor_elements``).  A move sets group ``g``'s state at
level ``l`` to ``x``; the members of a group share their layout and move
together, and only their terms change:

    delta = sum_{t in g} s_t * ( term_t(L_g with x at l) - term_t(L_g) ),

exactly.  The move is taken when ``delta < 0``, so the plan's bytes only fall.

The moves are those the search itself could make: at level ``l``, every state
``onecut.candidate_states`` gives the members' block after the levels before
(cut-only unless replicated storage is allowed), within the user's tensor
constraints; the states at the other levels are kept, and a move after which
one of them is no longer a candidate of its (new) block is not made.  Groups
in order, levels in order, states in candidate order, every improving move
taken as it is found; sweeps repeat until one takes no move, at most
``max_sweeps``.  A group whose members' terms are all 0 is passed over (it
cannot fall).  Deterministic: the same plan in, the same plan out.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

from tf_tofu.core import progress
from tf_tofu.core.states import State
from tf_tofu.graph.view import SearchGraph
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import onecut
from tf_tofu.search.evaluate import EvalCache, PlanPricer
from tf_tofu.search.recursive import block_shape


PROGRESS_EVERY = 2000  # tensor groups between progress updates


@dataclasses.dataclass(frozen=True)
class Improvement:
  layouts: dict[str, tuple[State, ...]]
  moves: int            # group moves taken
  saved_bytes: int      # the exact bytes they saved, summed


def group_moves(shape: tuple[int, ...], layout: tuple[State, ...], level: int,
                factors: Sequence[int], allow_rep: bool,
                allowed: Optional[frozenset] = None) -> list[tuple[State, ...]]:
  """The layouts that differ from ``layout`` (of a tensor of ``shape``) at ``level`` alone
  and that the search could give it (module docstring)."""
  def ok(state, block, n):
    return state in onecut.candidate_states(block, n, allow_rep) and (
        allowed is None or state in allowed)

  block = tuple(shape)
  for j in range(level):
    block = block_shape(block, layout[j], factors[j])
  out = []
  for state in onecut.candidate_states(block, factors[level], allow_rep):
    if state == layout[level] or (allowed is not None and state not in allowed):
      continue
    moved = layout[:level] + (state,) + layout[level + 1:]
    sub, valid = block_shape(block, state, factors[level]), True
    for j in range(level + 1, len(factors)):
      if not ok(moved[j], sub, factors[j]):
        valid = False
        break
      sub = block_shape(sub, moved[j], factors[j])
    if valid:
      out.append(moved)
  return out


def improve(graph: SearchGraph, groups: Sequence[Sequence[str]], factors: Sequence[int],
            layouts: Mapping[str, tuple[State, ...]], strategies: Mapping[str, Sequence[str]],
            describer: Describer, cache: Optional[EvalCache] = None, allow_rep: bool = False,
            tensor_states: Mapping[str, Sequence[State]] = {},
            max_sweeps: int = 2) -> Improvement:
  """The plan's layouts after the exact improvement pass (module docstring); ``cache``:
  tiles and pieces for these factors shared with ``evaluate``."""
  factors = tuple(factors)
  cache = cache if cache is not None else EvalCache(factors)
  pricer = PlanPricer(graph, factors, layouts, strategies, describer, cache)
  for op in graph.ops:
    pricer.record(op)
  terms: dict = {}

  def term(t: str, layout: tuple[State, ...]) -> int:
    got = terms.get((t, layout))
    if got is None:
      got = terms[(t, layout)] = pricer.tensor_elements(t, layout) * graph.tensors[t].itemsize
    return got

  layouts = {t: tuple(v) for t, v in layouts.items()}
  moves = saved = 0
  for sweep in range(max_sweeps):
    moved = False
    for i, members in enumerate(groups):
      if (i + 1) % PROGRESS_EVERY == 0:
        progress.update(f"exact improvement pass, sweep {sweep + 1}: {i + 1:,}/{len(groups):,} "
                        f"tensor groups, {moves} moves")
      current = layouts[members[0]]
      if any(layouts[t] != current for t in members) or not any(
          term(t, current) for t in members):
        continue
      constrained = [frozenset(tensor_states[t]) for t in members if t in tensor_states]
      allowed = frozenset.intersection(*constrained) if constrained else None
      for level in range(len(factors)):
        for layout in group_moves(graph.tensors[members[0]].shape, current, level, factors,
                                  allow_rep, allowed):
          delta = sum(term(t, layout) - term(t, current) for t in members)
          if delta < 0:
            for t in members:
              layouts[t] = layout
            current = layout
            moves, saved, moved = moves + 1, saved - delta, True
    if not moved:
      break
  return Improvement(layouts, moves, saved)
