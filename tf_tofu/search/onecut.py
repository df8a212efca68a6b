"""One cut: choose every tensor group's state and every op's strategy for n workers.

For the level's sub-problem (each op's sub-op as worker 0 of the previous
levels sees it, each tensor's block likewise), an op ``f`` with strategies
``sigma`` (its cuttable index variables, plus ``replicate``; ``single`` for an
op left whole) touching tensor groups ``g`` costs

    F_f(x) = min_sigma [ sum_{inputs i} gather(held(x_{g(i)}) -> need_sigma(i))
                       + sum_{outputs o} produce(made_sigma(o) -> held(x_{g(o)})) ]

bytes, with the conversions of ``tf_tofu.layout.transfers`` evaluated on the sub-op's
own shapes.  Source and read ops cost nothing (their tensors are tied to
what they feed).  An update op runs on every shard of its variable: the
inputs on the shards are tied to the variable and cost nothing, and every
other input ``t`` (``view.update_slots``: the rows and indices of a sparse
update) is needed whole on each worker, the unary factor

    U_t(x_g(t)) = gather(held(x_g(t)) -> the whole block, on each of the n workers),

as ``evaluate`` counts it.  ``dp.solve`` minimises ``sum_f F_f + sum_t U_t``
exactly; each op then takes its argmin strategy, and the runner-up's cost is
kept for the report.

*Shared needs.*  Op groups that need the same boxes of one tensor share one
conversion (the rewrite sends it once, and ``evaluate`` counts it once), as
the members of one op group already do in its table.  Every need ``d`` of a
tensor ``t`` that two or more units (or update ops) make, and that moves bytes
in some state of ``t``'s group, is taken out of their tables and gets a
variable ``y_d`` in {0, 1} with the factors

    S_d(y_d, x_g(t)) = y_d * gather(held(x_g(t)) -> the boxes of d),
    R_ud(c_u, y_d)   = inf  if unit u's joint option c_u makes d and y_d = 0,  else 0,

(a unit making such a need is priced with a choice variable ``c_u``, an
:class:`AxisTable`; one whose members have one option each gets ``R`` as a
unary factor on ``y_d``).  Minimised over the ``y``, a need's bytes are paid
once when any unit makes it: the level's objective is its exact bytes.  The
variables couple the units that share a need; when that makes the level too
wide for the exact DP (``dp.fits``, told by a symbolic elimination before the DP
runs), the level is solved again with each unit paying its own needs
(``build_level(needs_once=False)``): an exact DP for an objective that counts
a shared need once per op group (an upper bound on the level's bytes), which
the level reports (``LevelResult.needs``).  Pricing needs once is asked for
(``SearchOptions.needs_once``), not the default: the variables widen the DP
(the tiny GPT at n = 2 needs a table of 4.4 million entries), and on the large
models planning takes 1.5 to 4 times as long for changes within 0.1 % of the
bytes (docs/method.md, ``tools/bench_needs_once.py``).

*Memory term* (``storage_price`` p > 0, the memory-budget search of
``tf_tofu.search.budget``): every group ``g`` that may be stored either cut or
replicated gets the unary factor

    M_g(x_g) = p (n - 1) S_g   if x_g = rep,   0 if x_g is a cut,

with ``S_g`` the bytes of the group's largest member in this level's
sub-problem (members are one tensor's value, gradient, variable, update).
With ``p = lambda / k`` this is lambda x the bytes that storing ``g``
replicated at this level adds to each device's final share, in the units of
this level's cost (see :func:`storage_factors`).  The factors are kept apart
from the byte factors (``LevelProblem.penalties``): the DP minimises bytes +
memory term exactly, the level's objective reports bytes alone.

*Split work* (``split_work``, the same search): a contraction, an op whose
work exceeds the data it touches (``analysis.work(sem)``, its iteration
space, > the elements of its inputs and outputs: MatMul, Conv2D and their
gradients), does not take ``replicate`` when it has a strategy that splits its
work.  Replicating an op runs it whole on every worker, n times the work, and
bytes do not count work; once inputs may be stored replicated it is free in
bytes, and every op replicated (0 bytes per step) would be the "best" plan.
Ops whose work is at most their data (elementwise ops, reductions, layout
ops) may still run replicated, as Megatron-LM runs layer norms, since that
repeats no more work than moving their data would.  Ops without a splitting
strategy (scalars, ops left whole) and ops a user forces to ``replicate``
keep it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from tf_tofu.core import progress
from tf_tofu.layout import transfers
from tf_tofu.opdefs import analysis
from tf_tofu.opdefs.registry import Describer, context_key
from tf_tofu.core.states import REP, Cut, Partial, State
from tf_tofu.search import dp
from tf_tofu.graph.view import SOp, SearchGraph, update_slots
from tf_tofu.layout.tiling import REPLICATE, SINGLE, held_regions


@dataclasses.dataclass(frozen=True)
class Choice:
  """An op's decision at one level, with its cost and the runner-up's."""

  strategy: str
  cost: float
  next_best: Optional[str]
  next_best_cost: Optional[float]


PER_GROUP, ONCE, TOO_WIDE = "per op group", "once", "per op group (once was too wide)"


@dataclasses.dataclass(frozen=True)
class LevelResult:
  n: int
  group_states: tuple[State, ...]
  choices: dict[str, Choice]
  objective: float
  proven_optimal: bool
  width: int
  fixed_groups: int
  # How far the DP's objective may be above the level's optimum (``dp.lower_bound``):
  # 0 when the DP was exact.
  gap_bound: float = 0.0
  # How a need several op groups make was priced (module docstring, "Shared needs"):
  # ONCE (the level's exact bytes), PER_GROUP, or TOO_WIDE (once was asked for, but
  # made the level too wide for the exact DP, so per op group).
  needs: str = PER_GROUP


def candidate_states(shape: Sequence[int], n: int, allow_rep: bool) -> tuple[State, ...]:
  """Cuts of every dim of size >= n; REP when none exists or when allowed."""
  cuts = tuple(Cut(d) for d, s in enumerate(shape) if s >= n)
  return cuts + (REP,) if (allow_rep or not cuts) else cuts


def _op_strategies(op: SOp, ctx, n: int, describer: Describer, split_work: bool = False):
  """``[(name, need per input slot, made per output)]`` of an op's options at this level
  (``split_work``: no ``replicate`` for a contraction that can split; module docstring)."""
  whole_in = [describer.pool.whole(t.shape) for t in ctx.inputs]
  whole_out = [describer.pool.whole(t.shape) for t in ctx.outputs]
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
  if not (split_work and options and _contracts(ctx, sem)):
    options.append((REPLICATE, [[r] * n for r in whole_in],
                    [([r] * n, [()] * n) for r in whole_out]))
  return options, meta


def _slots(op: SOp, ctx, meta) -> list[tuple[str, int]]:
  slots = [("in", i) for i, t in enumerate(op.inputs) if t is not None and i not in meta]
  slots += [("out", o) for o in range(len(op.outputs))]
  return slots


class _Pricer:
  """Cost vectors of one conversion over a group's candidate states, memoised per
  vector and per state (a baseline's narrowed domain reuses Tofu's prices)."""

  def __init__(self, n: int):
    self.n = n
    self.cache: dict = {}
    self.per_state: dict = {}
    self.held: dict = {}  # (shape, state) -> the n blocks a worker of each holds
    self.needs: dict = {}  # per-worker boxes of a need -> a small int naming it

  def need_id(self, need: tuple) -> int:
    """The small int naming the per-worker boxes ``need`` (equal needs, one int): the
    tables key input conversions by it rather than by hashing the boxes again."""
    return self.needs.setdefault(need, len(self.needs))

  def _vector(self, kind: str, shape, domain, rest: tuple, price) -> np.ndarray:
    """``price(held blocks)`` per state of ``domain = (its id, its states)`` (the id, a
    small int of the level's ``PricingCache.interned``, keys the cache); ``rest`` is
    what else the conversion depends on (its need, or its made regions and partial
    keys, and the item size)."""
    sid, states = domain
    key = (kind, shape, sid) + rest
    vec = self.cache.get(key)
    if vec is None:
      vec = np.zeros(len(states))
      for j, st in enumerate(states):
        one = (kind, shape, st) + rest
        if one not in self.per_state:
          held = self.held.get((shape, st))
          if held is None:
            held = self.held[(shape, st)] = held_regions(shape, [st], (self.n,))
          self.per_state[one] = price(held)
        vec[j] = self.per_state[one]
      self.cache[key] = vec
    return vec

  def feed(self, shape, domain, need, itemsize) -> np.ndarray:
    # ``held``: a Cut or REP state's blocks, a partition of the tensor (gather_elements).
    return self._vector("in", shape, domain, (need, itemsize), lambda held: (
        transfers.gather_elements(held, need) * itemsize))

  def produce(self, shape, domain, regions, keys, itemsize) -> np.ndarray:
    if not any(keys):  # final values: the made blocks (canonical, or whole) are gathered
      def price(held):
        return transfers.gather_elements(regions, held) * itemsize
    else:
      def price(held):
        return int(transfers.produce_flows(list(regions), list(keys), held,
                                           (self.n,)).elements.sum()) * itemsize
    return self._vector("out", shape, domain, (regions, keys, itemsize), price)


class PricingCache:
  """What pricing a level with ``n`` workers memoises, each a pure function of its key:
  conversion prices (``pricer``), every op signature's priced options
  (``skeletons``), every op group's table (``tables``) and wiring (``wirings``:
  how its members share tensors, the same at every level), whole level problems
  (``problems``: the same graph, groups, sub-op contexts (by object), shapes,
  domains, forced strategies and storage price) and their DP solutions
  (``solutions``).  One cache may serve every level with ``n`` workers of every
  planner on one graph (``search.memo``): the levels of the planners agree on
  most ops' sub-problems, and their first levels are often the same problem.
  Entries hold the objects their keys name by ``id``, so no id is reused."""

  def __init__(self, n: int):
    self.n = n
    self.pricer = _Pricer(n)
    self.skeletons: dict = {}
    self.tables: dict = {}
    self.problems: dict = {}
    self.solutions: dict = {}
    self.interned: dict = {}  # domains and (domain id, item size) pairs -> small ints
    # (id of the groups, a unit's first op, its members' used slots) -> (the groups,
    # the unit's _wiring).
    self.wirings: dict = {}


def _skeleton(op: SOp, ctx, skey: tuple, n, describer, tensor_domains, itemsize_of, pricer,
              forced, split_work: bool, skeletons: dict) -> tuple:
  """Prices the op's signature ``skey``, new to ``skeletons``, and keeps it there:
  ``(id, options, used slots, moving)``.

  ``options``: per option its name and entries ``(kind, slot, need id, cost vector)``
  (``_Pricer.need_id``; None for an output);
  ``used slots``: the ``(kind, slot)`` the entries touch, in order of first use;
  ``moving``: ``(slot, need id, cost vector)`` of each distinct input conversion that
  moves bytes in some state (the needs another op group may share, :func:`_shared_needs`).
  Ops of one signature (context, kind, forced strategy, split work, their slots' domains
  and item sizes: :func:`_signature_key`) share it, with their own tensors filled in by
  :func:`_member_options`.
  """
  options = _price_skeleton(op, ctx, n, describer, tensor_domains, itemsize_of, pricer, forced,
                            split_work)
  used, moving = {}, {}
  for _, entries in options:
    for kind, idx, need_id, vec in entries:
      used.setdefault((kind, idx), None)
      if kind == "in" and vec.any():
        moving.setdefault((idx, need_id), vec)
  got = skeletons[skey] = (len(skeletons), options, tuple(used),
                           tuple((idx, need_id, vec) for (idx, need_id), vec in moving.items()))
  return got


def _signature_key(op: SOp, ckey, forced, split_work: bool, signature: Mapping[str, int]) -> tuple:
  """What an op's priced options depend on: its context key, kind, forced strategy, split
  work, and each slot's ``signature`` (domain and item size as one small int; -1 for an
  absent input)."""
  return (ckey, op.kind, forced, split_work,
          tuple([signature[t] if t else -1 for t in op.inputs]),
          tuple([signature[t] for t in op.outputs]))


def _member_options(op: SOp, skeleton) -> list:
  """Per option of one op: its name and its conversions ``(dedupe key, tensor, vec)``.

  Two members of an op group that need the same boxes of the same tensor share
  the dedupe key ``("in", tensor, need id)``, so the group pays for it once.
  """
  out = []
  for name, entries in skeleton[1]:
    ents = []
    for kind, idx, need_id, vec in entries:
      if kind == "in":
        t = op.inputs[idx]
        ents.append((("in", t, need_id), t, vec))
      else:
        t = op.outputs[idx]
        ents.append((("out", op.name, idx), t, vec))
    out.append((name, ents))
  return out


def _contracts(ctx, sem) -> bool:
  """Whether the op's work exceeds the elements it reads and writes ("split work")."""
  data = sum(math.prod(t.shape) for t in (*ctx.inputs, *ctx.outputs))
  return analysis.work(sem) > data


