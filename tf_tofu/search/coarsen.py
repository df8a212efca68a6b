"""Coarsening: tensors that must share one state per level (docs/method.md section 6).

Tied into one group (union-find over tensor names):

1. each variable with its reads, the values its updates write (the update's
   slots element-wise with the variable, ``graph.view.update_slots``), and its
   gradient (variable/gradient/update ties);
2. each forward tensor with its gradient tensor;
3. the output of an element-wise op with every input of the same shape (a
   chain of element-wise ops becomes one group; a broadcast input is not
   tied).

Ties only join tensors of equal shape, so a group has one set of candidate
states.  They restrict the search space (a group takes one decision), which is
what keeps the DP narrow; they never make a plan incorrect.
"""

from __future__ import annotations

from tf_tofu.opdefs.registry import Describer
from tf_tofu.graph.view import SearchGraph, update_slots


class UnionFind:

  def __init__(self, items):
    self.parent = {x: x for x in items}

  def find(self, x):
    root = x
    while self.parent[root] != root:
      root = self.parent[root]
    while self.parent[x] != root:
      self.parent[x], x = root, self.parent[x]
    return root

  def union(self, a, b):
    ra, rb = self.find(a), self.find(b)
    if ra != rb:
      # The smaller name is the root, so groups do not depend on visiting order.
      lo, hi = sorted((ra, rb))
      self.parent[hi] = lo


def tensor_groups(graph: SearchGraph, describer: Describer) -> list[list[str]]:
  """The tied groups, each sorted, in order of their first tensor's producer."""
  uf = UnionFind(graph.tensors)

  def tie(a, b):
    if a in graph.tensors and b in graph.tensors and graph.tensors[a].shape == graph.tensors[b].shape:
      uf.union(a, b)

  for op in graph.ops:
    if op.kind == "read" and op.outputs:
      tie(op.inputs[0], op.outputs[0])
    elif op.kind == "update":
      for i in update_slots(graph, op)[0]:
        tie(op.inputs[0], op.inputs[i])  # slots, gradient, value written
  for handle, grad in sorted(graph.var_gradients.items()):
    tie(handle, grad)
  for fwd, grad in sorted(graph.gradient_of.items()):
    tie(fwd, grad)
  for op in graph.ops:
    if op.kind != "compute" or len(op.outputs) != 1:
      continue
    sem, _ = describer(op.context)
    if sem is None or not describer.elementwise(sem):
      continue
    for t in op.inputs:
      if t is not None:
        tie(t, op.outputs[0])
  order = {}
  for op in graph.ops:
    for t in op.outputs:
      order.setdefault(t, len(order))
  for t in graph.tensors:
    order.setdefault(t, len(order))
  groups: dict[str, list[str]] = {}
  for t in sorted(graph.tensors, key=order.__getitem__):
    groups.setdefault(uf.find(t), []).append(t)
  return [sorted(g, key=order.__getitem__) for g in groups.values()]
