"""Gradient op -> forward op: which forward op each backward op of a training step differentiates.

TF's gradient of op f reads the adjoints of f's outputs and tensors of f itself
(its inputs or outputs), and produces contributions of the shapes of f's
inputs; a contribution to x feeds the gradient of x's producer, or the
``AddN`` summing x's contributions.  Backward ops are visited in topological
order.  A backward tensor u made in the gradient of A can be read by

* A's own gradient (u is *internal*), or
* the gradient of p, the producer of an input x of A with u's shape (u is a
  *contribution* to x), or of an op feeding p through ops whose gradient passes
  the adjoint on unchanged (Identity, AddV2, BiasAdd's value, ...).

A backward op's candidates are the intersection of those sets over its
backward inputs, ranked by the forward tensors it reads (f's outputs count
twice, f's inputs once: ``ReluGrad(dy, y)`` belongs to the Relu that made y,
not to the MatMul that read y).  An op reading no forward tensor (``Sum``,
``BiasAddGrad``, ``Reshape``, ``Neg``, ``Tile``) stays in A's gradient while its
input is internal there -- the reshape of a ``Sum``, the sum of a
broadcasting op's raw product, the 1/N after a Mean's ``Tile`` -- and moves on
once its input is complete (it has the shape of an input of A, or a sibling
reader left A's gradient), to the first forward op along the chain whose inputs
have the shape of what it makes.  Symmetric branches (the two terms of a
residual sum) are told apart by the forward tensors their readers read.  An
``AddN`` of contributions from different gradients is the accumulation of the
common tensor (a variable read several times: its first read).  Backward
``Identity`` ops (reshapes Grappler folded) are transparent.  Ops computing
from forward tensors only (``Mul(x, 2)`` for Square) join the op reading them;
ops reading only constants join their readers' forward op.  The rest is
reported as unattached.  ``gradient_tape/<scope>/`` names only break ties.

The rules are heuristics about the shape of TF's gradient functions; on the
model zoo they are checked against the tape's own record (tests/test_grad_attach.py).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Mapping, Optional, Sequence

GATHER_OPS = frozenset({"GatherV2", "Gather", "ResourceGather"})
# Ops whose gradient reduces over broadcast dims: reshape(reduce_sum(...), input shape).
BROADCASTING = frozenset({
    "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "MulNoNan", "Maximum",
    "Minimum", "SquaredDifference", "Pow", "Xdivy", "Xlogy", "Atan2", "SelectV2",
    "BatchMatMulV2", "BatchMatMulV3"})
# Inputs (by position) to which the op's gradient passes the output adjoint
# unchanged whenever the input has the output's shape.
PASS_THROUGH = {
    "Identity": (0,), "Snapshot": (0,), "EnsureShape": (0,), "CheckNumerics": (0,),
    "AddV2": (0, 1), "Add": (0, 1), "Sub": (0,), "BiasAdd": (0,), "BiasAddV1": (0,),
    "AddN": None,  # every input
}
IDENTITY_OPS = ("Identity", "Snapshot")
GRADIENT_SCOPES = ("gradient_tape/", "gradients/")


def real(dtype: Optional[str]) -> bool:
  """Whether a dtype name is real- or complex-valued (what gradients are)."""
  return bool(dtype) and dtype.startswith(("float", "bfloat", "half", "complex"))


def _scope(name: str) -> str:
  return name.rsplit("/", 1)[0] if "/" in name else ""


def hint_scope(name: str) -> Optional[str]:
  """What a gradient op's name points at, if it has a gradient scope.

  ``gradient_tape/<scope>/...`` (GradientTape) names the forward op's name
  scope; ``gradients/<op>_grad/...`` (``tf.gradients``) names the forward op:
  returned as ``"<op>_grad"``.
  """
  for marker in GRADIENT_SCOPES:
    k = name.find(marker)
    if k == 0 or (k > 0 and name[k - 1] == "/"):
      rest = name[k + len(marker):]
      parts = rest.split("/")
      for j, part in enumerate(parts[:-1]):
        if part.endswith("_grad"):
          return "/".join(parts[:j] + [part])
      return _scope(rest)
  return None


def hint_matches(op: str, forward_op: str) -> bool:
  """Whether ``forward_op`` is where gradient op ``op``'s name points."""
  hint = hint_scope(op)
  if hint is None:
    return False
  if hint.endswith("_grad"):
    return forward_op == hint[:-5]
  return _scope(forward_op) == hint