def _price_skeleton(op, ctx, n, describer, tensor_domains, itemsize_of, pricer, forced,
                    split_work: bool):
  # A forced strategy is the user's, ``replicate`` included.
  options, meta = _op_strategies(op, ctx, n, describer, split_work and forced is None)
  if forced is not None:
    names = [o[0] for o in options]
    options = [o for o in options if o[0] == forced]
    if not options:
      raise ValueError(f"op {op.name!r} ({op.op_type}): the forced strategy {forced!r} is not "
                       f"available with {n} workers; its options are {names}")
  out = []
  for name, needs, made in options:
    entries = []
    for kind, idx in _slots(op, ctx, meta):
      if kind == "in":
        t = op.inputs[idx]
        need = tuple(needs[idx])
        vec = pricer.feed(ctx.inputs[idx].shape, tensor_domains[t], need, itemsize_of[t])
        entries.append(("in", idx, pricer.need_id(need), vec))
      else:
        t = op.outputs[idx]
        regions, keys = made[idx]
        vec = pricer.produce(ctx.outputs[idx].shape, tensor_domains[t], tuple(regions),
                             tuple(keys), itemsize_of[t])
        entries.append(("out", idx, None, vec))
    out.append((name, entries))
  return out


MAX_JOINT = 1 << 18  # combos x table entries of one op group priced jointly
MAX_AXES = 32        # tensor groups of a dense table (numpy arrays have at most 64 axes)


