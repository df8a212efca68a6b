"""Tests for tf_tofu.opdefs.cases.random_cases: every case builds, is described and runs.

Also: the cases cover exactly the op types ``random_ops`` describes, and each
kernel is stateless (the same inputs draw the same values twice), which is
what makes running a sampler replicated on every device exact.
"""

import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.opdefs import kernels, random_ops, registry, validate
from tf_tofu.opdefs.cases import Fixed, random_cases

CASES = random_cases.CASES


class RandomCasesTest(parameterized.TestCase):

  @parameterized.named_parameters((f"{i:02d}_{c.op_type}", c) for i, c in enumerate(CASES))
  def test_builds_is_described_and_draws_the_same_twice(self, case):
    ctx, values = validate.build_case(case)
    if case.op_type in random_ops.KEY_COUNTER_SAMPLERS + random_ops.SEED_SAMPLERS:
      self.assertIsInstance(case.flat_inputs()[0], Fixed)  # the shape
    sem = registry.lookup(case.op_type)(ctx)
    first = kernels.run_op(ctx.op_type, ctx.attrs, values)
    again = kernels.run_op(ctx.op_type, ctx.attrs, values)
    self.assertEqual([o.shape for o in first], [o.shape for o in sem.outputs])
    for a, b in zip(first, again):
      np.testing.assert_array_equal(a, b)

  def test_cases_cover_exactly_the_described_samplers(self):
    described = {t for t in registry.described_op_types()
                 if registry.lookup(t).__module__ == random_ops.__name__}
    self.assertEqual({c.op_type for c in CASES}, described)
    self.assertLen(described, 12)

  def test_float64_draws_are_float64(self):
    float64 = [c for c in CASES if c.attrs.get("dtype") == "float64"]
    self.assertLen(float64, 2)
    for case in float64:
      ctx, values = validate.build_case(case)
      self.assertEqual(kernels.run_op(ctx.op_type, ctx.attrs, values)[0].dtype, np.float64)


if __name__ == "__main__":
  absltest.main()
