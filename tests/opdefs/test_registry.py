"""Tests for tf_tofu.opdefs.registry: one description per op type, a per-object cache."""

import numpy as np
from absl.testing import absltest

from tf_tofu.core.states import REP, Cut
from tf_tofu.opdefs import analysis, registry
from tf_tofu.opdefs.description import OpContext, TensorInfo


def _matmul(name, m=4, k=3, n=5):
  return OpContext(name=name, op_type="MatMul",
                   attrs={"T": "float32", "transpose_a": False, "transpose_b": False},
                   inputs=(TensorInfo((m, k), "float32"), TensorInfo((k, n), "float32")),
                   outputs=(TensorInfo((m, n), "float32"),))


class RegistryTest(absltest.TestCase):

  def test_lookup(self):
    self.assertIsNotNone(registry.lookup("MatMul"))
    self.assertIsNone(registry.lookup("NoSuchOp"))
    types = registry.described_op_types()
    self.assertEqual(list(types), sorted(types))
    self.assertIn("Conv2D", types)

  def test_an_op_type_is_described_once(self):
    with self.assertRaisesRegex(ValueError, "'MatMul' is described twice"):
      registry.describe("MatMul")(lambda op: None)

  def test_describer_caches_identical_ops_and_names_each(self):
    d = registry.Describer()
    a, _ = d(_matmul("a"))
    b, _ = d(_matmul("b"))
    self.assertIs(a, b)           # same type, attributes and shapes: one Semantics
    self.assertEqual(d.hits, 1)
    c, _ = d(_matmul("c", m=6))
    self.assertIsNot(c, a)
    unknown = OpContext(name="u1", op_type="NoSuchOp", attrs={}, inputs=(), outputs=())
    self.assertEqual(d(unknown), (None, "no description for NoSuchOp"))
    self.assertEqual(registry.context_key(_matmul("x")), registry.context_key(_matmul("y")))

  def test_a_description_made_elsewhere_is_adopted_for_its_key(self):
    made = registry.semantics_of(_matmul("ingested"))  # as ingestion describes an op
    d = registry.Describer()
    d.adopt(made)
    got, reason = d(_matmul("later"))  # another op of the key: no description runs
    self.assertIs(got, made)
    self.assertIsNone(reason)
    self.assertEqual(d.hits, 1)
    d.adopt(registry.semantics_of(_matmul("again")))  # one is kept already
    self.assertIs(d(_matmul("x"))[0], made)

  def test_strategies_are_computed_once(self):
    d = registry.Describer()
    sem, _ = d(_matmul("a"))
    self.assertIs(d.strategies(sem, 2), d.strategies(sem, 2))
    self.assertEqual(d.strategy(sem, "nope", 2), None)
    self.assertEqual(d.strategy(sem, "i", 2).var, "i")

  def test_a_strategy_is_one_of_the_strategies_once_those_are_known(self):
    d = registry.Describer()
    sem, _ = d(_matmul("a", m=5, k=7, n=3))
    every = d.strategies(sem, 3)
    for s in every:
      self.assertIs(d.strategy(sem, s.var, 3), s)
    self.assertEqual([s.var for s in every], ["i", "j", "k"])

  def test_elementwise_ops_of_one_structure_share_their_strategies(self):
    def binary(op_type, x, y):
      out = tuple(np.broadcast_shapes(x, y))
      return OpContext(name=op_type, op_type=op_type, attrs={"T": "float32"},
                       inputs=(TensorInfo(x, "float32"), TensorInfo(y, "float32")),
                       outputs=(TensorInfo(out, "float32"),))

    d = registry.Describer()
    for x, y in [((6, 5), (5,)), ((6, 5), (6, 5)), ((7, 1, 3), (4, 3)), ((3,), ())]:
      for n in (2, 3, 4):
        sems = [d(binary(t, x, y))[0] for t in ("Mul", "RealDiv", "SquaredDifference")]
        self.assertTrue(all(d.elementwise(sem) for sem in sems))
        shared = d.strategies(sems[0], n)
        for sem in sems:
          self.assertIs(d.strategies(sem, n), shared)
          self.assertEqual(shared, analysis.strategies(sem, n))  # what each alone derives
    # Another structure (no broadcast) does not share: its second input is cut too.
    wide = d.strategies(d(binary("Mul", (6, 5), (6, 5)))[0], 2)
    bcast = d.strategies(d(binary("Mul", (6, 5), (5,)))[0], 2)
    self.assertEqual([s.inputs[1].state for s in wide], [Cut(0), Cut(1)])
    self.assertEqual([s.inputs[1].state for s in bcast], [REP, Cut(0)])


if __name__ == "__main__":
  absltest.main()