@dataclasses.dataclass(frozen=True)
class LevelProblem:
  """The priced one-cut problem: group domains, factors, and per-unit option tables.

  A unit is an op group (a forward op with the gradient ops that differentiate
  it) priced jointly, so that its members share conversions of a tensor they
  need alike; ``units[u] = (member ops, scope, names per combo, table)``.
  The factors' variables are the tensor groups (``domains``), then one binary
  variable ``y_d`` per need shared by several units (``shared_needs`` of them;
  ``unit_needs[u]``: the variables of unit ``u``'s shared needs, in the order of
  its table's ``needs`` columns), then one choice variable per unit priced as
  an :class:`AxisTable` (``aux_sizes``: its number of joint options), in the
  order of ``units``.
  """

  n: int
  domains: tuple[tuple[State, ...], ...]
  factors: tuple[dp.Factor, ...]
  units: tuple[tuple[tuple[SOp, ...], tuple[int, ...], tuple[tuple[str, ...], ...], np.ndarray], ...]
  aux_sizes: tuple[int, ...] = ()
  penalties: tuple[dp.Factor, ...] = ()  # the memory term (module docstring), not bytes
  shared_needs: int = 0
  unit_needs: tuple[tuple[int, ...], ...] = ()

  def variable_sizes(self) -> list[int]:
    """The domain size of every variable of ``factors``: groups, shared needs, then unit
    choices."""
    return [len(d) for d in self.domains] + [2] * self.shared_needs + list(self.aux_sizes)


