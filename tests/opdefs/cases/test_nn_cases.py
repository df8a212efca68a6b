"""Tests for tf_tofu.opdefs.cases.nn_cases: every case builds, is described and runs its kernel.

Also what the module promises: the cases cover exactly the op types ``nn_ops``
describes; dims stay <= 12; every padding a windowed op's OpDef allows and
strides 1 and 2 occur; ``out_size`` is TensorFlow's output-size rule; the helpers
build the stated cases; and every gradient case takes its shapes from the
forward geometry (checked by running the forward op in TensorFlow).
"""

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized
from tensorflow.python.framework import op_def_registry

from tests.opdefs.cases import casetest
from tf_tofu.opdefs import nn_ops
from tf_tofu.opdefs.cases import Case, Fixed, Rand, nn_cases

CASES = nn_cases.CASES

# FusedBatchNormGradV3's reserve_space_4/5 (outputs 3 and 4) hold nothing, and their
# shape depends on which CPU kernel runs for 4-D inputs: TensorFlow's own kernel
# allocates (0,), as graph shape inference says; the oneDNN kernel (on by default on
# CPUs with AVX-512 and newer, TF_ENABLE_ONEDNN_OPTS) allocates scalars.  Either is
# the kernel's; any other shape is not.
_KERNEL_SHAPES = {("FusedBatchNormGradV3", 4, 3): {(), (0,)},
                  ("FusedBatchNormGradV3", 4, 4): {(), (0,)}}

_WINDOWED = ("AvgPool", "AvgPoolGrad", "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput",
             "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter",
             "DepthwiseConv2dNativeBackpropInput", "MaxPool", "MaxPoolGrad")


def _zeros(spec) -> tf.Tensor:
  """A zero tensor of a Rand's shape, or of the shape a Fixed shape input holds."""
  return tf.zeros(spec.shape if isinstance(spec, Rand) else list(spec.value))


def _forward_shape(case: Case) -> tuple:
  """The output shape of the forward op of a gradient case, computed by TensorFlow."""
  a = case.attrs
  if case.op_type.endswith(("BackpropInput", "BackpropFilter")):
    x, f, _ = case.flat_inputs()  # input_sizes or x; filter or filter_sizes; dy
    fwd = (tf.raw_ops.DepthwiseConv2dNative if case.op_type.startswith("Depthwise")
           else tf.raw_ops.Conv2D)
    return tuple(fwd(input=_zeros(x), filter=_zeros(f), **a).shape)
  if case.op_type == "AvgPoolGrad":
    return tuple(tf.raw_ops.AvgPool(value=_zeros(case.flat_inputs()[0]), **a).shape)
  if case.op_type == "MaxPoolGrad":
    return tuple(tf.raw_ops.MaxPool(input=_zeros(case.flat_inputs()[0]), **a).shape)
  raise ValueError(case.op_type)


class EveryCaseTest(parameterized.TestCase):

  @parameterized.named_parameters((casetest.case_name(i, c), c) for i, c in enumerate(CASES))
  def test_builds_is_described_and_runs(self, case):
    ctx, values, outs = casetest.build_describe_run(self, case)
    rank = len(values[0].shape)
    for k, (t, out) in enumerate(zip(ctx.outputs, outs)):
      allowed = _KERNEL_SHAPES.get((case.op_type, rank, k), {t.shape})
      self.assertIn(out.shape, allowed, f"output {k}")
    self.assertLen(outs, len(ctx.outputs))


