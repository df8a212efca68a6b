"""Symbolic interval analysis: from a TDL description to partition strategies.

docs/method.md section 4.  Every index variable ``v`` ranges over ``[0, V)``.  To cut
``v`` n ways, worker ``w`` takes ``v`` in its block ``[lo_w, hi_w)`` (see
``regions.block``) while every other variable keeps its full range.  Each
access ``T[e_1, ..., e_r]`` then reaches, on dim ``d``, the interval

    [min e_d, max e_d]  over  v in [lo_w, hi_w - 1], u in [0, U - 1] (u != v),

computed exactly by interval arithmetic on the affine (and monotone division)
expressions.  A worker's region of ``T`` is the hull of its accesses, clamped
to the tensor (a guarded access reads pad values outside; the amount clamped
off is the padding the worker's sub-op must supply).

The strategy's outputs follow from where ``v`` occurs:

* ``v`` indexes output dim ``d`` (as the major variable of that dim): the
  output is ``Cut(d)``, provided the worker blocks of ``v`` map onto the
  canonical blocks of the dim;
* ``v`` is reduced in the output and the output is *linear* in that sum
  (only sums, negation, and products or quotients by ``v``-free factors lie
  between the output and the reducer): the output is ``PARTIAL``;
* ``v`` does not occur in the output: ``REP``.

Any other combination (``v`` under Max, Exp of a sum, an opaque variable) is
not a strategy; nor is a cut of ``v`` when, on an input dim that ``v``
indexes, another access reads beyond ``v``'s range (``exp(x[i, j]) /
Sum_k exp(x[i, k])`` cannot cut ``j``): the same kernel run on that wider
region would compute more than the worker's share.  The op's element-wise-ness, reduction variables and
cuttable dims are read off the same description (:func:`facts`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.description import Semantics, WorkerView
from tf_tofu.core.regions import Pool, Region, block
from tf_tofu.core.states import PARTIAL, REP, Cut, State
from tf_tofu.opdefs.strategy import InputNeed, Strategy


@dataclasses.dataclass(frozen=True)
class OpFacts:
  """What the description says about an op, independent of n."""

  output_vars: tuple[str, ...]
  reduction_vars: tuple[str, ...]
  opaque_vars: tuple[str, ...]
  elementwise: bool
  cuttable_dims: tuple[tuple[int, ...], ...]  # per output, the dims some strategy cuts


def all_vars(sem: Semantics) -> tuple[tdl.Var, ...]:
  """Every index variable of the description, output variables first, in order."""
  seen: dict[str, tdl.Var] = {}

  def add(v: tdl.Var):
    if v.name in seen and seen[v.name] != v:
      raise sem.op.fail(f"two index variables are named {v.name!r} "
                        f"(extents {seen[v.name].extent} and {v.extent})")
    seen.setdefault(v.name, v)

  for out in sem.outputs:
    for v in out.output_vars():
      add(v)
  for out in sem.outputs:
    for node in tdl.walk(out.body):
      if isinstance(node, tdl.Reduce):
        for v in node.vars:
          add(v)
      elif isinstance(node, tdl.Access):
        for v in sorted(node.vars(), key=lambda x: x.name):
          add(v)
  return tuple(seen.values())


def work(sem: Semantics) -> int:
  """The op's iteration space, ``prod(extent of every index variable)``: how many times
  the body runs (an output element per output variable point, a term per reduction
  variable point).  MatMul (m, k) x (k, n): ``m n k``; an elementwise op: its output's
  size."""
  return math.prod(v.extent for v in all_vars(sem))


def _opaque_vars(sem: Semantics) -> set:
  return {v for out in sem.outputs for node in tdl.walk(out.body)
          if isinstance(node, tdl.Opaque) for v in node.over}


def _references(value: tdl.Value, v: tdl.Var) -> bool:
  for node in tdl.walk(value):
    if isinstance(node, tdl.Access) and v in node.vars():
      return True
    if isinstance(node, tdl.Reduce) and v in node.vars:
      return True
    if isinstance(node, tdl.Opaque) and v in node.over:
      return True
  return False


def _linear_in_sum(value: tdl.Value, v: tdl.Var) -> bool:
  """True when cutting reduction variable ``v`` leaves ``value`` a sum of partials."""
  if isinstance(value, tdl.Reduce):
    if v in value.vars:
      return value.reducer == "sum"
    return value.reducer == "sum" and _linear_in_sum(value.body, v)
  if isinstance(value, tdl.Apply):
    refs = [_references(a, v) for a in value.args]
    if value.fn in ("add", "sub"):
      return all(refs) and all(_linear_in_sum(a, v) for a in value.args)
    if value.fn == "neg":
      return _linear_in_sum(value.args[0], v)
    if value.fn == "mul":
      return sum(refs) == 1 and all(_linear_in_sum(a, v)
                                    for a, r in zip(value.args, refs) if r)
    if value.fn == "div":
      return refs[0] and not refs[1] and _linear_in_sum(value.args[0], v)
  return False


def _full_env(vars_: tuple[tdl.Var, ...]) -> dict:
  return {v: (0, v.extent - 1) for v in vars_}


def _access_bounds(acc: tdl.Access, env: dict) -> list[tuple[int, int]]:
  """Unclamped inclusive range of every dim of one access."""
  out = []
  for d, e in enumerate(acc.index):
    out.append((0, acc.shape[d] - 1) if isinstance(e, tdl._Full) else e.interval(env))
  return out


def check_bounds(sem: Semantics, prepared: Optional["_Prepared"] = None) -> None:
  """Raises if an unguarded access can leave its input over the full ranges
  (``prepared``: the description's :class:`_Prepared`, which holds those ranges)."""
  prep = prepared if prepared is not None else _Prepared(sem)
  for k, acc, bounds in prep.checked:
    if acc.guarded or any(v.extent == 0 for v in acc.vars()):
      continue
    for d, (lo, hi) in enumerate(bounds):
      if lo < 0 or hi >= acc.shape[d]:
        raise sem.op.fail(
            f"output {k}: unguarded access {acc!r} reaches [{lo}, {hi}] on dim {d} of "
            f"an input of size {acc.shape[d]}; guard it with .at(...) or fix the index")


def _output_state(out: tdl.Output, shape: tuple[int, ...], dims_of: dict, v: tdl.Var,
                  n: int) -> Optional[tuple[State, tuple]]:
  """The output's state under cutting ``v`` and, for a cut, the worker ranges on its dim
  (``shape``: the output's; ``dims_of``: per variable, the output dims it indexes)."""
  hits = dims_of.get(v, ())
  if len(hits) > 1:
    return None
  if hits:
    d = hits[0]
    dim = out.dims[d]
    pos = dim.index(v)
    if any(u.extent != 1 for u in dim[:pos]):
      return None  # a minor variable of a composite dim gives strided pieces
    stride = math.prod(u.extent for u in dim[pos + 1:])
    size = shape[d]
    ranges = []
    for w in range(n):
      lo, hi = block(v.extent, n, w)
      if (lo * stride, hi * stride) != block(size, n, w):
        return None  # blocks of v do not land on the dim's canonical blocks
      ranges.append((lo * stride, hi * stride))
    return Cut(d), tuple(ranges)
  if _references(out.body, v):
    return (PARTIAL, ()) if _linear_in_sum(out.body, v) else None
  return REP, ()


class _Prepared:
  """What :func:`strategy_for` and :func:`check_bounds` read of a description whatever
  variable is cut, derived once for all of them (a wide op's body, an AddN of 256
  inputs, is walked once, not once per variable): the variables, the opaque ones,
  per output its shape, whole box and the dims each variable indexes, and per
  input its accesses with their bounds over the full ranges and, per dim, the
  variables of the index (None for a whole dim)."""

  __slots__ = ("vars", "opaque", "full", "accesses", "checked", "out_shapes", "whole_outs",
               "dims_of")

  def __init__(self, sem: Semantics):
    self.vars = all_vars(sem)
    self.opaque = _opaque_vars(sem)
    self.full = _full_env(self.vars)
    self.out_shapes = tuple(out.shape for out in sem.outputs)
    self.whole_outs = tuple(tuple((0, d) for d in shape) for shape in self.out_shapes)
    self.dims_of: list[dict] = []
    for out in sem.outputs:
      dims_of: dict = {}
      for d, dim in enumerate(out.dims):
        for v in dict.fromkeys(dim):
          dims_of.setdefault(v, []).append(d)
      self.dims_of.append(dims_of)
    self.accesses: dict[int, _InputAccesses] = {}
    self.checked: list[tuple[int, tdl.Access, list]] = []
    for k, out in enumerate(sem.outputs):
      for acc in tdl.accesses(out.body):
        bounds = _access_bounds(acc, self.full)
        index_vars = tuple(None if isinstance(e, tdl._Full) else e.vars() for e in acc.index)
        if acc.input not in self.accesses:
          self.accesses[acc.input] = _InputAccesses(sem.op.inputs[acc.input].shape)
        self.accesses[acc.input].add(acc, bounds, index_vars)
        self.checked.append((k, acc, bounds))
    for prepared in self.accesses.values():
      prepared.finish()


def strategy_for(sem: Semantics, var: tdl.Var, n: int, prepared: Optional[_Prepared] = None,
                 pool: Optional[Pool] = None) -> Optional[Strategy]:
  """The strategy that cuts ``var`` n ways, or None if cutting it is not sound
  (``prepared``: the description's :class:`_Prepared`, when cutting several variables;
  ``pool``: where its boxes come from, one object per distinct box)."""
  prep = prepared if prepared is not None else _Prepared(sem)
  pool = pool if pool is not None else Pool()
  if var.extent < n or var in prep.opaque:
    return None
  out_states: list[State] = []
  out_ranges: list[tuple] = []
  for out, shape, dims_of in zip(sem.outputs, prep.out_shapes, prep.dims_of):
    got = _output_state(out, shape, dims_of, var, n)
    if got is None:
      return None
    out_states.append(got[0])
    out_ranges.append(got[1])
  kind = "output" if any(isinstance(s, Cut) for s in out_states) else "reduce"
  op = sem.op
  n_inputs = len(op.inputs)
  accs = prep.accesses
  # Per input: None (a meta input nobody reads), a Region (read whole by every
  # worker), or the accesses prepared for cutting var.
  inputs: list = []
  for i in range(n_inputs):
    shape = op.inputs[i].shape
    if i not in accs:
      inputs.append(None if i in sem.meta_inputs else pool.whole(shape))
    else:
      inputs.append(_InputReads(accs[i], var))
  whole_outs = prep.whole_outs

  no_padding = {i: ((0, 0),) * len(r.intervals) for i, r in enumerate(inputs)
                if isinstance(r, Region)}  # a replicated input's, the same for every worker
  workers = []
  regions_per_input: list[list[Region]] = [[] for _ in range(n_inputs)]
  env = dict(prep.full)
  for w in range(n):
    lo, hi = block(var.extent, n, w)
    env[var] = (lo, hi - 1)
    in_regions: list[Optional[Region]] = []
    in_pads: list = []
    for i, reads in enumerate(inputs):
      if reads is None:
        in_regions.append(None)
        in_pads.append(None)
      elif isinstance(reads, Region):  # replicated
        in_regions.append(reads)
        in_pads.append(no_padding[i])
      else:
        got = reads.region(env, pool)
        if got is None:
          return None
        in_regions.append(got[0])
        in_pads.append(got[1])
        regions_per_input[i].append(got[0])
    outs = []
    for whole, st, rng in zip(whole_outs, out_states, out_ranges):
      if isinstance(st, Cut):  # worker w's block on the cut dim, else the whole output
        bounds = list(whole)
        bounds[st.dim] = rng[w]
        outs.append(pool.region(tuple(bounds)))
      else:
        outs.append(pool.region(whole))
    workers.append(WorkerView(w=w, n=n, var=var.name, var_block=(lo, hi),
                              var_extent=var.extent, input_regions=tuple(in_regions),
                              input_padding=tuple(in_pads), output_regions=tuple(outs)))

  needs: list[Optional[InputNeed]] = []
  for i, reads in enumerate(inputs):
    if reads is None:
      needs.append(None)
      continue
    regs = [reads] * n if isinstance(reads, Region) else regions_per_input[i]
    needs.append(InputNeed(_classify(regs, pool.whole(op.inputs[i].shape), n), tuple(regs)))
  return Strategy(var=var.name, kind=kind, n=n, inputs=tuple(needs),
                  outputs=tuple(out_states), workers=tuple(workers))


def _clamped(a: int, b: int, size: int) -> tuple[tuple[int, int], tuple[int, int]]:
  """The inclusive access range ``[a, b]`` clamped to ``[0, size)`` as half-open bounds,
  and how far it reaches outside: the padding."""
  lo, hi = max(0, a), min(size, b + 1)
  if lo >= size or hi <= lo:  # empty
    return ((size, size) if lo >= size else (lo, lo)), (0, 0)
  return (lo, hi), (max(0, -a), max(0, b + 1 - size))


class _InputAccesses:
  """One input's accesses, prepared for cutting any variable: per access its bounds over
  the full ranges and per dim the variables of its index (None for a whole dim);
  per dim the variables that index it in some access (``dim_vars``), and the hull of
  every access's bounds there, clamped to the shape (``bounds``, ``pads``: what a
  worker reads on a dim the cut variable does not index)."""

  __slots__ = ("shape", "reads", "dim_vars", "bounds", "pads")

  def __init__(self, shape: tuple[int, ...]):
    self.shape = shape
    self.reads: list[tuple[tdl.Access, list, tuple]] = []

  def add(self, acc: tdl.Access, bounds: list, index_vars: tuple) -> None:
    self.reads.append((acc, bounds, index_vars))

  def finish(self) -> None:
    rank = len(self.shape)
    self.dim_vars = tuple(frozenset().union(*(iv[d] for _, _, iv in self.reads
                                                if iv[d] is not None))
                          for d in range(rank))
    self.bounds, self.pads = [], []
    for d in range(rank):
      bounds, pads = _clamped(*_hull(b[d] for _, b, _ in self.reads), self.shape[d])
      self.bounds.append(bounds)
      self.pads.append(pads)


def _hull(ranges) -> Optional[tuple[int, int]]:
  """The smallest inclusive range holding every one of ``ranges`` (None for none)."""
  out = None
  for lo, hi in ranges:
    out = (lo, hi) if out is None else (min(out[0], lo), max(out[1], hi))
  return out


class _InputReads:
  """One input's accesses prepared for cutting ``var``.  A worker reads the hull of
  the accesses, clamped to the shape (what falls outside is padding).  On a dim that
  no access indexes by ``var`` the hull is the same for every worker (the prepared
  ``bounds`` and ``pads``); on the others (``varying``: the dim, its expressions in
  ``var``, and the hull of the other accesses' bounds there) it is evaluated per
  worker."""

  __slots__ = ("shape", "bounds", "pads", "varying", "same")

  def __init__(self, prepared: _InputAccesses, var: tdl.Var):
    self.shape = prepared.shape
    self.bounds, self.pads = prepared.bounds, prepared.pads
    self.varying = []
    for d, vs in enumerate(prepared.dim_vars):
      if var in vs:
        exprs = tuple(acc.index[d] for acc, _, iv in prepared.reads
                      if iv[d] is not None and var in iv[d])
        fixed = _hull(b[d] for _, b, iv in prepared.reads if iv[d] is None or var not in iv[d])
        self.varying.append((d, exprs, fixed))
    self.same = None  # every worker's (region, padding) when no dim varies

  def region(self, env: dict, pool: Pool):
    """``(region, padding)`` a worker reads under ``env``, or None when cutting the
    variable is not sound for this input: another access reads beyond var's range on
    a dim var cuts (a softmax's normaliser over the row), so the same op run on that
    region would compute more than the worker's share."""
    if not self.varying:
      if self.same is None:
        self.same = (pool.region(tuple(self.bounds)), tuple(self.pads))
      return self.same
    bounds, pads = list(self.bounds), list(self.pads)
    for d, exprs, fixed in self.varying:
      lo, hi = exprs[0].interval(env)
      for e in exprs[1:]:
        a, b = e.interval(env)
        lo, hi = min(lo, a), max(hi, b)
      if fixed is not None and (fixed[0] < lo or fixed[1] > hi):
        return None
      bounds[d], pads[d] = _clamped(lo, hi, self.shape[d])
    return pool.region(tuple(bounds)), tuple(pads)


def _classify(regions: list[Region], whole: Region, n: int):
  """REP when every worker reads the whole input, Cut(d) when worker w reads block w
  of dim d and the whole of every other dim, else None (``regions`` and ``whole`` from
  one ``regions.Pool``, so equal boxes, and equal intervals, are one object)."""
  if all(r is whole for r in regions):
    return REP
  # Block 0 of a cut dim differs from the whole dim unless the dim has one element.
  wiv = whole.intervals
  first = regions[0].intervals
  dims = [d for d, iv in enumerate(wiv) if first[d] is not iv]
  for d in (dims if len(dims) == 1 else () if dims else range(len(wiv))):
    size, before, after = wiv[d].hi, wiv[:d], wiv[d + 1:]
    for w, r in enumerate(regions):
      ivs = r.intervals
      if ((ivs[d].lo, ivs[d].hi) != block(size, n, w) or ivs[:d] != before
          or ivs[d + 1:] != after):
        break
    else:
      return Cut(d)
  return None


def strategies(sem: Semantics, n: int, pool: Optional[Pool] = None) -> tuple[Strategy, ...]:
  """Every sound strategy cutting one index variable of ``sem`` n ways (n >= 2), its
  boxes from ``pool`` (one object per distinct box; a new pool when None).

  The replicated execution (every worker runs the whole op) is always valid
  and is not listed here; the search adds it.
  """
  pool = pool if pool is not None else Pool()
  if n < 2:
    raise ValueError(f"strategies are for n >= 2 workers, got n={n}")
  prep = _Prepared(sem)
  check_bounds(sem, prep)
  out = []
  for v in prep.vars:
    s = strategy_for(sem, v, n, prep, pool)
    if s is not None:
      out.append(s)
  return tuple(out)


def is_elementwise(sem: Semantics) -> bool:
  """Every output is ``f(inputs at the output's own index)``, NumPy-broadcast: one
  shape of outputs, each input dim indexed by the output's dim (or size 1)."""
  first = sem.outputs[0].dims if sem.outputs else ()
  for out in sem.outputs:
    if out.dims != first or any(len(d) != 1 for d in out.dims):
      return False
    dims = [d[0] for d in out.dims]
    for node in tdl.walk(out.body):
      if isinstance(node, (tdl.Reduce, tdl.Opaque)):
        return False
      if isinstance(node, tdl.Access):
        offset = len(dims) - len(node.index)
        if offset < 0:
          return False
        for d, e in enumerate(node.index):
          if isinstance(e, tdl._Full):
            return False
          own = dims[offset + d]
          if e.terms == ((own, 1),) and e.const == 0:
            continue
          if not e.terms and e.const == 0 and node.shape[d] == 1:
            continue  # broadcast of a size-1 dim
          return False
  return True


def elementwise_key(sem: Semantics) -> tuple:
  """What :func:`strategies` reads of an element-wise description (:func:`is_elementwise`):
  the output dims (their variables and extents), the set of accesses (input, index,
  shape, guard: a worker reads the hull of an input's accesses), the input shapes
  and the constant inputs.

  Every variable of such a description indexes an output dim, so each cut is
  ``Cut(d)`` of the outputs and the function applied to the values read (add,
  div, ...) decides nothing: element-wise descriptions of equal keys have equal
  strategies for every n.
  """
  return (tuple(out.dims for out in sem.outputs),
          frozenset((a.input, a.index, a.shape, a.guarded)  # a hull: order and repeats
                    for out in sem.outputs for a in tdl.accesses(out.body)),  # do not count
          tuple(t.shape for t in sem.op.inputs), sem.meta_inputs)


def facts(sem: Semantics) -> OpFacts:
  """Element-wise-ness, reduction variables and cuttable dims, read off the lambda."""
  prep = _Prepared(sem)
  vars_ = prep.vars
  out_vars = {v for o in sem.outputs for v in o.output_vars()}
  opaque = prep.opaque
  cuttable: list[set] = [set() for _ in sem.outputs]
  for v in vars_:
    s = strategy_for(sem, v, 2, prep)
    for k, st in enumerate(s.outputs if s else ()):
      if isinstance(st, Cut):
        cuttable[k].add(st.dim)
  return OpFacts(
      output_vars=tuple(v.name for v in vars_ if v in out_vars),
      reduction_vars=tuple(v.name for v in vars_ if v not in out_vars),
      opaque_vars=tuple(sorted(v.name for v in opaque)),
      elementwise=is_elementwise(sem),
      cuttable_dims=tuple(tuple(sorted(c)) for c in cuttable))
