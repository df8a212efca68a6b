"""Tests for tf_tofu.opdefs.strategy: what a strategy records and how it prints."""

from absl.testing import absltest

from tf_tofu.core.regions import Region
from tf_tofu.core.states import PARTIAL, REP, Cut
from tf_tofu.opdefs import analysis
from tests.opdefs.test_analysis import matmul_sem


class StrategyTest(absltest.TestCase):

  def test_matmul_strategies_print_their_states(self):
    strats = analysis.strategies(matmul_sem(m=6, k=5, n=7), 2)
    self.assertEqual([str(s) for s in strats],
                     ["output i /2: (cut(0), rep) -> (cut(0))",
                      "output j /2: (rep, cut(1)) -> (cut(1))",
                      "reduce k /2: (cut(1), cut(0)) -> (partial)"])

  def test_input_needs_carry_the_exact_regions(self):
    reduce_k = analysis.strategies(matmul_sem(m=6, k=5, n=7), 2)[2]
    self.assertEqual(reduce_k.outputs, (PARTIAL,))
    a_need, b_need = reduce_k.inputs
    self.assertEqual((a_need.state, b_need.state), (Cut(1), Cut(0)))
    # k = 5 cut 2 ways: worker 0 reads columns [0, 3) of A, worker 1 [3, 5).
    self.assertEqual(a_need.regions, (Region.of([(0, 6), (0, 3)]), Region.of([(0, 6), (3, 5)])))
    self.assertEqual(b_need.regions, (Region.of([(0, 3), (0, 7)]), Region.of([(3, 5), (0, 7)])))
    self.assertLen(reduce_k.workers, 2)

  def test_replicated_input_needs_the_whole_tensor_on_every_worker(self):
    output_i = analysis.strategies(matmul_sem(m=6, k=5, n=7), 3)[0]
    b_need = output_i.inputs[1]
    self.assertEqual(b_need.state, REP)
    self.assertEqual(b_need.regions, (Region.of([(0, 5), (0, 7)]),) * 3)


if __name__ == "__main__":
  absltest.main()