class ModuleTest(casetest.ModuleChecks, absltest.TestCase):

  CASES = CASES
  OPS_MODULE = nn_ops
  OP_TYPE_COUNT = 18

  def test_dims_are_at_most_12(self):
    dims = []
    for case in CASES:
      for spec in case.flat_inputs():  # a Fixed input of nn cases is a shape
        dims += list(spec.shape) if isinstance(spec, Rand) else list(np.ravel(spec.value))
    self.assertEqual(max(dims), 12)

  def test_every_allowed_padding_and_strides_1_and_2_occur(self):
    paddings, strides = {}, set()
    for case in CASES:
      if "padding" in case.attrs:
        paddings.setdefault(case.op_type, set()).add(case.attrs["padding"])
        strides |= set(case.attrs["strides"][1:3])
    self.assertEqual(sorted(paddings), sorted(_WINDOWED))
    for op_type, got in paddings.items():
      (allowed,) = [a.allowed_values.list.s for a in op_def_registry.get(op_type).attr
                    if a.name == "padding"]
      self.assertEqual(got, {p.decode() for p in allowed}, op_type)
    self.assertEqual(paddings["AvgPool"], {"SAME", "VALID"})  # AvgPool has no EXPLICIT
    self.assertLessEqual({1, 2}, strides)


class OutputSizeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("same_stride_1", 9, 3, 1, "SAME", 1, (0, 0), 9),
      ("same_stride_2_odd", 11, 3, 2, "SAME", 1, (0, 0), 6),
      ("same_7x7_stem", 12, 7, 2, "SAME", 1, (0, 0), 6),
      ("same_dilated", 4, 3, 1, "SAME", 2, (0, 0), 4),
      ("same_size_one", 1, 3, 1, "SAME", 1, (0, 0), 1),
      ("valid_stride_2", 9, 3, 2, "VALID", 1, (0, 0), 4),
      ("valid_dilated_stride_2", 9, 3, 2, "VALID", 2, (0, 0), 3),
      ("valid_stride_3", 10, 3, 3, "VALID", 1, (0, 0), 3),
      ("valid_1x1_stride_2", 8, 1, 2, "VALID", 1, (0, 0), 4),
      ("explicit", 7, 3, 1, "EXPLICIT", 1, (1, 2), 8),
      ("explicit_stride_2", 10, 3, 2, "EXPLICIT", 1, (2, 1), 6),
  )
  def test_out_is_tensorflows_rule(self, size, k, s, padding, d, pads, want):
    self.assertEqual(nn_cases.out_size(size, k, s, padding, d=d, pads=pads), want)
    attrs = nn_cases.conv_attrs((s, 1), padding, (pads, (0, 0)), d=(d, 1))
    y = tf.raw_ops.Conv2D(input=tf.zeros((1, size, 1, 1)), filter=tf.zeros((k, 1, 1, 1)),
                          **attrs)
    self.assertEqual(y.shape[1], want)


