"""Tests for tf_tofu.search.baselines: each baseline lays tensors out as its definition says."""

from absl.testing import absltest

import tf_tofu
from tf_tofu import models
from tf_tofu.graph import view
from tf_tofu.opdefs.registry import Describer
from tf_tofu.core.states import REP, Cut
from tf_tofu.search import planners


class BaselinesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    step = models.tiny("mlp", optimizer="sgd")   # batch 4, width 8: every dim 0 cuts 2 ways
    cls.graph = tf_tofu.trace(step.fn, *step.input_signature)
    cls.describer = Describer()
    cls.view = view.from_tofu_graph(cls.graph, cls.describer)

  def run_planner(self, name, k=2):
    return planners.run(name, self.view, k, self.describer)

  def test_datapar_replicates_variables_and_cuts_the_batch(self):
    res = self.run_planner("datapar")
    handles = {v.handle for v in self.graph.variables}
    for h in handles:
      self.assertEqual(res.layouts[h], (REP,), h)
    x = self.graph.feeds[0]
    self.assertEqual(res.layouts[x], (Cut(0),))
    for v in self.graph.variables:   # the gradient is summed over workers: an all-reduce
      self.assertEqual(res.layouts.get(v.gradient, (REP,)), (REP,), v.name)

  def test_allrow_cuts_dim_0_wherever_it_can(self):
    res = self.run_planner("allrow")
    for t, layout in res.layouts.items():
      shape = self.view.tensors[t].shape
      if shape and shape[0] >= 2:
        self.assertEqual(layout, (Cut(0),), f"{t} {shape}")

  def test_every_baseline_prices_on_the_same_model_as_tofu(self):
    tofu = self.run_planner("tofu", k=4)
    for name in sorted(planners.PLANNERS):
      res = self.run_planner(name, k=4)
      self.assertEqual(res.factors, tofu.factors, name)
      self.assertGreaterEqual(res.evaluation.total_bytes, 0, name)
      self.assertEqual(sum(res.evaluation.level_bytes), res.evaluation.total_bytes, name)


if __name__ == "__main__":
  absltest.main()
