"""Tests for tf_tofu.opdefs.registry: one description per op type, a per-object cache."""

from absl.testing import absltest

from tf_tofu.opdefs import registry
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

  def test_strategies_are_computed_once(self):
    d = registry.Describer()
    sem, _ = d(_matmul("a"))
    self.assertIs(d.strategies(sem, 2), d.strategies(sem, 2))
    self.assertEqual(d.strategy(sem, "nope", 2), None)
    self.assertEqual(d.strategy(sem, "i", 2).var, "i")


if __name__ == "__main__":
  absltest.main()