def _units(graph: SearchGraph) -> list[list[SOp]]:
  by_lead: dict[str, list[SOp]] = {}
  for op in graph.ops:
    if op.kind in ("compute", "single"):
      by_lead.setdefault(graph.forward_op_of.get(op.name, op.name), []).append(op)
  return list(by_lead.values())


def build_level(graph: SearchGraph, groups: Sequence[Sequence[str]], contexts: Mapping[str, object],
                shapes: Mapping[str, tuple], n: int, describer: Describer,
                allowed: Mapping[int, tuple[State, ...]], allow_rep: bool = False,
                forced_ops: Mapping[str, str] = {}, storage_price: float = 0.0,
                cache: Optional[PricingCache] = None, split_work: bool = False,
                needs_once: bool = False) -> LevelProblem:
  """Prices every op group's options against every state of its tensor groups.

  A unit's factor is ``F(x) = min over joint member options c of the sum of the
  distinct conversions of c``; a unit whose joint table would exceed
  ``MAX_JOINT`` entries is priced member by member instead.  ``storage_price``
  > 0 adds the memory term (module docstring) as ``penalties``; ``split_work``
  drops ``replicate`` where a contraction can split its work (module docstring).
  ``needs_once`` prices a need that several units make once, with its variable
  ``y_d``; False leaves it to each unit (module docstring, "Shared needs").
  ``cache`` (for ``n`` workers) carries prices over from other levels and planners.
  """
  cache = cache if cache is not None else PricingCache(n)
  if cache.n != n:
    raise ValueError(f"a PricingCache for {cache.n} workers used for {n}")
  domains = []
  for g, members in enumerate(groups):
    states = allowed.get(g) or candidate_states(shapes[members[0]], n, allow_rep)
    domains.append(tuple(states))
  todo = _units(graph)
  held = (graph, groups, tuple(contexts[op.name] for unit in todo for op in unit))
  key = (tuple(map(id, held[:2])), tuple(map(id, held[2])), tuple(map(shapes.get, graph.tensors)),
         tuple(domains), tuple(sorted(forced_ops.items())), storage_price, split_work,
         needs_once)
  if key not in cache.problems:
    cache.problems[key] = (held, _build_level(graph, groups, contexts, shapes, n, describer,
                                              domains, todo, forced_ops, storage_price,
                                              split_work, cache, needs_once))
  return cache.problems[key][1]


