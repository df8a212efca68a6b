"""Tests for tf_tofu.graph.view: every op gets one kind; update slots; laid-out tensors."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest

import tf_tofu
from tf_tofu import models
from tf_tofu.graph import view
from tf_tofu.opdefs.registry import Describer


class ViewTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    step = models.tiny("mlp", optimizer="adam")
    cls.graph = tf_tofu.trace(step.fn, *step.input_signature)
    cls.describer = Describer()
    cls.view = view.from_tofu_graph(cls.graph, cls.describer)

  def test_kinds(self):
    kinds = {op.name: op.kind for op in self.view.ops}
    self.assertEqual(set(kinds.values()) - {"compute", "single", "source", "read", "update",
                                            "ignored"}, set())
    for op in self.view.ops:
      if op.op_type == "MatMul":
        self.assertEqual(op.kind, "compute", op.name)
      if op.op_type == "ReadVariableOp":
        self.assertEqual(op.kind, "read", op.name)
      if op.op_type == "ResourceApplyAdam":
        self.assertEqual(op.kind, "update", op.name)
    self.assertEqual(set(self.view.variables), {v.handle for v in self.graph.variables})

  def test_the_describer_holds_ingestions_descriptions(self):
    # A computing op's context is its ingested description's, and the view hands that
    # description to the describer: the search does not describe it again.
    describer = Describer()
    by_name = {op.name: op for op in view.from_tofu_graph(self.graph, describer).ops}
    adopted = [op for name, op in self.graph.ops.items() if op.semantics is not None
               and name in by_name and by_name[name].context is op.semantics.op]
    self.assertNotEmpty(adopted)
    for op in adopted:
      hits = describer.hits
      sem, reason = describer(by_name[op.name].context)
      self.assertIsNone(reason)
      self.assertEqual(describer.hits, hits + 1, op.name)
      self.assertEqual([o.shape for o in sem.outputs], [o.shape for o in op.semantics.outputs])

  def test_adam_slots(self):
    adam = next(op for op in self.view.ops if op.op_type == "ResourceApplyAdam")
    on_shards, whole = view.update_slots(self.view, adam)
    self.assertEqual(on_shards, (1, 2, 9))          # m, v, grad: element-wise with the variable
    self.assertEqual(whole, (3, 4, 5, 6, 7, 8))     # beta powers and hyper-parameters

  def test_laid_out_tensors_are_what_a_plan_lays_out(self):
    plan = tf_tofu.plan(self.graph, devices=2, describer=self.describer)
    self.assertEqual(view.laid_out_tensors(self.view), set(plan.layouts))

  def test_a_const_context_holds_its_node_defs_value(self):
    # The view takes a Const's value attribute from the ingested tensor, the array
    # ingestion read off the same NodeDef; every other attribute is read as before.
    consts = [op for op in self.view.ops if op.op_type == "Const"]
    self.assertNotEmpty(consts)
    for op in consts:
      node = self.graph.ops[op.name].node_def
      self.assertIs(op.context.attrs["value"], self.graph.tensors[op.outputs[0]].value)
      np.testing.assert_array_equal(op.context.attrs["value"],
                                    tf.make_ndarray(node.attr["value"].tensor))
      self.assertEqual(op.context.attrs["dtype"], tf.as_dtype(node.attr["dtype"].type).name)
      self.assertEqual(sorted(op.context.attrs), sorted(node.attr))

  def test_identity_n_is_one_identity_per_tensor(self):
    step = models.tiny("mlp", flavor="keras", optimizer="adam")
    graph = tf_tofu.trace(step.fn, *step.input_signature)
    (idn,) = [op for op in graph.ops.values() if op.op_type == "IdentityN"]
    v = view.from_tofu_graph(graph, self.describer)
    parts = [op for op in v.ops if op.name.startswith(idn.name + "/part")]
    self.assertLen(parts, len(idn.inputs))
    for i, part in enumerate(parts):
      self.assertEqual((part.op_type, part.kind), ("Identity", "compute"))
      self.assertEqual((part.inputs, part.outputs), ((idn.inputs[i],), (idn.outputs[i],)))
    whole = v.op(idn.name)
    self.assertEqual(whole.kind, "ignored")
    self.assertEqual(whole.control_inputs, tuple(p.name for p in parts))
    plan = tf_tofu.plan(graph, devices=4, describer=self.describer)
    self.assertEqual([n for n in plan.notes if "left whole" in n], [])

  def test_a_variable_through_an_unknown_op_is_refused(self):
    v = tf.Variable(np.ones((4, 3)))
    fn = tf.function(lambda x: tf.reduce_sum(v.sparse_read([0, 2])) + tf.reduce_sum(
        tf.raw_ops.ResourceGatherNd(resource=v.handle, indices=[[1]], dtype=tf.float64)) + x,
                     autograph=False)
    graph = tf_tofu.trace(fn, tf.TensorSpec([], tf.float64))
    with self.assertRaisesRegex(view.UnsupportedVariableOpError, r"\(ResourceGatherNd\)"):
      view.from_tofu_graph(graph, self.describer)


if __name__ == "__main__":
  absltest.main()
