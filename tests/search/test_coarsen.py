"""Tests for tf_tofu.search.coarsen: which tensors share one state per level."""

from absl.testing import absltest

import tf_tofu
from tf_tofu import models
from tf_tofu.graph import view
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import coarsen


class UnionFindTest(absltest.TestCase):

  def test_roots_do_not_depend_on_order(self):
    for pairs in ([("b", "a"), ("c", "b")], [("c", "b"), ("a", "c")]):
      uf = coarsen.UnionFind("abcd")
      for x, y in pairs:
        uf.union(x, y)
      self.assertEqual([uf.find(x) for x in "abcd"], ["a", "a", "a", "d"])


class TensorGroupsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    step = models.tiny("mlp", optimizer="adam")
    graph = tf_tofu.trace(step.fn, *step.input_signature)
    cls.graph = graph
    cls.view = view.from_tofu_graph(graph, Describer())
    groups = coarsen.tensor_groups(cls.view, Describer())
    cls.group_of = {t: i for i, g in enumerate(groups) for t in g}
    cls.groups = groups

  def test_every_laid_out_tensor_is_in_one_group_of_one_shape(self):
    laid_out = view.laid_out_tensors(self.view)
    self.assertLessEqual(laid_out, set(self.group_of))
    self.assertEqual(sum(len(g) for g in self.groups), len(self.group_of))
    for g in self.groups:
      self.assertLen({self.view.tensors[t].shape for t in g}, 1, g)

  def test_a_variable_shares_its_group_with_its_reads_gradient_and_slots(self):
    for v in self.graph.variables:
      if not v.gradient:
        continue
      g = self.group_of[v.handle]
      self.assertEqual(self.group_of[v.gradient], g, v.name)
      for read in v.reads:
        out = self.view.op(read).outputs[0]
        self.assertEqual(self.group_of[out], g, f"{v.name}: {read}")
      for op in self.view.ops:
        if op.op_type == "ResourceApplyAdam" and op.inputs[0] == v.handle:
          for slot in view.update_slots(self.view, op)[0]:
            self.assertEqual(self.group_of[op.inputs[slot]], g, f"{v.name} slot {slot}")

  def test_an_element_wise_chain_is_one_group(self):
    relu = next(op for op in self.view.ops if op.op_type == "Relu")
    bias_add = self.view.op(self.graph.op_of(relu.inputs[0]).name)
    self.assertEqual(self.group_of[relu.outputs[0]], self.group_of[bias_add.outputs[0]])

  def test_a_matmul_does_not_tie_its_operands(self):
    mm = next(op for op in self.view.ops if op.op_type == "MatMul")
    a, b = mm.inputs
    self.assertNotEqual(self.group_of[a], self.group_of[b])


if __name__ == "__main__":
  absltest.main()