def _build_level(graph, groups, contexts, shapes, n, describer, domains, todo, forced_ops,
                 storage_price, split_work: bool, cache: PricingCache,
                 needs_once: bool) -> LevelProblem:
  group_of = {t: g for g, members in enumerate(groups) for t in members}
  itemsize_of = {t: s.itemsize for t, s in graph.tensors.items()}
  # A tensor's pricing signature: its domain and item size, as one small int.
  domain_id = [cache.interned.setdefault(d, len(cache.interned)) for d in domains]
  tensor_domains = {t: (domain_id[group_of[t]], domains[group_of[t]]) for t in graph.tensors}
  signature = {t: cache.interned.setdefault((domain_id[group_of[t]], itemsize_of[t]),
                                            len(cache.interned)) for t in graph.tensors}
  pricer, skeletons, priced, wirings = cache.pricer, cache.skeletons, cache.tables, cache.wirings
  parts = []  # (members, their skeletons, (wiring, scope, axes, local tensors))
  for count, unit in enumerate(todo):
    skels = []
    for op in unit:
      forced = forced_ops.get(op.name)
      ctx = contexts[op.name]
      skey = _signature_key(op, context_key(ctx), forced, split_work, signature)
      sk = skeletons.get(skey)  # priced once per signature
      if sk is None:
        sk = _skeleton(op, ctx, skey, n, describer, tensor_domains, itemsize_of, pricer, forced,
                       split_work, skeletons)
      skels.append(sk)
    used = tuple([sk[2] for sk in skels])
    wkey = (id(groups), unit[0].name, used)
    whole = wirings.get(wkey)
    if whole is None:
      whole = wirings[wkey] = (groups, _wiring(unit, used, group_of))
    combos = math.prod(len(sk[1]) for sk in skels)
    per_axis = combos * sum(len(domains[g]) for g in whole[1][1])
    if per_axis <= MAX_JOINT:
      parts.append((unit, skels, whole[1]))
    else:
      parts.extend(([op], [sk], _wiring([op], [sk[2]], group_of)) for op, sk in zip(unit, skels))
    if (count + 1) % 2000 == 0:
      progress.update(f"priced {count + 1:,}/{len(todo):,} op groups")
  updates = _update_needs(graph, shapes, n, describer, tensor_domains, itemsize_of, pricer)
  shared, part_needs = (_shared_needs(parts, updates) if needs_once else
                         ({}, [{}] * len(parts)))
  base = len(domains)  # the need variables y_d come right after the groups
  factors = [dp.Factor((base + y, group_of[dkey[1]]), np.stack([np.zeros_like(vec), vec]))
             for dkey, (y, vec) in shared.items()]
  units, unit_needs = [], []
  aux_sizes: list[int] = []
  for (members, member_skels, (wiring, sub_scope, axes, tensors)), made in zip(parts, part_needs):
    names, stack, least, external = _part_table(
        members, member_skels, wiring, sub_scope, axes, tensors,
        [dkey for dkey in made if dkey in shared], domains, group_of, priced)
    ys = tuple(base + shared[d][0] for d in external)
    if isinstance(stack, SumTable):
      factors.extend(dp.Factor((sub_scope[pos],), vec) for pos, vec in stack.terms)
      factors.extend(dp.Factor((y,), np.array([np.inf, 0.0])) for y in ys)
    elif isinstance(stack, AxisTable):
      choice = base + len(shared) + len(aux_sizes)
      aux_sizes.append(stack.combos)
      factors.extend(dp.Factor((choice, sub_scope[pos]), matrix)
                     for pos, matrix in stack.terms)
      factors.extend(dp.Factor((choice, y), np.where(stack.needs[:, [j]], [np.inf, 0.0], 0.0))
                     for j, y in enumerate(ys))
    elif sub_scope:
      factors.append(dp.Factor(sub_scope, least))
    units.append((tuple(members), sub_scope, names, stack))
    unit_needs.append(ys)
  for dkey, vec in updates:  # an update needs its input whole: once, if it is shared
    y = shared.get(dkey)
    factors.append(dp.Factor((group_of[dkey[1]],), vec) if y is None else
                   dp.Factor((base + y[0],), np.array([np.inf, 0.0])))
  penalties = storage_factors(graph, groups, shapes, domains, n, storage_price)
  return LevelProblem(n, tuple(domains), tuple(factors), tuple(units), tuple(aux_sizes),
                      penalties, len(shared), tuple(unit_needs))


def _part_table(members, member_skels, wiring, sub_scope, axes, tensors, external, domains,
                group_of, priced: dict):
  """``(names, table, its minimum over joint options if dense, the shared needs it leaves
  out)`` of one part (an op group, or one member of a split one) whose needs
  ``external`` are shared with other parts, made once per structure and kept in
  ``priced``."""
  # The shared needs in a canonical order (local tensor, need id), so that parts of one
  # structure share their table.
  local = {t: i for i, t in enumerate(tensors)} if external else {}
  external = sorted(external, key=lambda d: (local[d[1]], d[2]))
  ext_key = tuple([(local[d[1]], d[2]) for d in external])
  # The table is a function of the members' skeletons, of how their slots share
  # tensors and tensor groups, and of which of their needs are shared: its key.
  struct = (tuple([sk[0] for sk in member_skels]), wiring, axes, ext_key)
  if struct not in priced:
    member_tables = [_member_options(op, sk) for op, sk in zip(members, member_skels)]
    if all(len(opts) == 1 for opts in member_tables):
      names, stack = _sum_table(member_tables, sub_scope, group_of, external)
    else:
      size = math.prod(len(opts) for opts in member_tables) * math.prod(
          len(domains[g]) for g in sub_scope)
      names, stack = _joint_table(member_tables, sub_scope, domains, group_of,
                                  dense=(not external and size <= MAX_JOINT
                                         and len(sub_scope) <= MAX_AXES),
                                  external=external)
    # A dense table's factor, the minimum over the joint options, is kept with it.
    least = stack.min(axis=0) if isinstance(stack, np.ndarray) and sub_scope else None
    priced[struct] = (names, stack, least)
  return priced[struct] + (external,)


def _update_needs(graph: SearchGraph, shapes, n: int, describer: Describer, tensor_domains,
                  itemsize_of, pricer) -> list[tuple[tuple, np.ndarray]]:
  """``U_t`` of the module docstring: per update op, per input it needs whole and whose
  gather moves bytes, ``(("in", t, need id), cost vector over t's group)``."""
  out = []
  for op in graph.ops:
    if op.kind != "update":
      continue
    for i in update_slots(graph, op)[1]:
      t = op.inputs[i]
      whole = (describer.pool.whole(shapes[t]),) * n
      vec = pricer.feed(shapes[t], tensor_domains[t], whole, itemsize_of[t])
      if vec.any():
        out.append((("in", t, pricer.need_id(whole)), vec))
  return out


