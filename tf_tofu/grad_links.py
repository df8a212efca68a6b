"""Forward <-> backward links of a training step, read off the graph's structure.

Coarsening (TOFU.md section 6) groups each forward op with the gradient ops TF
generated for it, each tensor with its gradient, and each variable with its
gradient, gradient accumulation and update.  A traced step carries no such
record, so this module recovers it from the dataflow alone (names such as
``gradient_tape/<scope>/`` serve only to break the rare structural tie).

**Regions.**  The forward region F is every op the data fetches (the loss)
depend on.  Update ops write a resource (``Assign*VariableOp``,
``ResourceApply*``, ``ResourceScatter*``).  The *source* S stands for every
tensor F produces.

**A variable's gradient** is found by dominators.  On the dataflow graph of the
non-forward ops (tensors and ops as nodes; ``IdentityN`` output k depending on
input k only; an update's write reaching the later reads of that resource), a
node d dominates n if every path from S to n passes through d.  Every path
from the forward computation into the update of v passes through dL/dv, so
the gradient is on the dominator chain of the update's value input.  Walking
that chain from S, the backward part ends at the first op that is plainly the
optimizer's: one that touches a resource, an ``IdentityN`` (Keras wraps
gradients in one), or one that consumes optimizer state (a non-forward
variable read, anything computed from one, or a floating-point constant the
forward never uses: a learning rate).  The gradient is the last tensor before
that point with v's shape and dtype (for a sparse update, the values whose
trailing dims are v's).

**Roles.**  Backward ops are the non-forward ancestors of the gradients;
update ops are the rest of what the updates need, and the updates.

**Gradient op -> forward op.**  TF's gradient of op f reads the adjoints of f's
outputs and tensors of f itself (its inputs or outputs), and produces
contributions of the shapes of f's inputs; a contribution to x feeds the
gradient of x's producer, or the ``AddN`` summing x's contributions.  Backward
ops are visited in topological order; a backward tensor produced in the
gradient of A can be read by

* A's own gradient (an internal tensor), or
* the gradient of p = the producer of an input x of A with x's shape (a
  contribution to x), or of an op feeding p through ops whose gradient passes
  the adjoint on unchanged (Identity, AddV2, BiasAdd's value, ...);

a backward op's candidates are the intersection of those sets over its
backward inputs, narrowed by which forward tensors it reads (its own outputs
count twice: ``ReluGrad(dy, y)`` belongs to the Relu that produced y, not to
the MatMul that consumed y).  An op reading no forward tensor (``Sum``,
``BiasAddGrad``, ``Reshape``, ``Neg``) stays in A's gradient unless a sibling
reader of its input shows that input left A's gradient; it then goes to the
candidate with an input of its output's shape.  An ``AddN`` whose inputs come
from different gradients is the accumulation of the common tensor.  Ops
reading only forward tensors (``Mul(x, 2)`` for Square) join the forward op
they share most tensors with; ops reading only constants join their readers.
Whatever is left is reported as unattached.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Mapping, Optional, Sequence

ROLES = ("forward", "backward", "update", "variable", "const", "input", "other")
READ_OPS = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd"})
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
# Names of the input that carries the new value / gradient, per update op.
VALUE_ARGS = ("grad", "delta", "updates", "value")
IDENTITY_OPS = ("Identity", "Snapshot")
SPARSE_UPDATE_PREFIXES = ("ResourceScatter", "ResourceSparseApply")
UPDATE_PREFIXES = ("Assign", "ResourceApply", "ResourceSparseApply", "ResourceScatter",
                   "ResourceStridedSliceAssign")
GRADIENT_SCOPES = ("gradient_tape/", "gradients/")


@dataclasses.dataclass(frozen=True)
class Skeleton:
  """The dataflow facts the linker needs (built by ``tf_tofu.graph``).

  ``order`` is topological; ``inputs`` are data inputs (tensor names),
  ``control_inputs`` op names; ``consumers[t]`` lists ``(op, position)``.
  """

  order: tuple[str, ...]
  op_type: Mapping[str, str]
  inputs: Mapping[str, tuple[str, ...]]
  control_inputs: Mapping[str, tuple[str, ...]]
  outputs: Mapping[str, tuple[str, ...]]
  consumers: Mapping[str, tuple[tuple[str, int], ...]]
  producer: Mapping[str, str]
  shape: Mapping[str, tuple[int, ...]]
  dtype: Mapping[str, str]
  input_arg_names: Mapping[str, tuple[str, ...]]  # per op, the op-def arg name of each input


@dataclasses.dataclass(frozen=True)
class VariableLinks:
  handle: str                      # the handle tensor
  reads: tuple[str, ...]
  updates: tuple[str, ...]
  gradient: Optional[str]
  gradient_indices: Optional[str]  # for a sparse update: the indices next to ``gradient``
  accumulation: tuple[str, ...]
  why_no_gradient: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Links:
  roles: Mapping[str, str]
  forward_op_of: Mapping[str, str]
  gradient_of: Mapping[str, str]
  unattached: tuple[str, ...]
  variables: Mapping[str, VariableLinks]  # by handle op name
  loss: tuple[str, ...]
  forward_from: str                       # "fetches" or "scopes"


def _real(dtype: Optional[str]) -> bool:
  return bool(dtype) and dtype.startswith(("float", "bfloat", "half", "complex"))


def is_update_type(op_type: str) -> bool:
  return op_type.startswith(UPDATE_PREFIXES)


def _scope(name: str) -> str:
  return name.rsplit("/", 1)[0] if "/" in name else ""


def _hint_scope(name: str) -> Optional[str]:
  """The forward scope a gradient op's name points at, if it has a gradient scope."""
  for marker in GRADIENT_SCOPES:
    k = name.find(marker)
    if k == 0 or (k > 0 and name[k - 1] == "/"):
      rest = name[k + len(marker):]
      scope = _scope(rest)
      return scope[:-5] if scope.endswith("_grad") else scope
  return None


