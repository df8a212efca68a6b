"""The Tofu planner's level solver (exact one-cut DP) and the search options."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

from tf_tofu.opdefs.registry import Describer
from tf_tofu.core.states import State
from tf_tofu.search import onecut


@dataclasses.dataclass(frozen=True)
class SearchOptions:
  """Knobs of the search.

  Attributes:
    max_table: largest DP table (entries) before the conditioning fallback.
    allow_rep_storage: let tensors be stored replicated (Tofu stores cuts only,
      which keeps per-device memory at 1/k; replication is always allowed for a
      tensor with no cuttable dim).
    tensor_states: user constraints, tensor name -> allowed states (every level).
    op_strategies: user constraints, op name -> strategy name (every level).
    never_worse: after Tofu's recursion, also run the baselines that store
      what Tofu may store (``planners.rivals``), take the plan that moves
      the fewest bytes, evaluated exactly, and end with the exact improvement
      pass on it (``planners.run``, ``search.improve``).  Off by default: it
      runs four more searches (Keras InceptionV3 at k = 8 plans in about twice
      the time).
    needs_once: price a need that several op groups make (the same boxes of one
      tensor) once per level, as the rewrite sends it, so that each level's
      objective is its exact bytes (``onecut``, "Shared needs"); a level too
      wide for the exact DP that way is priced per op group, and says so (a
      larger ``max_table``, 2**23, lets the GPTs' levels fit).  Off by default:
      it widens the DP, and planning the large models takes 1.5 to 4 times as long.
    memory_budget: the most bytes any device may hold at its peak
      (``tf_tofu.layout.memory.plan_peak``), or None (no budget: Tofu's
      cut-only storage, today's plans).  With a budget the search may store
      tensor groups replicated where that moves fewer bytes and returns the
      fewest-bytes plan that fits (``tf_tofu.search.budget``); ``math.inf``
      allows replication everywhere.  Parse "16GiB"-style strings with
      ``budget.parse_memory_budget``.
  """

  max_table: int = 1 << 20
  allow_rep_storage: bool = False
  tensor_states: Mapping[str, tuple[State, ...]] = dataclasses.field(default_factory=dict)
  op_strategies: Mapping[str, str] = dataclasses.field(default_factory=dict)
  never_worse: bool = False
  needs_once: bool = False
  memory_budget: Optional[float] = None


def group_constraints(groups, tensor_states: Mapping[str, tuple[State, ...]], n: int,
                      shapes) -> dict[int, tuple[State, ...]]:
  """Allowed states per group: the intersection of its members' constraints."""
  out = {}
  for g, members in enumerate(groups):
    allowed = None
    for t in members:
      if t in tensor_states:
        s = set(tensor_states[t])
        allowed = s if allowed is None else allowed & s
    if allowed is not None:
      cand = onecut.candidate_states(shapes[members[0]], n, True)
      keep = tuple(s for s in cand if s in allowed)
      if not keep:
        raise ValueError(f"tensor {members[0]!r} (shape {shapes[members[0]]}): none of the "
                         f"constrained states {sorted(map(str, allowed))} can be used with "
                         f"{n} workers; the candidates are {[str(s) for s in cand]}")
      out[g] = keep
  return out


def level_solver(describer: Describer, options: SearchOptions,
                 storage_price: Optional[float] = None):
  """Tofu's level solver: the exact one-cut DP.  ``storage_price`` (None: storage as
  ``options.allow_rep_storage`` says) allows replicated storage at that price per byte
  (``onecut.storage_factors``; 0: replication free), and then contractions split their
  work (``onecut``'s "split work")."""
  allow_rep = options.allow_rep_storage or storage_price is not None

  def solve(graph, groups, contexts, shapes, n, level, pricing=None):
    del level
    allowed = group_constraints(groups, options.tensor_states, n, shapes)
    return onecut.solve_level(graph, groups, contexts, shapes, n, describer, allowed,
                              allow_rep=allow_rep, forced_ops=options.op_strategies,
                              max_table=options.max_table, storage_price=storage_price or 0.0,
                              cache=pricing, split_work=storage_price is not None,
                              needs_once=options.needs_once)
  return solve
