"""Tests for tf_tofu.opdefs.cases.math_cases: every case builds, is described and runs its kernel.

Also what the module promises about its inputs: the cases cover exactly the
op types ``math_ops`` describes; inputs are drawn from each kernel's domain
(every float result is finite, apart from the cases that feed nan and inf);
binary ops broadcast NumPy-style over the stated shape pairs; the integer
division family rounds as its name says on negative dividends; the Einsum and
reduction cases compute what their equations and axes say.  Numerics: the
kernels run in float64 and are compared with numpy within atol 1e-10.
"""

import numpy as np
from absl.testing import absltest, parameterized

from tests.opdefs.cases import casetest
from tf_tofu.opdefs import kernels, math_ops, validate
from tf_tofu.opdefs.cases import math_cases

CASES = math_cases.CASES
ATOL = 1e-10


def _shapes(case) -> list:
  return [casetest.stated_shape(s) for s in case.flat_inputs()]


def _run64(case):
  """The case's kernel on its own inputs, with float32 inputs widened to float64."""
  ctx, values = validate.build_case(case)
  values = [v.astype(np.float64) if v.dtype == np.float32 else v for v in values]
  return values, kernels.run_op(ctx.op_type, ctx.attrs, values)


class EveryCaseTest(parameterized.TestCase):

  @parameterized.named_parameters((casetest.case_name(i, c, 3), c) for i, c in enumerate(CASES))
  def test_builds_is_described_and_runs(self, case):
    ctx, values, outs = casetest.build_describe_run(self, case)
    self.assertEqual([o.shape for o in outs], [t.shape for t in ctx.outputs])
    if case.label != "nan and inf":  # inputs from the kernel's domain give finite results
      for o in outs:
        if o.dtype.kind not in "biu":
          self.assertTrue(np.all(np.isfinite(o.astype(np.float64))), f"{case}: {o}")
    if case.op_type in math_cases._BINARY:
      self.assertEqual(outs[0].shape, np.broadcast_shapes(*_shapes(case)))


class CoverageTest(casetest.ModuleChecks, absltest.TestCase):

  CASES = CASES
  OPS_MODULE = math_ops
  OP_TYPE_COUNT = 109

class InputDomainTest(absltest.TestCase):

  def test_unary_op_on_its_domain(self):
    for op, spec in math_cases._UNARY.items():
      plain = [c for c in CASES if c.op_type == op and not c.label]
      self.assertLen(plain, 1, op)
      (x,) = plain[0].flat_inputs()
      self.assertEqual(x.shape, (5, 7), op)
      spec = spec or {}
      self.assertEqual((x.dtype, x.lo, x.hi),
                       (spec.get("dtype", "float32"), spec.get("lo"), spec.get("hi")), op)

  def test_logical_ops_take_bools(self):
    for case in CASES:
      if case.op_type.startswith("Logical"):
        self.assertEqual({s.dtype for s in case.flat_inputs()}, {"bool"}, str(case))

  def test_binary_ops_take_every_broadcast_pair(self):
    pairs = [(x, y) for x, y, _ in math_cases._BROADCASTS]
    self.assertEqual(pairs, [((5, 7), (5, 7)), ((5, 1, 7), (6, 1)), ((6, 1), (5, 1, 7))])
    for op in math_cases._BINARY:
      got = [tuple(_shapes(c)) for c in CASES if c.op_type == op and len(_shapes(c)) == 2]
      for pair in pairs:
        self.assertIn(pair, got, op)

  def test_gradient_ops_take_equal_shapes(self):
    for case in CASES:
      if case.op_type in math_cases._GRADS:
        x, y = _shapes(case)
        self.assertEqual(x, y, str(case))


class IntegerDivisionTest(parameterized.TestCase):
  """The int32 cases: FloorDiv, FloorMod round down; Div, TruncateDiv, Mod, TruncateMod to zero."""

  _NUMPY = {
      "Div": lambda x, y: np.trunc(x / y), "TruncateDiv": lambda x, y: np.trunc(x / y),
      "FloorDiv": np.floor_divide, "Mod": np.fmod, "TruncateMod": np.fmod,
      "FloorMod": np.mod,
  }

  @parameterized.named_parameters((op, op) for op in _NUMPY)
  def test_int32_cases(self, op):
    cases = [c for c in CASES if c.op_type == op and c.flat_inputs()[0].dtype == "int32"]
    self.assertNotEmpty(cases)
    for case in cases:
      (x, y), (out,) = _run64(case)
      self.assertEqual((x.dtype, y.dtype, out.dtype), (np.int32,) * 3, str(case))
      self.assertGreaterEqual(int(y.min()), 1, f"{case}: divisors must be positive")
      self.assertLess(int(x.min()), 0, f"{case}: needs negative dividends")
      xb, yb = np.broadcast_arrays(x.astype(np.int64), y.astype(np.int64))
      np.testing.assert_array_equal(out, self._NUMPY[op](xb, yb).astype(np.int64), str(case))
      # Negative dividends tell rounding down from rounding towards zero.
      self.assertTrue(np.any(np.floor_divide(xb, yb) != np.trunc(xb / yb)), str(case))


class EinsumTest(absltest.TestCase):

  def test_einsum_case_shapes_follow_the_sizes(self):
    case = math_cases.einsum_case("abde,cde->abc", "x")
    self.assertEqual((case.op_type, case.attrs, case.label),
                     ("Einsum", {"equation": "abde,cde->abc"}, "x"))
    self.assertLen(case.inputs, 1)  # one list argument
    self.assertEqual(_shapes(case), [(4, 5, 7, 3), (6, 7, 3)])

  def test_every_gpt_equation_has_its_case(self):
    gpt = [c.attrs["equation"] for c in CASES if c.label == "GPT block"]
    self.assertEqual(gpt, list(math_cases.EINSUM_EQUATIONS))

  def test_every_einsum_case_matches_numpy(self):
    cases = [c for c in CASES if c.op_type == "Einsum"]
    self.assertLen(cases, len(math_cases.EINSUM_EQUATIONS) + 13)
    for case in cases:
      values, (out,) = _run64(case)
      self.assertEqual(out.dtype, np.float64)
      want = np.einsum(case.attrs["equation"], *values)
      np.testing.assert_allclose(out, want, rtol=0, atol=ATOL, err_msg=str(case))


class ReductionTest(absltest.TestCase):

  def test_sum_and_mean_axes(self):
    # (axes, keep_dims) -> output shape of a (5, 6, 7) input, by hand.
    want_shapes = [(5, 7), (5, 6, 1), (6,), (1, 6, 1), (), (5, 6, 7)]
    for op, reduce in (("Sum", np.sum), ("Mean", np.mean)):
      cases = [c for c in CASES if c.op_type == op and _shapes(c)[0] == (5, 6, 7)]
      self.assertLen(cases, len(math_cases._AXES), op)
      for case, (axes, keep, label), shape in zip(cases, math_cases._AXES, want_shapes):
        self.assertEqual((case.label, case.attrs), (label, {"keep_dims": keep}))
        (x, ax), (out,) = _run64(case)
        self.assertEqual(out.shape, shape, str(case))
        want = reduce(x, axis=tuple(int(a) % 3 for a in ax), keepdims=keep)
        np.testing.assert_allclose(out, want, rtol=0, atol=ATOL, err_msg=str(case))


if __name__ == "__main__":
  absltest.main()
