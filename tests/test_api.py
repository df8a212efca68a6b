"""Tests for tf_tofu.api: the one composition (plan_view, plan, partition, load_plan)."""

import gc

from absl.testing import absltest

import tf_tofu
from tf_tofu import api, models
from tf_tofu.graph import view
from tf_tofu.opdefs.registry import Describer


class CompositionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    step = models.tiny("mlp", optimizer="adam")
    cls.graph = tf_tofu.trace(step.fn, *step.input_signature)

  def test_plan_is_plan_view_of_the_graph_view(self):
    d = Describer()
    a = tf_tofu.plan(self.graph, devices=4, describer=d)
    b = api.plan_view(view.from_tofu_graph(self.graph, d), 4, describer=d)
    self.assertEqual(a.to_json(), b.to_json())

  def test_partition_moves_the_plans_bytes(self):
    job = tf_tofu.partition(self.graph, devices=4, comm="collective")
    self.assertEqual(tf_tofu.count_transfer_bytes(job.partitioned.graph_def),
                     job.plan.total_bytes)
    self.assertEqual(job.partitioned.comm, "collective")
    self.assertEqual(set(job.partitioned.fetches), set(self.graph.fetches))

  def test_a_saved_plan_gives_the_same_partition(self):
    first = tf_tofu.partition(self.graph, devices=3, planner="spartan")
    again = tf_tofu.partition(self.graph, devices=None, plan_json=first.plan.to_json())
    self.assertEqual(again.plan.to_json(), first.plan.to_json())
    self.assertEqual(again.partitioned.graph_def.SerializeToString(deterministic=True),
                     first.partitioned.graph_def.SerializeToString(deterministic=True))

  def test_plan_reports_memory_equal_to_the_rewrites_liveness(self):
    from tf_tofu.rewrite import memory as rewrite_memory
    plan = tf_tofu.plan(self.graph, devices=4)
    self.assertEqual(set(plan.memory["per_device"]), set(plan.devices))
    self.assertEqual(plan.memory["worst"], max(plan.memory["per_device"].values()))
    job = tf_tofu.partition(self.graph, devices=4)
    self.assertIsNone(job.plan.memory)  # the rewrite has its own estimate
    self.assertEqual(plan.memory["per_device"],
                     rewrite_memory.partitioned_peak(job.partitioned).peak)
    self.assertIn("peak memory per device (estimate)", plan.report())
    self.assertEqual(tf_tofu.Plan.from_json(plan.to_json()).memory, plan.memory)
    self.assertIsNone(tf_tofu.plan(self.graph, devices=4, memory=False).memory)

  def test_unknown_planner_and_constraint(self):
    with self.assertRaisesRegex(ValueError, "unknown planner 'magic'"):
      tf_tofu.plan(self.graph, devices=2, planner="magic")
    with self.assertRaisesRegex(ValueError, "neither a tensor nor an op"):
      tf_tofu.plan(self.graph, devices=2, constraints={"nope": "rep"})


class NoReferenceCyclesTest(absltest.TestCase):
  """What planning and the rewrite allocate is freed by reference counting: a reference
  cycle (a recursive closure, as op_tiles' walk and the guillotine concats were) would keep
  a whole memory model, or a rewrite's builder, alive until the cyclic collector ran, and
  that collector's passes over them cost seconds on large graphs."""

  def test_plan_memory_estimate_and_rewrite_leave_no_cyclic_garbage(self):
    from tf_tofu.rewrite import partition_graph_def
    step = models.tiny("wresnet", optimizer="adam")  # halos: pieces concatenated by trees
    graph = tf_tofu.trace(step.fn, *step.input_signature)
    describer = Describer()
    sgraph = view.from_tofu_graph(graph, describer)
    gc.collect()
    gc.disable()
    try:
      plan = api.plan_view(sgraph, 4, describer=describer, memory=True)
      self.assertIsNotNone(plan.memory)
      self.assertEqual(gc.collect(), 0)  # unreachable objects found: none
      partitioned = partition_graph_def(sgraph, plan, describer, fetches=list(graph.fetches))
      self.assertIn("ConcatV2", {n.op for n in partitioned.graph_def.node})
      del partitioned
      self.assertEqual(gc.collect(), 0)
    finally:
      gc.enable()


if __name__ == "__main__":
  absltest.main()
