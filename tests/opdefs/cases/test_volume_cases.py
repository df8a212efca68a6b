"""Tests for tf_tofu.opdefs.cases.volume_cases: every case builds, is described and runs.

Also: the cases cover exactly the op types ``volume_ops`` describes, each
once in ``all_cases``, following the OpDef; every gradient case's
``out_backprop``/``grad`` has the shape TensorFlow's forward op gives; both
paddings and both strides occur.
"""

import tensorflow as tf
from absl.testing import absltest, parameterized

from tests.opdefs.cases import casetest
from tf_tofu.opdefs import volume_ops
from tf_tofu.opdefs.cases import volume_cases

CASES = volume_cases.CASES


class EveryCaseTest(parameterized.TestCase):

  @parameterized.named_parameters((casetest.case_name(i, c), c) for i, c in enumerate(CASES))
  def test_builds_is_described_and_runs(self, case):
    ctx, _, outs = casetest.build_describe_run(self, case)
    self.assertEqual([o.shape for o in outs], [t.shape for t in ctx.outputs])


class ModuleTest(casetest.ModuleChecks, absltest.TestCase):

  CASES = CASES
  OPS_MODULE = volume_ops
  OP_TYPE_COUNT = 7

  def test_gradient_shapes_follow_the_forward_op(self):
    checked = 0
    for case in CASES:
      flat = case.flat_inputs()
      strides, padding = case.attrs["strides"], case.attrs["padding"]
      if case.op_type.startswith("Conv3DBackprop"):
        x = flat[0] if case.op_type.endswith("FilterV2") else flat[0].value
        f = flat[1].value if case.op_type.endswith("FilterV2") else flat[1].shape
        y = tf.nn.conv3d(tf.zeros(tuple(x if isinstance(x, list) else x.shape)),
                         tf.zeros(tuple(f)), strides, padding)
      elif case.op_type in ("MaxPool3DGrad", "AvgPool3DGrad"):
        x = flat[0].shape if case.op_type == "MaxPool3DGrad" else tuple(flat[0].value)
        y = tf.nn.max_pool3d(tf.zeros(x), case.attrs["ksize"], strides, padding)
      else:
        continue
      self.assertEqual(tuple(flat[-1].shape), tuple(y.shape), str(case))
      checked += 1
    self.assertEqual(checked, 2 + 2 + 2 + 2)

  def test_paddings_and_strides_occur(self):
    self.assertEqual({c.attrs["padding"] for c in CASES}, {"SAME", "VALID"})
    self.assertEqual({s for c in CASES for s in c.attrs["strides"][1:4]}, {1, 2})


if __name__ == "__main__":
  absltest.main()