class HelpersTest(absltest.TestCase):

  def test_conv_attrs(self):
    self.assertEqual(nn_cases.conv_attrs((1, 1), "SAME"),
                     {"strides": [1, 1, 1, 1], "padding": "SAME"})
    self.assertEqual(nn_cases.conv_attrs((2, 1), "VALID", d=(2, 3)),
                     {"strides": [1, 2, 1, 1], "padding": "VALID", "dilations": [1, 2, 3, 1]})
    self.assertEqual(nn_cases.conv_attrs((2, 2), "EXPLICIT", ((2, 1), (1, 0))),
                     {"strides": [1, 2, 2, 1], "padding": "EXPLICIT",
                      "explicit_paddings": [0, 0, 2, 1, 1, 0, 0, 0]})

  def test_conv_grad_cases(self):
    attrs = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    self.assertEqual(nn_cases.conv_grad_cases((4, 11, 10, 3), (3, 3, 3, 5), (2, 2), "SAME",
                                              label="l"), [
        Case("Conv2DBackpropInput", [Fixed([4, 11, 10, 3], "int32"), Rand((3, 3, 3, 5)),
                                     Rand((4, 6, 5, 5))], attrs, label="l"),
        Case("Conv2DBackpropFilter", [Rand((4, 11, 10, 3)), Fixed([3, 3, 3, 5], "int32"),
                                      Rand((4, 6, 5, 5))], attrs, label="l"),
    ])
    # Depthwise: out channels are channels x multiplier (3 x 2).
    bi, bf = nn_cases.conv_grad_cases((3, 10, 9, 3), (3, 3, 3, 2), (2, 2), "SAME",
                                      depthwise=True)
    self.assertEqual((bi.op_type, bf.op_type), ("DepthwiseConv2dNativeBackpropInput",
                                                "DepthwiseConv2dNativeBackpropFilter"))
    self.assertEqual(bi.inputs[2], Rand((3, 5, 5, 6)))

  def test_pool_case(self):
    self.assertEqual(nn_cases.pool_case("MaxPool", (3, 11, 10, 5), (3, 3), (2, 2), "SAME", "l"),
                     Case("MaxPool", [Rand((3, 11, 10, 5))],
                          {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"},
                          label="l"))
    # EXPLICIT ((1, 2), (0, 1)) on 8x9, 3x3 stride 2: (8+3-3)//2+1 = 5 rows, (9+1-3)//2+1 = 4.
    grad = nn_cases.pool_case("MaxPoolGrad", (2, 8, 9, 3), (3, 3), (2, 2), "EXPLICIT",
                              pads=((1, 2), (0, 1)))
    self.assertEqual(grad.inputs, [Rand((2, 8, 9, 3)), Rand((2, 5, 4, 3)), Rand((2, 5, 4, 3))])
    self.assertEqual(grad.attrs["explicit_paddings"], [0, 0, 1, 2, 0, 1, 0, 0])
    avg = nn_cases.pool_case("AvgPoolGrad", (3, 9, 10, 5), (3, 3), (2, 2), "SAME")
    self.assertEqual(avg.inputs, [Fixed([3, 9, 10, 5], "int32"), Rand((3, 5, 5, 5))])

  def test_bn_case(self):
    case = nn_cases.bn_case((3, 4, 5, 6), True, 0.3, label="l")
    self.assertEqual(case, Case(
        "FusedBatchNormV3",
        [Rand((3, 4, 5, 6)), Rand((6,)), Rand((6,)), Rand((6,)), Rand((6,), lo=0.5, hi=2.0)],
        {"epsilon": 1e-3, "exponential_avg_factor": 0.3, "is_training": True,
         "data_format": "NHWC"}, label="l"))
    empty = nn_cases.bn_case((2, 5, 3, 5), True, empty_stats=True)
    self.assertEqual([s.shape for s in empty.flat_inputs()][3:], [(0,), (0,)])

  def test_bn_grad_case(self):
    case = nn_cases.bn_grad_case((2, 3, 4, 3, 5), False, fmt="NDHWC")
    self.assertEqual(case, Case(
        "FusedBatchNormGradV3",
        [Rand((2, 3, 4, 3, 5)), Rand((2, 3, 4, 3, 5)), Rand((5,)), Rand((5,)),
         Rand((5,), lo=0.5, hi=2.0), Rand((0,))],
        {"epsilon": 1e-3, "is_training": False, "data_format": "NDHWC"}))


class ForwardGeometryTest(absltest.TestCase):

  def test_gradient_shapes_follow_the_forward_op(self):
    checked = 0
    for case in CASES:
      flat = case.flat_inputs()
      if case.op_type.endswith(("BackpropInput", "BackpropFilter", "PoolGrad")):
        dy = flat[-1]
        self.assertEqual(tuple(dy.shape), _forward_shape(case), str(case))
        if case.op_type == "MaxPoolGrad":
          self.assertEqual(flat[1].shape, dy.shape, str(case))  # the forward output y
      elif case.op_type == "FusedBatchNormGradV3":
        c = flat[1].shape[-1]
        self.assertEqual([s.shape for s in flat], [flat[1].shape] * 2 + [(c,)] * 3 + [(0,)],
                         str(case))
      else:
        continue
      checked += 1
    self.assertEqual(checked, 2 * 14 + 2 * 4 + 3 + 3 + 4)


if __name__ == "__main__":
  absltest.main()