def _shared_needs(parts, updates) -> tuple[dict[tuple, tuple[int, np.ndarray]], list[dict]]:
  """The needs ``("in", tensor, need id)`` that move bytes for two or more parts (op
  groups, or the update ops), each with its variable's number (in order of first
  use) and cost vector (``S_d`` of the module docstring); and per part, the needs
  that move bytes it makes."""
  made = []  # per part, then per update: the needs it makes, with their cost vectors
  for members, member_skels, _ in parts:
    mine = {}
    for op, sk in zip(members, member_skels):
      for idx, need_id, vec in sk[3]:
        mine.setdefault(("in", op.inputs[idx], need_id), vec)
    made.append(mine)
  made.extend({dkey: vec} for dkey, vec in updates)
  owners: dict[tuple, list] = {}  # need -> [how many make it, its cost vector]
  for mine in made:
    for dkey, vec in mine.items():
      owners.setdefault(dkey, [0, vec])[0] += 1
  shared = {}
  for dkey, (count, vec) in owners.items():
    if count > 1:
      shared[dkey] = (len(shared), vec)
  return shared, made[:len(parts)]


def _wiring(members: Sequence[SOp], used: Sequence[tuple], group_of: Mapping[str, int]) -> tuple:
  """How the members' used slots (``used[m]``: member m's ``(kind, slot)`` pairs, in its
  skeleton's order) share tensors and tensor groups: ``(wiring, scope, axes, tensors)``,
  with ``wiring[m]`` the local index of each used slot's tensor (``tensors``, numbered
  in order of first use), ``scope`` the sorted tensor groups of those tensors and
  ``axes`` the position in ``scope`` of each local tensor's group."""
  local: dict[str, int] = {}
  wiring = tuple(tuple([local.setdefault(op.inputs[i] if kind == "in" else op.outputs[i],
                                         len(local)) for kind, i in slots])
                 for op, slots in zip(members, used))
  scope = tuple(sorted({group_of[t] for t in local}))
  axis = {g: a for a, g in enumerate(scope)}
  return wiring, scope, tuple([axis[group_of[t]] for t in local]), tuple(local)


def storage_factors(graph: SearchGraph, groups: Sequence[Sequence[str]],
                    shapes: Mapping[str, tuple], domains: Sequence[tuple[State, ...]], n: int,
                    price: float) -> tuple[dp.Factor, ...]:
  """The memory term: ``M_g(rep) = price (n - 1) S_g``, 0 on cuts, per group that has both.

  Why ``(n - 1) S_g``: a group of ``S_g`` bytes in this level's sub-problem
  (already shrunk by the levels before, ``G`` groups of workers) ends, if every
  later level cuts it, as ``S_g / (n r)`` bytes per device when this level
  cuts it and ``S_g / r`` when it replicates it (``r`` the product of the later
  factors, ``k = G n r``).  Replicating adds ``S_g (n - 1) / (n r)`` to each
  device's share; the level's cost counts once per group of workers, so in
  its units that is ``S_g (n - 1) / (G n r) = S_g (n - 1) / k``: with
  ``price = lambda / k`` the level minimises ``d_l + lambda x`` (its share of
  the per-device bytes replication adds).  A tensor group is counted once
  (its largest member), the way one buffer of it is live at a time.
  """
  if not price:
    return ()
  out = []
  for g, members in enumerate(groups):
    states = domains[g]
    if REP not in states or all(s == REP for s in states):
      continue
    size = max(int(np.prod(shapes[t], dtype=np.int64)) * graph.tensors[t].itemsize
               for t in members)
    out.append(dp.Factor((g,), np.array([price * (n - 1) * size if s == REP else 0.0
                                         for s in states])))
  return tuple(out)


class SumTable:
  """A unit with one joint option: ``table[0, x_1..x_m] = sum_j terms_j[x_(pos_j)]``.

  Every conversion touches one tensor group, so the table is a sum of
  per-group vectors; it is kept as those terms (one factor each), which an op
  with many inputs (an ``IdentityN`` of every gradient) needs: its joint
  table would have one axis per input.  Its shared needs (``needs``, a
  ``1 x m`` matrix of ones) are not in the terms: their variables pay for them.
  """

  def __init__(self, terms: Sequence[tuple[int, np.ndarray]], needs: int = 0):
    self.terms = tuple(terms)
    self.needs = np.ones((1, needs), dtype=bool)

  def __getitem__(self, index) -> np.ndarray:
    return np.array([sum(float(vec[index[1 + pos]]) for pos, vec in self.terms)])


def _sum_table(member_tables, scope, group_of, external: Sequence[tuple] = ()):
  """``(names, SumTable)`` of a unit whose members have one option each; the
  conversions ``external`` (shared needs the unit makes) are left to their variables."""
  by_pos: dict[int, np.ndarray] = {}
  seen = set(external)
  for opts in member_tables:
    for dkey, t, vec in opts[0][1]:
      if dkey in seen:
        continue
      seen.add(dkey)
      pos = scope.index(group_of[t])
      by_pos[pos] = by_pos.get(pos, 0) + vec
  names = (tuple(opts[0][0] for opts in member_tables),)
  return names, SumTable(sorted(by_pos.items()), len(external))


