"""Forward <-> backward links of a training step, read off the graph's structure.

Coarsening (docs/method.md section 6) groups each forward op with the gradient ops TF
generated for it, each tensor with its gradient, and each variable with its
gradient, gradient accumulation and update.  A traced step carries no such
record, so this module recovers it from the dataflow (names such as
``gradient_tape/<scope>/`` only break ties).

**Regions.**  The forward region F is every op the data fetches (the loss)
depend on through data edges; without a loss fetch, what the ops under a
gradient scope read from outside it.  Update ops write a resource
(``Assign*VariableOp``, ``ResourceApply*``, ``ResourceScatter*``).  The source S
stands for every tensor F produces.

**A variable's gradient** is found by dominators.  On the dataflow of the
non-forward ops (tensors and ops as nodes; real-valued inputs only, since
indices say where and not what; ``IdentityN`` output k depending on input k
only; an update depending on its value input only, and the later reads of a
resource on its writes), d dominates n if every path from S to n passes
through d.  Every path from the forward computation into the update of v
passes through dL/dv, so the gradient lies on the dominator chain of the
update's value input.  Walking that chain from S, the backward part ends at
the first op that is plainly the optimizer's: one that touches a resource,
an ``IdentityN`` (Keras wraps gradients in one), one that reads optimizer
state (a non-forward variable read or anything computed from one), or one
that scales by a floating-point constant the forward never uses while reading
no forward tensor (a learning rate; the folded loss seed is read together
with a forward tensor).  The gradient is the last tensor before that point
with v's shape and dtype; failing that, IndexedSlices values whose trailing
dims are v's (with the indices beside them).

**Roles.**  Backward ops are the non-forward ancestors of the gradients;
update ops are the rest of what the updates need, and the updates.

**Gradient op -> forward op** is ``tf_tofu.graph.attach``.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Mapping, Optional, Sequence

from tf_tofu.graph import attach as grad_attach
from tf_tofu.graph.attach import hint_scope, real
from tf_tofu.graph.vocabulary import READ_OPS, SPARSE_UPDATE_PREFIXES, is_update_type

ROLES = ("forward", "backward", "update", "variable", "const", "input", "other")
# Names of the input that carries the new value / gradient, per update op.
VALUE_ARGS = ("grad", "delta", "updates", "value")


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


class _Linker:
  """Regions, roles and variable links of one step; the attachment of its backward ops is
  a :class:`attach.Attacher` of its own."""

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
    grad_ops = {op for op in sk.order if hint_scope(op) is not None}
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
      preds = [node_of_tensor(t) for t in ins if real(sk.dtype.get(t))]
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
      if not anchored and p not in self.forward and self.is_const(p) and real(sk.dtype.get(t)):
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

  # ------------------------------------------------------------------ all

  def run(self) -> Links:
    self.resources()
    self.forward_region()
    self.optimizer_state()
    self.dominators()
    var_links = {h: self.gradient_of_variable(h) for h in self.handles}
    self.assign_roles(var_links)
    attacher = grad_attach.Attacher(grad_attach.Regions(
        sk=self.sk, pos=self.pos, forward=self.forward, backward=self.backward,
        handle_set=self.handle_set, reads=self.reads, resource_of_read=self.resource_of_read,
        var_info=self.var_info, gradient_tensors=self.gradient_tensors))
    attacher.attach()
    self.owner, self.gradient_of_map = attacher.owner, attacher.gradient_of_map
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
