"""Tests of the neural-network op descriptions (tf_tofu/opdefs/nn_ops.py).

Known answers (which strategies exist, the states of inputs and outputs,
halos, facts) on representative ops, and the kernel check on every case of
``cases/nn_cases.py``: every strategy for n in {2, 3, 4} run on the real
kernel per worker, combined, and compared with the unpartitioned op.
"""

from __future__ import annotations


import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.opdefs import analysis, registry, validate
from tf_tofu.opdefs.cases import Case, Rand, nn_cases
from tf_tofu.opdefs.description import DescriptionError, OpContext, Semantics, TensorInfo
from tf_tofu.core.states import PARTIAL, REP, Cut
from tf_tofu.opdefs.strategy import Strategy


def _semantics(case: Case) -> Semantics:
  ctx, _ = validate.build_case(case)
  return registry.lookup(case.op_type)(ctx)


def _strategies(case: Case, n: int = 2) -> dict[str, Strategy]:
  return {s.var: s for s in analysis.strategies(_semantics(case), n)}


def _conv(x, f, s=1, padding="SAME", **extra) -> Case:
  return Case("Conv2D", [Rand(x), Rand(f)], {"strides": [1, s, s, 1], "padding": padding,
                                              **extra})


class KnownStrategiesTest(parameterized.TestCase):

  def test_conv2d_nhwc_strategies(self):
    case = _conv((4, 9, 9, 3), (3, 3, 3, 5))
    st = _strategies(case)
    self.assertCountEqual(st, ["b", "y", "x", "co", "ky", "kx", "ci"])
    self.assertEqual(st["b"].outputs, (Cut(0),))
    self.assertEqual((st["b"].inputs[0].state, st["b"].inputs[1].state), (Cut(0), REP))
    self.assertEqual(st["co"].outputs, (Cut(3),))
    self.assertEqual((st["co"].inputs[0].state, st["co"].inputs[1].state), (REP, Cut(3)))
    for var, dim in (("y", 1), ("x", 2)):
      s = st[var]
      self.assertEqual(s.outputs, (Cut(dim),))
      self.assertIsNone(s.inputs[0].state, f"{var}: a 3x3 window needs a halo, not a cut")
      r0, r1 = (r.intervals[dim] for r in s.inputs[0].regions)
      self.assertGreater(r0.hi, r1.lo, f"{var}: the halo regions must overlap")
      self.assertEqual(s.inputs[1].state, REP)
    for var, fdim in (("ci", 2), ("ky", 0), ("kx", 1)):
      self.assertEqual(st[var].kind, "reduce")
      self.assertEqual(st[var].outputs, (PARTIAL,), var)
      self.assertEqual(st[var].inputs[1].state, Cut(fdim), var)

  def test_conv2d_worker_padding_is_explicit(self):
    case = _conv((4, 9, 9, 3), (3, 3, 3, 5))
    sem = _semantics(case)
    s = _strategies(case)["y"]
    specs = [sem.shard_spec(w) for w in s.workers]
    self.assertEqual([sp.attrs["explicit_paddings"][2:4] for sp in specs], [[1, 0], [0, 1]])

  @parameterized.parameters(
      ("Conv2D", "NCHW", [(2, 3, 9, 9), (3, 3, 3, 5)]),
      ("BiasAdd", "NCHW", [(2, 3, 9, 9), (3,)]),
      ("FusedBatchNormV3", "NCHW", [(2, 3, 4, 4)] + [(3,)] * 4),
      ("MaxPoolGrad", "NCHW", [(2, 3, 4, 4)] * 3))
  def test_other_data_formats_are_left_whole(self, op_type, fmt, shapes):
    # NCHW kernels do not run on CPU: build the context by hand.
    attrs = {"data_format": fmt, "strides": [1, 1, 1, 1], "ksize": [1, 1, 1, 1],
             "padding": "VALID", "is_training": True}
    ctx = OpContext("op", op_type, attrs, [TensorInfo(s, "float32") for s in shapes])
    with self.assertRaisesRegex(DescriptionError, "data_format 'NCHW'"):
      registry.lookup(op_type)(ctx)

  def test_dilated_conv_gradients_are_left_whole(self):
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "dilations": [1, 2, 2, 1]}
    ctx = OpContext("op", "Conv2DBackpropInput", attrs,
                    [TensorInfo((4,), "int32", np.array([2, 9, 9, 3], np.int32)),
                     TensorInfo((3, 3, 3, 4), "float32"), TensorInfo((2, 9, 9, 4), "float32")])
    with self.assertRaisesRegex(DescriptionError, "dilations"):
      registry.lookup("Conv2DBackpropInput")(ctx)

  def test_conv2d_backprop_filter_batch_is_partial(self):
    case = nn_cases.conv_grad_cases((4, 9, 9, 3), (3, 3, 3, 5), (1, 1), "SAME")[1]
    st = _strategies(case)
    self.assertEqual(st["b"].kind, "reduce")
    self.assertEqual(st["b"].outputs, (PARTIAL,))
    self.assertEqual(st["b"].inputs[0].state, Cut(0))
    self.assertIsNone(st["b"].inputs[1], "filter_sizes is a meta input")
    self.assertEqual(st["b"].inputs[2].state, Cut(0))
    self.assertEqual(st["ky"].outputs, (Cut(0),))
    self.assertEqual(st["co"].outputs, (Cut(3),))
    self.assertEqual(st["y"].outputs, (PARTIAL,))
    sem = _semantics(case)
    w0 = st["ky"].workers[0]
    self.assertEqual(list(sem.shard_spec(w0).meta_inputs[1]), [2, 3, 3, 5])

  def test_conv2d_backprop_input_strategies(self):
    case = nn_cases.conv_grad_cases((4, 11, 10, 3), (3, 3, 3, 5), (2, 2), "SAME")[0]
    st = _strategies(case)
    self.assertCountEqual(st, ["b", "i", "j", "ci", "co"])
    self.assertEqual(st["co"].outputs, (PARTIAL,))
    self.assertEqual(st["i"].outputs, (Cut(1),))
    sem = _semantics(case)
    sizes = [list(sem.shard_spec(w).meta_inputs[0]) for w in st["i"].workers]
    self.assertEqual(sizes, [[4, 6, 10, 3], [4, 5, 10, 3]])

  def test_conv2d_backprop_input_1x1_stride_2_keeps_space_whole(self):
    case = nn_cases.conv_grad_cases((2, 8, 9, 3), (1, 1, 3, 6), (2, 2), "VALID")[0]
    self.assertCountEqual(_strategies(case), ["b", "ci", "co"])
    self.assertEqual(set(analysis.facts(_semantics(case)).opaque_vars), {"i", "j", "kx", "ky"})

  def test_avg_pool_same_has_no_spatial_strategy(self):
    case = nn_cases.pool_case("AvgPool", (3, 9, 10, 5), (3, 3), (2, 2), "SAME")
    for n in (2, 3, 4):
      st = _strategies(case, n)
      self.assertEqual(set(st) & {"y", "x", "ky", "kx"}, set(), f"n={n}")
      self.assertEqual(st["c"].outputs, (Cut(3),), f"n={n}")
    self.assertCountEqual(_strategies(case, 3), ["b", "c"])
    self.assertEqual(set(analysis.facts(_semantics(case)).opaque_vars), {"y", "x", "ky", "kx"})

  def test_avg_pool_valid_cuts_space_and_taps(self):
    case = nn_cases.pool_case("AvgPool", (3, 9, 11, 4), (2, 2), (2, 2), "VALID")
    st = _strategies(case)
    self.assertCountEqual(st, ["b", "y", "x", "c", "ky", "kx"])
    self.assertEqual(st["ky"].outputs, (PARTIAL,))
    sem = _semantics(case)
    spec = sem.shard_spec(st["ky"].workers[0])
    self.assertEqual(spec.attrs["ksize"], [1, 1, 2, 1])
    self.assertEqual(spec.output_scale, (0.5,))

  def test_max_pool_cuts_space_not_taps(self):
    case = nn_cases.pool_case("MaxPool", (3, 11, 10, 5), (3, 3), (2, 2), "SAME")
    st = _strategies(case)
    self.assertCountEqual(st, ["b", "y", "x", "c"])
    self.assertIsNone(st["y"].inputs[0].state)

  def test_max_pool_grad_cuts_batch_and_channel_only(self):
    case = nn_cases.pool_case("MaxPoolGrad", (3, 11, 10, 5), (3, 3), (2, 2), "SAME")
    st = _strategies(case)
    self.assertCountEqual(st, ["b", "c"])
    self.assertEqual([i.state for i in st["c"].inputs], [Cut(3)] * 3)

  def test_fused_batch_norm_training_channel_cut(self):
    case = nn_cases.bn_case((3, 4, 5, 7), True, 0.3)
    for n in (2, 3, 4):
      st = _strategies(case, n)
      self.assertEqual(list(st), ["c"], f"n={n}: only the channel is exact in training")
      s = st["c"]
      self.assertEqual([i.state for i in s.inputs], [Cut(3)] + [Cut(0)] * 4)
      self.assertEqual(s.outputs, (Cut(3), Cut(0), Cut(0), Cut(0), Cut(0), REP))

  def test_fused_batch_norm_training_empty_running_stats_replicated(self):
    case = nn_cases.bn_case((2, 5, 3, 5), True, empty_stats=True)
    s = _strategies(case)["c"]
    self.assertEqual([i.state for i in s.inputs], [Cut(3), Cut(0), Cut(0), REP, REP])

  def test_fused_batch_norm_inference_is_elementwise_in_space(self):
    case = nn_cases.bn_case((3, 4, 5, 7), False)
    st = _strategies(case)
    self.assertCountEqual(st, ["b", "h", "w", "c"])
    self.assertEqual(st["b"].outputs, (Cut(0), REP, REP, REP, REP, REP))

  def test_fused_batch_norm_grad(self):
    train = _strategies(nn_cases.bn_grad_case((3, 4, 5, 7), True))
    self.assertEqual(list(train), ["c"])
    self.assertEqual(train["c"].outputs, (Cut(3), Cut(0), Cut(0), REP, REP))
    infer = _strategies(nn_cases.bn_grad_case((3, 5, 6, 7), False))
    self.assertCountEqual(infer, ["b", "h", "w", "c"])
    self.assertEqual(infer["b"].outputs, (Cut(0), PARTIAL, PARTIAL, REP, REP))

  def test_bias_add_and_grad(self):
    sem = _semantics(Case("BiasAdd", [Rand((3, 5, 6, 7)), Rand((7,))]))
    self.assertTrue(analysis.facts(sem).elementwise)
    st = _strategies(Case("BiasAddGrad", [Rand((5, 3, 4, 7))]))
    self.assertEqual({v: s.outputs for v, s in st.items()},
                     {"i0": (PARTIAL,), "i1": (PARTIAL,), "i2": (PARTIAL,), "i3": (Cut(0),)})

  @parameterized.parameters("Softmax", "LogSoftmax")
  def test_softmax_last_dim_not_cut(self, op_type):
    st = _strategies(Case(op_type, [Rand((3, 4, 6))]))
    self.assertCountEqual(st, ["i0", "i1"])
    self.assertEqual(st["i1"].outputs, (Cut(1),))

  def test_cross_entropies_cut_batch_only(self):
    sparse = _strategies(Case("SparseSoftmaxCrossEntropyWithLogits",
                              [Rand((7, 5)), Rand((7,), "int32", 0, 5)]))
    self.assertEqual(list(sparse), ["b"])
    self.assertEqual(sparse["b"].outputs, (Cut(0), Cut(0)))
    dense = _strategies(Case("SoftmaxCrossEntropyWithLogits",
                             [Rand((6, 5)), Rand((1, 5), lo=0.0, hi=1.0)]))
    self.assertEqual(list(dense), ["b"])
    self.assertEqual([i.state for i in dense["b"].inputs], [Cut(0), REP])

  def test_depthwise_channel_cut_needs_aligned_blocks(self):
    m1 = _strategies(Case("DepthwiseConv2dNative", [Rand((2, 9, 9, 4)), Rand((3, 3, 4, 1))],
                          {"strides": [1, 1, 1, 1], "padding": "SAME"}))
    self.assertEqual(m1["c"].outputs, (Cut(3),))
    m2 = _strategies(Case("DepthwiseConv2dNative", [Rand((2, 9, 9, 3)), Rand((3, 3, 3, 2))],
                          {"strides": [1, 1, 1, 1], "padding": "SAME"}))
    self.assertNotIn("c", m2, "blocks of 3 channels x 2 do not land on blocks of 6")
    self.assertNotIn("m", m2)


class KernelCheckTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{i:02d}_{c.op_type}", c) for i, c in enumerate(nn_cases.CASES))
  def test_case(self, case):
    res = validate.check_case(case)
    self.assertIsNone(res.error, f"{case}: {res.error}")
    self.assertEqual(res.mismatches, [], f"{case}:\n" + "\n".join(res.mismatches))
    self.assertGreater(res.checked, 0, f"{case}: no strategy was derived")


if __name__ == "__main__":
  absltest.main()
