"""Tests for tf_tofu.opdefs.validate: the kernel check catches wrong descriptions."""

from absl.testing import absltest

from tf_tofu.opdefs import registry, tdl, validate
from tf_tofu.opdefs.cases import Case, Rand, all_cases
from tf_tofu.opdefs.description import Semantics, ShardSpec


def transposed_matmul(op):
  """A planted error: reads A[k, i] where MatMul reads A[i, k]."""
  a, b = op.input(0), op.input(1)
  m, k_ = a.shape
  n = b.shape[1]
  i, j, k = tdl.Var("i", m), tdl.Var("j", n), tdl.Var("k", k_)
  return Semantics(op, [tdl.Output((i, j), tdl.Sum(k, a[k, i] * b[k, j]))])


def conv_without_padding_hook(op):
  """A planted error: the Conv2D lambda is right, but workers keep SAME padding."""
  sem = registry.lookup("Conv2D")(op)
  return Semantics(op, sem.outputs, shard=lambda w: ShardSpec())


class ValidateTest(absltest.TestCase):

  def test_correct_description_passes(self):
    res = validate.check_case(Case("MatMul", [Rand((6, 6)), Rand((6, 5))]))
    self.assertIsNone(res.error)
    self.assertEqual(res.mismatches, [])
    self.assertEqual(res.checked, 9)  # 3 strategies for each of n = 2, 3, 4

  def test_transposed_access_is_caught(self):
    res = validate.check_case(Case("MatMul", [Rand((6, 6)), Rand((6, 5))]),
                              describer=transposed_matmul)
    self.assertIsNone(res.error)
    self.assertNotEmpty(res.mismatches)
    # Cutting the output rows reads the wrong columns of A; the partial over k
    # sums wrong products; only the column cut of B happens to be unaffected.
    failing = {m.split()[2] for m in res.mismatches}
    self.assertIn("i", failing)

  def test_missing_shard_hook_is_caught(self):
    case = Case("Conv2D", [Rand((2, 7, 7, 2)), Rand((3, 3, 2, 3))],
                {"strides": [1, 1, 1, 1], "padding": "SAME"})
    self.assertEqual(validate.check_case(case).mismatches, [])
    bad = validate.check_case(case, describer=conv_without_padding_hook)
    self.assertTrue(bad.mismatches or bad.error)

  def test_summary_line_and_table(self):
    results = [validate.check_case(Case("MatMul", [Rand((4, 3)), Rand((3, 2))]))]
    self.assertEqual(validate.summary_line(results),
                     "validated 1 op types, 1 cases, 6 strategies: 0 mismatches")
    table = validate.coverage_markdown(results)
    self.assertIn("| MatMul |", table)
    self.assertIn("reduce k /2", table)

  def test_every_described_op_has_a_case(self):
    cased = {c.op_type for c in all_cases()}
    missing = sorted(set(registry.described_op_types()) - cased)
    self.assertEqual(missing, [], "described op types without a kernel-check case")


if __name__ == "__main__":
  absltest.main()
