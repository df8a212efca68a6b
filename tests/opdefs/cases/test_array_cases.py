"""Tests for tf_tofu.opdefs.cases.array_cases: every case builds, is described and runs its kernel.

Also: the cases cover exactly the op types ``array_ops`` describes, follow the
OpDef (argument order, list arguments, OpDef attribute names), draw index
tensors inside the indexed range, and give each StridedSliceGrad the shape of
its StridedSlice's output.
"""

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tests.opdefs.cases import casetest
from tf_tofu.opdefs import array_ops
from tf_tofu.opdefs.cases import Fixed, Rand, array_cases

CASES = array_cases.CASES


class EveryCaseTest(parameterized.TestCase):

  @parameterized.named_parameters((casetest.case_name(i, c), c) for i, c in enumerate(CASES))
  def test_builds_is_described_and_runs(self, case):
    ctx, values, outs = casetest.build_describe_run(self, case)
    self.assertEqual([o.shape for o in outs], [t.shape for t in ctx.outputs])


class ModuleTest(casetest.ModuleChecks, absltest.TestCase):

  CASES = CASES
  OPS_MODULE = array_ops
  OP_TYPE_COUNT = 30

  def test_index_inputs_lie_in_the_indexed_range(self):
    """Rand ids are drawn in [lo, hi): hi must not exceed the size they index."""
    checked = 0
    for case in CASES:
      flat = case.flat_inputs()
      if case.op_type in ("Gather", "GatherV2"):
        params, ids = flat[0], flat[1]
        axis = int(flat[2].value) if case.op_type == "GatherV2" else 0
        size = params.shape[axis]
      elif case.op_type == "OneHot":
        ids, size = flat[0], int(flat[1].value)
      elif case.op_type.startswith("UnsortedSegment"):
        ids, size = flat[1], int(flat[2].value)
      elif case.op_type == "ScatterNd":  # every index column addresses one of shape's dims
        ids = flat[0]
        size = min(list(np.ravel(flat[2].value))[:ids.shape[-1]])
      else:
        continue
      self.assertIsInstance(ids, Rand, str(case))
      self.assertIn(ids.dtype, ("int32", "int64"), str(case))
      self.assertGreaterEqual(ids.lo, 0, str(case))
      self.assertLessEqual(ids.hi, size, str(case))
      checked += 1
    self.assertEqual(checked, 5 + 3 + 5 + 3)

  def test_strided_slice_grad_dy_has_the_forward_output_shape(self):
    grads = [c for c in CASES if c.op_type == "StridedSliceGrad"]
    self.assertLen(grads, 5)
    for case in grads:
      shape, begin, end, strides, dy = case.flat_inputs()
      y = tf.raw_ops.StridedSlice(input=tf.zeros(shape.value), begin=begin.value,
                                  end=end.value, strides=strides.value, **case.attrs)
      self.assertEqual(tuple(dy.shape), tuple(y.shape), str(case))

  def test_negative_axis_labels_have_a_negative_axis(self):
    labelled = [c for c in CASES if "negative axis" in c.label or "negative dim" in c.label]
    self.assertLen(labelled, 8)
    for case in labelled:
      ints = [np.asarray(s.value).ravel() for s in case.flat_inputs() if isinstance(s, Fixed)]
      ints += [np.ravel(v) for v in case.attrs.values()]
      self.assertTrue(any(np.any(v < 0) for v in ints if v.size), str(case))


if __name__ == "__main__":
  absltest.main()