class _Linker:

  def __init__(self, sk: Skeleton, variables: Mapping[str, tuple], fetches: Sequence[str]):
    self.sk = sk
    self.pos = {name: i for i, name in enumerate(sk.order)}
    self.var_info = dict(variables)
    self.handles = tuple(variables)
    self.fetches = tuple(fetches)

  # ------------------------------------------------------------------ helpers

  def ancestors(self, seeds, control: bool = False) -> set:
    """Ops the ``seeds`` (op names) depend on through data (and control) edges, inclusive."""
    seen, stack = set(), list(seeds)
    sk = self.sk
    while stack:
      op = stack.pop()
      if op in seen:
        continue
      seen.add(op)
      stack.extend(sk.producer[t] for t in sk.inputs[op])
      if control:
        stack.extend(sk.control_inputs[op])
    return seen

  def is_const(self, op: str) -> bool:
    return self.sk.op_type[op] == "Const"

  def is_input(self, op: str) -> bool:
    return self.sk.op_type[op] == "Placeholder" and op not in self.handle_set

  # ------------------------------------------------------------------ regions

  def resources(self):
    sk = self.sk
    self.handle_set = set(self.handles)
    self.reads = collections.defaultdict(list)
    self.updates = collections.defaultdict(list)
    self.resource_of_read = {}
    for h in self.handles:
      frontier = [f"{h}:0"]
      while frontier:
        t = frontier.pop()
        for op, _ in sk.consumers.get(t, ()):
          typ = sk.op_type[op]
          if typ in READ_OPS:
            self.reads[h].append(op)
            self.resource_of_read[op] = h
          elif is_update_type(typ):
            self.updates[h].append(op)
          elif typ == "Identity":
            frontier.extend(sk.outputs[op])
    self.update_ops = {u for us in self.updates.values() for u in us}
    for h in self.handles:
      self.reads[h].sort(key=self.pos.get)
      self.updates[h] = sorted(set(self.updates[h]), key=self.pos.get)

  def forward_region(self):
    sk = self.sk
    loss = [t for t in self.fetches if sk.dtype.get(t) not in (None, "resource")]
    forward = self.ancestors([sk.producer[t] for t in loss])
    reads_in_f = any(r in forward for rs in self.reads.values() for r in rs)
    self.forward_from = "fetches"
    if not reads_in_f:
      forward = self._forward_from_scopes()
      self.forward_from = "scopes"
      loss = []
    self.loss = tuple(loss)
    self.forward = forward

  def _forward_from_scopes(self) -> set:
    """Without a loss fetch: what the ops under a gradient scope read from outside it."""
    sk = self.sk
    grad_ops = {op for op in sk.order if _hint_scope(op) is not None}
    tainted = set()
    for op in sk.order:
      if op in grad_ops or any(sk.producer[t] in tainted for t in sk.inputs[op]):
        tainted.add(op)
    seeds = {sk.producer[t] for op in grad_ops for t in sk.inputs[op]} - tainted
    return {op for op in self.ancestors(seeds) if op not in tainted}

  # ------------------------------------------------------------------ gradients by dominators

  def optimizer_state(self):
    """Tensors computed from non-forward variable reads (slots, step counters, lr)."""
    sk = self.sk
    state = set()
    for op in sk.order:
      if op in self.forward:
        continue
      if sk.op_type[op] in READ_OPS or any(t in state for t in sk.inputs[op]):
        state.update(sk.outputs[op])
    self.opt_state = state

  def dominators(self):
    """Immediate dominators from S over the non-forward dataflow (a DAG, topological order).

    Node keys: ``"S"``, ``("o", op)``, ``("t", tensor)``.  Tensors produced in F
    are S itself.
    """
    sk = self.sk
    forward = self.forward
    idom: dict = {"S": None}
    depth: dict = {"S": 0}

    def node_of_tensor(t):
      return "S" if sk.producer[t] in forward else ("t", t)

    def intersect(a, b):
      while a != b:
        while depth[a] > depth[b]:
          a = idom[a]
        while depth[b] > depth[a]:
          b = idom[b]
        if a != b:
          a, b = idom[a], idom[b]
      return a

    def join(node, preds):
      best = None
      for p in preds:
        if p not in idom:
          continue
        if p == "S":
          best = "S"
          break
        best = p if best is None else intersect(best, p)
      if best is not None:
        idom[node] = best
        depth[node] = depth[best] + 1

    for op in sk.order:
      if op in forward:
        continue
      typ = sk.op_type[op]
      if typ == "IdentityN":
        for k, t in enumerate(sk.outputs[op]):
          join(("t", t), [node_of_tensor(sk.inputs[op][k])])
        continue
      # Gradients are real-valued: integer inputs (a scatter's or segment sum's
      # indices) say where, not what, and an update depends on the gradient
      # through its value input only.
      ins = ([t for t, _ in self.value_inputs(op)] if op in self.update_ops
             else sk.inputs[op])
      preds = [node_of_tensor(t) for t in ins if _real(sk.dtype.get(t))]
      preds += [("o", c) for c in sk.control_inputs[op] if c in self.update_ops]
      join(("o", op), preds)
      if ("o", op) in idom:
        for t in sk.outputs[op]:
          join(("t", t), [("o", op)])
    self.idom = idom
    self.depth = depth
    self._intersect = intersect

  def value_inputs(self, update: str) -> list[tuple[str, bool]]:
    """The update's gradient-carrying input tensors, each with whether it is sparse."""
    sk = self.sk
    names = sk.input_arg_names.get(update, ())
    sparse = sk.op_type[update].startswith(SPARSE_UPDATE_PREFIXES)
    for arg in VALUE_ARGS:
      picked = [t for t, n in zip(sk.inputs[update], names) if n == arg]
      if picked:
        return [(t, sparse) for t in picked]
    return [(t, sparse) for t in sk.inputs[update] if sk.dtype.get(t) != "resource"]

  def opt_like(self, op: str) -> bool:
    """Whether an op on a gradient's dominator chain is already the optimizer's.

    It is if it touches a resource, is an ``IdentityN``, reads optimizer state,
    or scales by a floating-point constant that the forward never uses while
    reading no forward tensor (the loss seed, folded into a constant, is read
    together with a forward tensor).
    """
    sk = self.sk
    if sk.op_type[op] == "IdentityN" or op in self.update_ops:
      return True
    anchored = any(sk.producer[t] in self.forward for t in sk.inputs[op])
    for t in sk.inputs[op]:
      p = sk.producer[t]
      if sk.dtype.get(t) == "resource" or t in self.opt_state:
        return True
      if not anchored and p not in self.forward and self.is_const(p) and _real(sk.dtype.get(t)):
        return True
    return False

  def gradient_of_variable(self, h: str) -> VariableLinks:
    sk = self.sk
    reads = tuple(self.reads[h])
    updates = tuple(self.updates[h])
    base = dict(handle=f"{h}:0", reads=reads, updates=updates, gradient=None,
                gradient_indices=None, accumulation=())
    if not any(r in self.forward for r in reads):
      return VariableLinks(**base, why_no_gradient="not read by the forward computation")
    if not updates:
      return VariableLinks(**base, why_no_gradient="no update op writes it")
    shape, dtype = self.var_info[h]
    shape = tuple(shape)
    nodes = [("t", t) for u in updates for t, _ in self.value_inputs(u) if ("t", t) in self.idom]
    update_indices = None
    for u in updates:
      if sk.op_type[u].startswith(SPARSE_UPDATE_PREFIXES):
        idx = [t for t, n in zip(sk.inputs[u], sk.input_arg_names.get(u, ())) if n == "indices"]
        update_indices = idx[0] if idx else None
    if not nodes:
      return VariableLinks(**base, why_no_gradient="its updates do not depend on the forward "
                           "computation")
    lca = nodes[0]
    for n in nodes[1:]:
      lca = self._intersect(lca, n)
    chain = []
    n = lca
    while n is not None:
      chain.append(n)
      n = self.idom[n]
    chain.reverse()  # S ... lca
    dense = sparse = None
    for k, node in enumerate(chain[1:], 1):
      if node[0] == "o":
        if self.opt_like(node[1]):
          break
        continue
      t = node[1]
      prev = chain[k - 1]
      if prev[0] == "t" and sk.op_type[sk.producer[t]] == "IdentityN":
        break  # stepped through an IdentityN: the optimizer's side
      ts, td = sk.shape.get(t), sk.dtype.get(t)
      if td != dtype or ts is None:
        continue
      if tuple(ts) == shape:
        dense = t
      elif len(ts) == len(shape) and tuple(ts[1:]) == shape[1:] and (
          update_indices or self.sparse_indices(t)):
        sparse = t
    if dense is None and sparse is None:
      return VariableLinks(**base, why_no_gradient="no tensor of the variable's shape on the "
                           "path into its update")
    if dense is not None:
      return VariableLinks(**{**base, "gradient": dense})
    return VariableLinks(**{**base, "gradient": sparse,
                            "gradient_indices": self.sparse_indices(sparse) or update_indices})

  def sparse_indices(self, values: str) -> Optional[str]:
    """The indices paired with IndexedSlices ``values`` by a segment sum or scatter reading it."""
    sk = self.sk
    for op, k in sk.consumers.get(values, ()):
      names = sk.input_arg_names.get(op, ())
      if sk.op_type[op] == "UnsortedSegmentSum" or sk.op_type[op].startswith(
          SPARSE_UPDATE_PREFIXES):
        for t, n in zip(sk.inputs[op], names):
          if n in ("segment_ids", "indices"):
            return t
    return None

  # ------------------------------------------------------------------ roles

  def assign_roles(self, var_links: Mapping[str, VariableLinks]):
    sk = self.sk
    grads = [l.gradient for l in var_links.values() if l.gradient]
    grads += [l.gradient_indices for l in var_links.values() if l.gradient_indices]
    backward = self.ancestors([sk.producer[t] for t in grads]) - self.forward
    needed_by_updates = self.ancestors(self.update_ops, control=False)
    roles = {}
    for op in sk.order:
      typ = sk.op_type[op]
      if op in self.handle_set or typ in ("VarHandleOp", "_VarHandlesOp"):
        roles[op] = "variable"
      elif typ == "Const":
        roles[op] = "const"
      elif typ == "Placeholder":
        roles[op] = "input"
      elif op in self.forward:
        roles[op] = "forward"
      elif op in backward:
        roles[op] = "backward"
      elif op in self.update_ops or op in needed_by_updates:
        roles[op] = "update"
      else:
        roles[op] = "other"
    self.roles = roles
    self.backward = [op for op in sk.order if roles[op] == "backward"]
    self.gradient_tensors = {l.gradient for l in var_links.values() if l.gradient}
    self.backward_set = set(self.backward)

  # ------------------------------------------------------------------ attachment

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
    scope = _hint_scope(op)
    if scope is None:
      return list(cands)
    matched = [c for c in cands if _scope(c) == scope]
    return matched or list(cands)

  def attach(self):
    """Assigns every backward op to a forward op (see the module docstring).

    Backward ops reading no backward tensor are *roots*.  A root that reaches
    every variable's gradient is where the adjoint starts (the loss seed, read
    with a forward tensor); other roots compute from forward tensors only
    (``Mul(x, 2)`` of Square's gradient) and stay *pending*, as do ops reading
    only pending tensors: their forward tensors count as evidence for the op
    that reads them, and they join that op's forward op at the end.  Roots
    reading only constants join their readers' forward op.
    """
    sk = self.sk
    self.owner: dict = {}
    self.adjoint_kind: dict = {}     # backward tensor -> forward tensor it is the full adjoint of
    self.aggregate = {}              # forward tensor -> aggregated adjoint tensor
    self._expand_cache = {}
    reach = self.gradient_reach()
    root_reach = max((bin(reach.get(c, 0)).count("1") for c in self.backward
                      if not any(sk.producer[t] in self.backward_set for t in sk.inputs[c])),
                     default=0)
    self.pending: set = set()
    deferred = []
    self.alias: dict = {}   # output of a backward Identity -> the tensor it renames
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
        if pending_in or (fins and bin(reach.get(c, 0)).count("1") < root_reach):
          self.pending.add(c)
        elif fins:
          self.owner[c] = self.root_owner(c, fins)
        else:
          deferred.append(c)
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
    out, stack, seen = [], [sk.producer[t] for t in tensors if sk.producer[t] in self.pending], set()
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

  def root_owner(self, c: str, fins: Sequence[str]) -> str:
    """An op reading only forward tensors (and constants)."""
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
      return None
    top = max(scored.values())[:2]
    best = [f for f, k in scored.items() if k[:2] == top]
    best = self.hint_pick(c, best)
    return max(best, key=self.pos.get)

  def choose(self, c: str, b_inputs: Sequence[str], fins: Sequence[str]) -> Optional[str]:
    sk = self.sk
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
        if any(_real(sk.dtype.get(x)) and x not in passes_on and not self.is_const(sk.producer[x])
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
        if p not in self.forward and self.is_const(p) and _real(sk.dtype.get(t)):
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
    return any(_real(sk.dtype.get(x)) and sk.shape.get(x) != out for x in sk.inputs[f])

  def left_gradient(self, u: str, a: str, reader: str) -> bool:
    """Whether another reader of u shows that u is a contribution leaving a's gradient."""
    sk = self.sk
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

  # ------------------------------------------------------------------ all

  def run(self) -> Links:
    self.resources()
    self.forward_region()
    self.optimizer_state()
    self.dominators()
    var_links = {h: self.gradient_of_variable(h) for h in self.handles}
    self.assign_roles(var_links)
    self.attach()
    final = {}
    for h, vl in var_links.items():
      accumulation = []
      if vl.gradient:
        for op in self.backward:
          if self.sk.op_type[op] == "AddN" and self.owner.get(op) in set(vl.reads):
            accumulation.append(op)
        g_op = self.sk.producer[vl.gradient]
        if self.sk.op_type[g_op] == "AddN" and g_op not in accumulation:
          accumulation.append(g_op)
        for r in vl.reads:
          if r in self.forward:
            self.gradient_of_map.setdefault(self.sk.outputs[r][0], vl.gradient)
      final[h] = dataclasses.replace(vl, accumulation=tuple(accumulation))
    forward_op_of = {op: self.owner[op] for op in self.backward if self.owner.get(op)}
    unattached = tuple(op for op in self.backward if not self.owner.get(op))
    return Links(roles=self.roles, forward_op_of=forward_op_of,
                 gradient_of=dict(self.gradient_of_map), unattached=unattached,
                 variables=final, loss=self.loss, forward_from=self.forward_from)


def link(sk: Skeleton, variables: Mapping[str, tuple], fetches: Sequence[str]) -> Links:
  """Roles, gradient links and variable links of a flattened training step.

  Args:
    sk: the graph's dataflow.
    variables: handle op name -> (shape, dtype) of the variable behind it.
    fetches: the fetched tensors (the loss among them).
  """
  return _Linker(sk, variables, fetches).run()