class AxisTable:
  """A unit priced per tensor group: ``table[c, x_1..x_m] = sum_a terms_a[c, x_a]``.

  The same numbers as the dense joint table, kept as one ``combos x states``
  matrix per group of the scope: an op with hundreds of inputs (``AddN`` of
  per-step gradients, ``ConcatV2``, ``Pack``, ``Split``) would need a dense
  table with an axis per input.  In the level's factor graph the unit's
  choice ``c`` becomes a variable of its own with one pairwise factor
  ``(c, group a)`` per term, so the minimum over ``c`` is taken by the
  variable elimination, exactly.  ``needs[c, j]``: combo ``c`` makes the unit's
  shared need ``j``, whose bytes are not in the terms (its variable pays them).
  """

  def __init__(self, combos: int, terms: Sequence[tuple[int, np.ndarray]],
               needs: Optional[np.ndarray] = None):
    self.combos = combos
    self.terms = tuple(terms)
    self.needs = np.zeros((combos, 0), dtype=bool) if needs is None else needs

  def __getitem__(self, index) -> np.ndarray:
    out = np.zeros(self.combos)
    for pos, matrix in self.terms:
      out += matrix[:, index[1 + pos]]
    return out


class ComboNames:
  """``names[c]``: the members' option names of joint option ``c`` (members' options
  in ``itertools.product`` order), computed on demand: a unit of many members has
  millions of combos, of which the level reads one or two."""

  def __init__(self, per_member: Sequence[Sequence[str]]):
    self.per_member = tuple(tuple(names) for names in per_member)
    self.sizes = tuple(len(names) for names in self.per_member)
    self._len = math.prod(self.sizes)

  def __len__(self) -> int:
    return self._len

  def __getitem__(self, c: int) -> tuple[str, ...]:
    c = int(c)
    if not 0 <= c < self._len:
      raise IndexError(f"joint option {c} of {self._len}")  # ends iteration, as a sequence
    out = []
    for names, size in zip(reversed(self.per_member), reversed(self.sizes)):
      c, i = divmod(c, size)  # the last member varies fastest (itertools.product order)
      out.append(names[i])
    return tuple(reversed(out))

  def __eq__(self, other) -> bool:
    return isinstance(other, ComboNames) and self.per_member == other.per_member

  __hash__ = None


def _joint_table(member_tables, scope, domains, group_of, dense: bool = True,
                 external: Sequence[tuple] = ()):
  """``(names per combo, table[combo, *scope])`` with shared conversions paid once.

  With ``used[c, d]`` = 1 when combo ``c`` (members' options in
  ``itertools.product`` order) needs the distinct conversion ``d`` and ``v_d``
  its cost vector over the states of its group's axis ``a(d)``,
  ``table[c, x] = sum_d used[c, d] * v_d[x_a(d)]``: one 0/1 matrix product for
  every axis at once (``v_d`` placed in its axis' columns), exact on these integer
  byte counts.  ``dense=False`` returns the per-axis matrices as an
  :class:`AxisTable` instead of their broadcast sum.  The conversions
  ``external`` (needs shared with other units) are left out of the sums; the
  AxisTable's ``needs`` says which combos make them (``dense`` must be False).
  """
  if external and dense:
    raise ValueError("a table with shared needs is kept per axis (dense=False)")
  column: dict = {}  # conversion -> its column
  axis_of, vecs, option_columns = [], [], []
  for m, opts in enumerate(member_tables):
    per_option = []
    for o, (_, entries) in enumerate(opts):
      cols = []
      for dkey, t, vec in entries:
        # An input conversion is shared by the members needing it; an output's
        # depends on the option that makes it.
        key = dkey if dkey[0] == "in" else (dkey, m, o)
        if key not in column:
          column[key] = len(column)
          axis_of.append(scope.index(group_of[t]))
          vecs.append(vec)
        cols.append(column[key])
      per_option.append(cols)
    option_columns.append(per_option)
  sizes = [len(opts) for opts in member_tables]
  dims = tuple(len(domains[g]) for g in scope)
  choice = np.indices(sizes).reshape(len(sizes), -1)  # member option of each combo
  used = np.zeros((choice.shape[1], len(column)), dtype=bool)
  for m, per_option in enumerate(option_columns):
    mask = np.zeros((len(per_option), len(column)), dtype=bool)
    for o, cols in enumerate(per_option):
      mask[o, cols] = True
    used |= mask[choice[m]]
  # One product for every axis: row d of ``spread`` holds v_d in its axis' columns.
  start = [0]
  for size in dims:
    start.append(start[-1] + size)
  spread = np.zeros((len(column), start[-1]))
  for d, (a, vec) in enumerate(zip(axis_of, vecs)):
    spread[d, start[a]:start[a + 1]] = vec
  ext_columns = [column[d] for d in external]
  spread[ext_columns] = 0.0
  summed = used.astype(float) @ spread
  # A group the table touches through shared needs alone has no term (its variables
  # carry them): an all-zero factor would only widen the DP.
  shared = set(ext_columns)
  external_only = set(axis_of) - {axis_of[d] for d in range(len(column)) if d not in shared}
  terms = [(a, summed[:, start[a]:start[a + 1]]) for a in sorted(set(axis_of) - external_only)]
  names = ComboNames(tuple(tuple(name for name, _ in opts) for opts in member_tables))
  if not dense:
    return names, AxisTable(choice.shape[1], terms, used[:, ext_columns])
  stack = np.zeros((choice.shape[1],) + dims)
  for a, matrix in terms:
    shape = [choice.shape[1]] + [1] * len(dims)
    shape[1 + a] = dims[a]
    stack += matrix.reshape(shape)
  return names, stack