@dataclasses.dataclass(frozen=True)
class Regions:
  """What the attachment reads of the links' analysis of the step."""

  sk: Any                     # links.Skeleton: the dataflow
  pos: Mapping[str, int]      # op -> topological position
  forward: set                # ops of the forward region
  backward: Sequence[str]     # ops of the backward region, in topological order
  handle_set: set             # variable handle ops
  reads: Mapping[str, list]   # handle -> the ops reading its variable
  resource_of_read: Mapping[str, str]  # reading op -> handle
  var_info: Mapping[str, tuple]        # handle -> (shape, dtype)
  gradient_tensors: set       # each variable's gradient tensor


class Attacher:
  """The attachment of one step's backward ops (see the module docstring); ``attach``
  fills ``owner`` (backward op -> forward op) and ``gradient_of_map`` (forward tensor ->
  its adjoint)."""

  def __init__(self, regions: Regions):
    self.sk, self.pos, self.forward = regions.sk, regions.pos, regions.forward
    self.backward = list(regions.backward)
    self.backward_set = set(self.backward)
    self.handle_set, self.reads = regions.handle_set, regions.reads
    self.resource_of_read, self.var_info = regions.resource_of_read, regions.var_info
    self.gradient_tensors = regions.gradient_tensors
    self.owner: dict = {}
    self.adjoint_kind: dict = {}     # backward tensor -> forward tensor it is the full adjoint of
    self.aggregate: dict = {}        # forward tensor -> aggregated adjoint tensor
    self._expand_cache: dict = {}
    self.pending: set = set()
    self.alias: dict = {}            # output of a backward Identity -> the tensor it renames
    self.identities: set = set()
    self.gradient_of_map: dict = {}

  def is_const(self, op: str) -> bool:
    return self.sk.op_type[op] == "Const"

  def fwd_tensors_of(self, f: str) -> tuple[set, set]:
    return set(self.sk.inputs[f]), set(self.sk.outputs[f])

  def forward_inputs(self, op: str) -> list[str]:
    """Data inputs of ``op`` produced in the forward region (constants the forward reads too)."""
    sk = self.sk
    return [t for t in sk.inputs[op] if sk.producer[t] in self.forward]

  def closure(self, x: str, depth: int = 12) -> list[tuple[str, tuple[str, ...]]]:
    """Forward ops whose gradient may read an adjoint of x: x's producer, then through
    pass-through ops.  Each with the chain of tensors passed through."""
    sk = self.sk
    out, frontier, seen = [], [(x, (x,))], set()
    while frontier and depth > 0:
      depth -= 1
      nxt = []
      for t, path in frontier:
        p = sk.producer[t]
        if p in seen or p not in self.forward or self.is_const(p) or p in self.handle_set:
          continue
        seen.add(p)
        out.append((p, path))
        typ = sk.op_type[p]
        if typ in PASS_THROUGH:
          idx = PASS_THROUGH[typ]
          ins = sk.inputs[p]
          for k in (range(len(ins)) if idx is None else idx):
            if k < len(ins) and sk.shape.get(ins[k]) == sk.shape.get(t) and sk.dtype.get(
                ins[k]) == sk.dtype.get(t):
              nxt.append((ins[k], path + (ins[k],)))
      frontier = nxt
    return out

  def expand(self, u: str) -> list[tuple[str, Optional[tuple[str, ...]]]]:
    """Candidate owners of a reader of backward tensor u, nearest first.

    Each with the forward tensors u would be the adjoint (contribution) of
    (None: u is internal to the owner's gradient).
    """
    key = u
    if key in self._expand_cache:
      return self._expand_cache[key]
    sk = self.sk
    a = self.owner[sk.producer[u]]
    adj_of = self.adjoint_kind.get(u)
    cands: list = []
    if adj_of is not None:
      cands = [(p, path) for p, path in self.closure(adj_of)]
    else:
      cands.append((a, None))
      ushape, udtype = sk.shape.get(u), sk.dtype.get(u)
      seen = {a}
      for x in sk.inputs[a]:
        if sk.shape.get(x) != ushape or sk.dtype.get(x) != udtype:
          continue
        for p, path in self.closure(x):
          if p not in seen:
            seen.add(p)
            cands.append((p, path))
    self._expand_cache[key] = cands
    return cands

  def evidence_score(self, f: str, fins: Sequence[str]) -> int:
    ins, outs = self.fwd_tensors_of(f)
    return sum(2 if t in outs else (1 if t in ins else 0) for t in fins)

  def shape_match(self, f: str, c: str, exclude: Sequence[str] = ()) -> bool:
    """Whether c's first output looks like a contribution to an input of f.

    Equal shapes, or equal once size-1 dims are dropped (a keep-dims Sum before
    its Reshape), or, for a gather, the shape of its IndexedSlices values.
    Inputs in ``exclude`` do not count.
    """
    sk = self.sk
    if not sk.outputs[c]:
      return False
    t = sk.outputs[c][0]
    s, d = sk.shape.get(t), sk.dtype.get(t)
    if s is None:
      return False
    squeezed = tuple(x for x in s if x != 1)
    for x in sk.inputs[f]:
      if x in exclude or sk.dtype.get(x) != d or sk.shape.get(x) is None:
        continue
      xs = tuple(sk.shape[x])
      if xs == tuple(s) or tuple(v for v in xs if v != 1) == squeezed:
        return True
    if sk.op_type[f] in GATHER_OPS:
      params_shape = self._gather_params_shape(f)
      idx = [x for x, n in zip(sk.inputs[f], sk.input_arg_names.get(f, ())) if n == "indices"]
      if params_shape is not None and idx and sk.shape.get(idx[0]) is not None:
        n = 1
        for dim in sk.shape[idx[0]]:
          n *= dim
        if tuple(s) == (n,) + tuple(params_shape[1:]):
          return True
    return False

  def _gather_params_shape(self, f: str):
    sk = self.sk
    if sk.op_type[f] == "ResourceGather":
      h = self.resource_of_read.get(f)
      return tuple(self.var_info[h][0]) if h else None
    return sk.shape.get(sk.inputs[f][0]) if sk.inputs[f] else None

  def hint_pick(self, op: str, cands: Sequence[str]) -> list[str]:
    """The candidates the op's name points at (all of them if it points nowhere)."""
    matched = [c for c in cands if hint_matches(op, c)]
    return matched or list(cands)

  def attach(self):
    """Assigns every backward op to a forward op (see the module docstring).

    Backward ops reading no backward tensor are *roots*.  A root that reaches
    every variable's gradient and shares the most tensors with exactly one
    forward op is where the adjoint starts (the loss seed, read with a forward
    tensor).  Other roots compute from forward tensors only (``Mul(x, 2)`` of
    Square's gradient) or cannot tell which of several readers of x they serve;
    they stay *pending*, as do ops reading only pending tensors: their forward
    tensors count as evidence for the op that reads them, and they join that
    op's forward op at the end.  Roots reading only constants join their
    readers' forward op.
    """
    sk = self.sk
    reach = self.gradient_reach()
    root_reach = max((bin(reach.get(c, 0)).count("1") for c in self.backward
                      if not any(sk.producer[t] in self.backward_set for t in sk.inputs[c])),
                     default=0)
    deferred = []
    identities = []
    for c in self.backward:
      owned_in = [self.src(t) for t in sk.inputs[c] if sk.producer[t] in self.backward_set
                  and self.owner.get(sk.producer[t])]
      pending_in = [t for t in sk.inputs[c] if sk.producer[t] in self.pending]
      fins = self.forward_inputs(c)
      if sk.op_type[c] in IDENTITY_OPS and len(owned_in) == 1 and not fins and not pending_in:
        # Transparent: readers see the renamed tensor; its owner is settled at the end.
        for t in sk.outputs[c]:
          self.alias[t] = owned_in[0]
        self.owner[c] = self.owner[sk.producer[owned_in[0]]]
        identities.append(c)
        continue
      if not owned_in:
        if not fins and not pending_in:
          deferred.append(c)
          continue
        best = self.root_candidates(c, fins) if fins else []
        if len(best) == 1 and bin(reach.get(c, 0)).count("1") >= root_reach:
          self.owner[c] = best[0]  # where the adjoint starts
        else:
          self.pending.add(c)  # a side computation, or not yet decidable
        continue
      evidence = list(fins) + self.pending_evidence(pending_in)
      self.owner[c] = self.choose(c, owned_in, evidence)
      if sk.op_type[c] == "AddN" and self.owner[c] is not None:
        self.mark_aggregation(c, owned_in)
    for c in reversed([op for op in self.backward if op in self.pending]):
      readers = [d for t in sk.outputs[c] for d, _ in sk.consumers.get(t, ())
                 if self.owner.get(d)]
      self.owner[c] = (self.owner[min(readers, key=self.pos.get)] if readers
                       else self.root_owner(c, self.forward_inputs(c)
                                            + self.pending_evidence(sk.inputs[c])))
    for c in reversed(deferred):
      self.owner[c] = self.deferred_owner(c)
    for c in reversed(identities):
      self.owner[c] = self.identity_owner(c)
    self.identities = set(identities)
    self.record_adjoints()

  def src(self, t: str) -> str:
    """The tensor a backward Identity chain renames (t itself if none)."""
    while t in self.alias:
      t = self.alias[t]
    return t

  def readers(self, t: str) -> list[str]:
    """Backward ops reading t, looking through backward Identity ops."""
    out, stack = [], [t]
    while stack:
      x = stack.pop()
      for d, _ in self.sk.consumers.get(x, ()):
        if d not in self.backward_set:
          continue
        if self.sk.outputs[d] and self.sk.outputs[d][0] in self.alias:
          stack.extend(self.sk.outputs[d])
        else:
          out.append(d)
    return out

  def identity_owner(self, c: str) -> Optional[str]:
    """A backward Identity is a folded Reshape/Tile/Sum/RealDiv: of its producer's
    gradient after a Sum or before an op reading forward tensors, else of its reader's."""
    sk = self.sk
    u = self.src(sk.outputs[c][0])
    mine = self.owner.get(sk.producer[u])
    named = self.hint_pick(c, [p for p, _ in self.expand(u)])
    if len(named) == 1 and hint_matches(c, named[0]):
      return named[0]  # structure cannot tell; the name can
    if sk.op_type[sk.producer[u]] == "Sum":
      return mine
    readers = [d for d in self.readers(sk.outputs[c][0]) if self.owner.get(d)]
    free = [d for d in readers if not self.forward_inputs(d)]
    if free:
      return self.owner[min(free, key=self.pos.get)]
    return mine

  def gradient_reach(self) -> dict:
    """Per backward op, the set (a bit mask) of variable gradients it feeds."""
    sk = self.sk
    bit = {}
    for k, t in enumerate(sorted(self.gradient_tensors)):
      bit[sk.producer[t]] = bit.get(sk.producer[t], 0) | (1 << k)
    reach = {}
    for op in reversed(self.backward):
      r = bit.get(op, 0)
      for t in sk.outputs[op]:
        for d, _ in sk.consumers.get(t, ()):
          r |= reach.get(d, 0)
      reach[op] = r
    return reach

  def pending_evidence(self, tensors: Sequence[str]) -> list[str]:
    """Forward tensors read by the pending side computations producing ``tensors``."""
    sk = self.sk
    out, seen = [], set()
    stack = [sk.producer[t] for t in tensors if sk.producer[t] in self.pending]
    while stack:
      op = stack.pop()
      if op in seen:
        continue
      seen.add(op)
      out.extend(self.forward_inputs(op))
      stack.extend(sk.producer[t] for t in sk.inputs[op] if sk.producer[t] in self.pending)
    return out

  def mark_aggregation(self, c: str, b_inputs: Sequence[str]) -> None:
    """An AddN of contributions to one forward tensor x makes the adjoint of x."""
    p = self.owner[c]
    if len(b_inputs) != len(self.sk.inputs[c]):
      return
    xs = None
    for u in b_inputs:
      tgt = {path[0] for q, path in self.expand(u) if q == p and path}
      xs = tgt if xs is None else xs & tgt
    if xs:
      x = min(xs)
      out = self.sk.outputs[c][0]
      self.aggregate[x] = out
      self.adjoint_kind[out] = x

  def root_owner(self, c: str, fins: Sequence[str]) -> Optional[str]:
    """The forward op of an op reading only forward tensors (and constants)."""
    best = self.root_candidates(c, fins)
    return max(best, key=self.pos.get) if best else None

  def root_candidates(self, c: str, fins: Sequence[str]) -> list[str]:
    """Forward ops sharing the most tensors with ``fins``, consumers before producers."""
    sk = self.sk
    cands = []
    for t in fins:
      p = sk.producer[t]
      cands.append((p, "producer"))
      cands.extend((op, "consumer") for op, _ in sk.consumers.get(t, ())
                   if op in self.forward)
    scored = {}
    for f, how in cands:
      if self.is_const(f) or f in self.handle_set or sk.op_type[f] == "Placeholder":
        continue
      ins, outs = self.fwd_tensors_of(f)
      score = sum(1 for t in fins if t in ins or t in outs)
      key = (score, how == "consumer", self.pos[f])
      if f not in scored or key > scored[f]:
        scored[f] = key
    if not scored:
      return []
    top = max(scored.values())[:2]
    best = [f for f, k in scored.items() if k[:2] == top]
    return self.hint_pick(c, best)

  def choose(self, c: str, b_inputs: Sequence[str], fins: Sequence[str]) -> Optional[str]:
    """The forward op of a backward op reading backward tensors ``b_inputs``."""
    lists = [self.expand(u) for u in b_inputs]
    ranks: dict = {}
    counts = collections.Counter()
    for lst in lists:
      for k, (p, _) in enumerate(lst):
        ranks[p] = max(ranks.get(p, 0), k)
        counts[p] += 1
    common = [p for p in ranks if counts[p] == len(lists)]
    if not common:
      merged = self.accumulation_owner(c, lists)
      if merged is not None:
        return merged
      top = max(counts.values())
      common = [p for p in ranks if counts[p] == top]
    common.sort(key=lambda p: (ranks[p], -self.pos[p]))
    if fins:
      scores = {p: self.evidence_score(p, fins) for p in common}
      best = max(scores.values())
      if best > 0:
        common = [p for p in common if scores[p] == best]
      else:
        # The adjoint flow and the forward tensors read disagree: trust the tensors.
        return self.root_owner(c, fins)
    else:
      common = self.free_op_candidates(c, b_inputs, common)
    if len(common) > 1:
      common = self.downstream_pick(c, common)
    if len(common) > 1:
      common = self.hint_pick(c, common)
    return common[0] if common else None

  def neighbourhood_pick(self, c: str, cands: Sequence[str]) -> list[str]:
    """Among symmetric candidates (two branches of a residual sum), the one whose
    forward neighbourhood (three ops up) holds the forward tensors c's readers read."""
    if len(cands) < 2:
      return list(cands)
    sk = self.sk
    evidence = set()
    frontier = [c]
    for _ in range(3):
      nxt = []
      for op in frontier:
        for t in sk.outputs[op]:
          for d in self.readers(t):
            evidence.update(self.forward_inputs(d))
            nxt.append(d)
      frontier = nxt
    best, best_score = [], -1
    for p in cands:
      near, ops = set(), [p]
      for _ in range(3):
        nxt = []
        for op in ops:
          near.update(sk.inputs[op])
          near.update(sk.outputs[op])
          nxt.extend(sk.producer[t] for t in sk.inputs[op] if sk.producer[t] in self.forward)
        ops = nxt
      score = len(evidence & near)
      if score > best_score:
        best, best_score = [p], score
      elif score == best_score:
        best.append(p)
    return best

  def downstream_pick(self, c: str, cands: Sequence[str]) -> list[str]:
    """Among tied candidates, those whose inputs have the shape of what c's readers make.

    ``Mul(dy, m)`` may be the gradient of ``x * m`` or of ``n * m``; the ``Sum``
    reading it down to n's shape says which.
    """
    readers = [d for t in self.sk.outputs[c] for d in self.readers(t)
               if not self.forward_inputs(d)]
    picked = [p for p in cands if any(self.shape_match(p, d) for d in readers)]
    return picked or list(cands)

  def free_op_candidates(self, c: str, b_inputs: Sequence[str], common: list) -> list:
    """An op reading no forward tensor (Sum, Reshape, Neg, BiasAddGrad, Tile, Slice...).

    With one input u from A's gradient, it stays in A's gradient when u is
    internal there, and moves on when u is complete, i.e. a contribution to an
    input x of A: to the first forward op along x's producer and the
    pass-through ops after it whose gradient can make such an op (one with an
    input of the op's output shape, not counting the input the adjoint passes
    on through unchanged).
    """
    sk = self.sk
    if len(b_inputs) == 1:
      u = b_inputs[0]
      if self.adjoint_kind.get(u) is None:
        a = self.owner[sk.producer[u]]
        if self.internal(u, a, c):
          return [a] if a in common else common
      walk = [(p, path) for p, path in self.expand(u) if p in common and path is not None]
      matched, stops = [], []
      for k, (p, path) in enumerate(walk):
        passes_on = [qpath[-1] for q, qpath in walk[k + 1:]
                     if qpath[:len(path)] == path and len(qpath) == len(path) + 1]
        if any(real(sk.dtype.get(x)) and x not in passes_on and not self.is_const(sk.producer[x])
               for x in sk.inputs[p]):
          stops.append(p)  # p's gradient does work of its own (not all inputs pass through)
        if self.shape_match(p, c, exclude=passes_on):
          if matched and len(path) > matched[0][1]:
            break
          matched.append((p, len(path)))
      if matched:
        return self.neighbourhood_pick(c, [p for p, _ in matched])[:1]
      if stops or walk:
        return [(stops or [walk[0][0]])[0]]
    matched = [p for p in common if self.shape_match(p, c)]
    return matched or common

  def internal(self, u: str, a: str, reader: str) -> bool:
    """Whether backward tensor u, made in a's gradient, is read inside a's gradient.

    It is when the reader reshapes a ``Sum`` (TF's reduce-then-reshape; an
    ``Identity`` is a reshape Grappler folded), sums the raw product of a
    broadcasting op's gradient, or scales by a constant the forward never uses
    after a Tile (the 1/N of a Mean); it is not when a sibling reader shows u left a's
    gradient, or when u has the shape of one of a's inputs (u is complete).
    """
    sk = self.sk
    typ, made_by = sk.op_type[reader], sk.op_type[sk.producer[u]]
    if typ in IDENTITY_OPS + ("Reshape",) and made_by == "Sum":
      return True
    if (sk.op_type[a] in BROADCASTING and self.broadcasts(a) and typ == "Sum"
        and made_by not in ("Reshape", "Identity")):
      return True
    if made_by in ("Tile", "BroadcastTo"):
      for t in sk.inputs[reader]:
        p = sk.producer[t]
        if p not in self.forward and self.is_const(p) and real(sk.dtype.get(t)):
          return True  # the 1/N of a Mean's gradient, after its Tile
    if self.left_gradient(u, a, reader):
      return False
    s, d = sk.shape.get(u), sk.dtype.get(u)
    complete = any(sk.shape.get(x) == s and sk.dtype.get(x) == d
                   and self.closure(x) for x in sk.inputs[a])
    return not complete

  def broadcasts(self, f: str) -> bool:
    """Whether some real input of f has a shape other than f's output."""
    sk = self.sk
    out = sk.shape.get(sk.outputs[f][0]) if sk.outputs[f] else None
    return any(real(sk.dtype.get(x)) and sk.shape.get(x) != out for x in sk.inputs[f])

  def left_gradient(self, u: str, a: str, reader: str) -> bool:
    """Whether another reader of u shows that u is a contribution leaving a's gradient."""
    ins, outs = self.fwd_tensors_of(a)
    for d in self.readers(u):
      if d == reader:
        continue
      if d in self.owner:
        if self.owner[d] != a:
          return True
        continue
      fins = self.forward_inputs(d)
      if fins and not any(t in ins or t in outs for t in fins):
        return True
    return False

  def accumulation_owner(self, c: str, lists) -> Optional[str]:
    """Inputs from gradients of different reads of one variable: the variable's accumulation."""
    handles = set()
    first = None
    for lst in lists:
      hs = {self.resource_of_read.get(p) for p, _ in lst} - {None}
      if not hs:
        return None
      handles = hs if first is None else handles & hs
      first = first or lst
    if len(handles) != 1:
      return None
    h = handles.pop()
    reads = [r for r in self.reads[h] if r in self.forward]
    return reads[0] if reads else None

  def deferred_owner(self, c: str) -> Optional[str]:
    """An op reading only constants (an unfolded seed): its readers' forward op, or the
    next op toward the loss with an input of its shape."""
    sk = self.sk
    readers = [d for t in sk.outputs[c] for d, _ in sk.consumers.get(t, ())
               if self.owner.get(d)]
    if not readers:
      return None
    start = self.owner[min(readers, key=self.pos.get)]
    frontier, seen = [start], {start}
    for _ in range(4):
      for f in frontier:
        if self.shape_match(f, c):
          return f
      nxt = []
      for f in frontier:
        for t in sk.outputs[f]:
          for d, _ in sk.consumers.get(t, ()):
            if d in self.forward and d not in seen:
              seen.add(d)
              nxt.append(d)
      frontier = nxt
    return start

  def record_adjoints(self):
    """Which backward tensor is the adjoint of which forward tensor.

    A reader owned by p of a backward tensor u, with p reached from u's
    producer through input x (and pass-through inputs after it), makes u a
    contribution to each of those tensors.  A tensor's gradient is its
    aggregation if it has one, else its only contribution.
    """
    sk = self.sk
    contribs = collections.defaultdict(list)
    for c in self.backward:
      p = self.owner.get(c)
      if p is None:
        continue
      if c in self.identities:
        continue
      for u in sk.inputs[c]:
        if sk.producer[u] not in self.backward_set or not self.owner.get(sk.producer[u]):
          continue
        u = self.src(u)
        for q, path in self.expand(u):
          if q == p and path is not None:
            for x in path:
              if u not in contribs[x]:
                contribs[x].append(u)
            break
    gradient_of = {}
    for x, us in contribs.items():
      if x in self.aggregate:
        gradient_of[x] = self.aggregate[x]
      elif len(us) == 1:
        gradient_of[x] = us[0]
    gradient_of.update(self.aggregate)
    self.gradient_of_map = gradient_of