def finish_level(problem: LevelProblem, assignment: Sequence[int], proven_optimal: bool,
                 width: int = 0, fixed_groups: int = 0, gap_bound: float = 0.0) -> LevelResult:
  """Given group states, every op group takes its cheapest joint option (first on ties).

  ``assignment`` gives the groups' states, then the shared needs' variables (the
  DP's); any unit choice variables after them are recomputed: each is its unit's
  cheapest option among those whose shared needs are made.
  """
  groups = len(problem.domains)
  if len(assignment) < groups + problem.shared_needs:
    raise ValueError(f"an assignment of {len(assignment)} variables for {groups} tensor groups "
                     f"and {problem.shared_needs} shared needs")
  full = (list(assignment[:groups + problem.shared_needs]) + [0] * len(problem.aux_sizes))
  choices = {}
  aux = groups + problem.shared_needs
  # Units of one structure share their table and names; with equal scope states
  # (repeated blocks) and shared needs they pick alike: (id of the table, states) -> the pick.
  picked: dict = {}
  unit_needs = problem.unit_needs or ((),) * len(problem.units)
  for (members, scope, names, stack), ys in zip(problem.units, unit_needs):
    at = tuple(full[g] for g in scope)
    made = tuple(full[y] for y in ys)
    key = (id(stack), id(names), at, made)
    got = picked.get(key)
    if got is None:
      vec = stack[(slice(None),) + at]
      if not all(made):  # a combo making a shared need whose variable is 0 is not allowed
        vec = np.where(stack.needs[:, [j for j, y in enumerate(made) if not y]].any(axis=1),
                       np.inf, vec)
      order = np.argsort(vec, kind="stable")
      best = int(order[0])
      alt = int(order[1]) if len(order) > 1 and np.isfinite(vec[order[1]]) else None
      got = picked[key] = (
          best, names[best], float(vec[best]),
          None if alt is None else names[alt], None if alt is None else float(vec[alt]))
    best, best_names, best_cost, alt_names, alt_cost = got
    if isinstance(stack, AxisTable):
      full[aux] = best
      aux += 1
    for m, op in enumerate(members):
      choices[op.name] = Choice(best_names[m], best_cost,
                                None if alt_names is None else alt_names[m], alt_cost)
  states = tuple(problem.domains[g][assignment[g]] for g in range(groups))
  return LevelResult(n=problem.n, group_states=states, choices=choices,
                     objective=dp.evaluate(problem.factors, full),
                     proven_optimal=proven_optimal, width=width, fixed_groups=fixed_groups,
                     gap_bound=gap_bound)


def solve_level(graph: SearchGraph, groups: Sequence[Sequence[str]], contexts: Mapping[str, object],
                shapes: Mapping[str, tuple], n: int, describer: Describer,
                allowed: Mapping[int, tuple[State, ...]], allow_rep: bool = False,
                forced_ops: Mapping[str, str] = {}, max_table: int = 1 << 20,
                storage_price: float = 0.0, cache: Optional[PricingCache] = None,
                split_work: bool = False, needs_once: bool = False) -> LevelResult:
  """Builds the level's factors (with the memory term at ``storage_price``; ``split_work``
  as for :func:`build_level`) and solves them exactly with ``dp.solve``; the result's
  objective is the level's bytes.  With ``needs_once`` a need several op groups make
  is priced once if the DP stays exact with their variables, else (and by default)
  once per op group (module docstring, "Shared needs")."""
  cache = cache if cache is not None else PricingCache(n)
  for once in (True, False) if needs_once else (False,):
    problem = build_level(graph, groups, contexts, shapes, n, describer, allowed, allow_rep,
                          forced_ops, storage_price, cache, split_work, once)
    # With shared needs (the exact bytes) the DP must be exact, else each unit pays its own.
    exact_only = once and problem.shared_needs > 0
    key = (id(problem), max_table, exact_only)
    if key not in cache.solutions:
      sizes, factors = problem.variable_sizes(), problem.factors + problem.penalties
      sol = None
      # Too wide is told symbolically (dp.fits), before any table is built.
      if not exact_only or dp.fits(sizes, factors, max_table):
        sol = dp.solve(sizes, factors, max_table=max_table, exact_only=exact_only)
      cache.solutions[key] = (problem, sol)
    sol = cache.solutions[key][1]
    if sol is not None:
      break
  res = finish_level(problem, sol.assignment, sol.proven_optimal, sol.width, len(sol.fixed),
                     sol.cost - sol.lower_bound)
  how = ONCE if once else TOO_WIDE if needs_once else PER_GROUP
  return dataclasses.replace(res, needs=how)
