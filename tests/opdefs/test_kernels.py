"""Tests for tf_tofu.opdefs.kernels: AttrValues, op contexts, raw-op calls, eager kernels.

Numerical results are compared with numpy in float64 (atol 1e-12), or with
TensorFlow running the same graph in a session; the one float32 kernel
(FusedBatchNormV3) is compared with float64 numpy within 1e-5.
"""

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized
from tensorflow.core.framework import attr_value_pb2, tensor_shape_pb2, types_pb2

from tf_tofu.opdefs import kernels
from tf_tofu.opdefs.description import OpContext, TensorInfo

ATOL = 1e-12

_A = attr_value_pb2.AttrValue
_L = attr_value_pb2.AttrValue.ListValue


def _shape(*dims, unknown_rank=False):
  return tensor_shape_pb2.TensorShapeProto(
      dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims], unknown_rank=unknown_rank)


def _rng():
  return np.random.default_rng(7)


class AttrToPythonTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("string", _A(s=b"SAME"), "SAME"),
      ("int", _A(i=-3), -3),
      ("float", _A(f=0.25), 0.25),
      ("bool", _A(b=True), True),
      ("dtype", _A(type=types_pb2.DT_HALF), "float16"),
      ("dtype_int64", _A(type=types_pb2.DT_INT64), "int64"),
      ("shape", _A(shape=_shape(-1, 3)), [-1, 3]),
      ("scalar_shape", _A(shape=_shape()), []),
      ("unknown_rank", _A(shape=_shape(unknown_rank=True)), None),
      ("func", _A(func=attr_value_pb2.NameAttrList(name="body_fn")), "body_fn"),
      ("strings", _A(list=_L(s=[b"a", b"bc"])), ["a", "bc"]),
      ("ints", _A(list=_L(i=[1, 0, -2])), [1, 0, -2]),
      ("floats", _A(list=_L(f=[0.5, -1.0])), [0.5, -1.0]),
      ("bools", _A(list=_L(b=[True, False])), [True, False]),
      ("dtypes", _A(list=_L(type=[types_pb2.DT_INT32, types_pb2.DT_FLOAT])), ["int32", "float32"]),
      ("shapes", _A(list=_L(shape=[_shape(2, -1), _shape()])), [[2, -1], []]),
      ("empty_list", _A(list=_L()), []),
      ("unset", _A(), None),
  )
  def test_value(self, attr, want):
    got = kernels.attr_to_python(attr)
    self.assertEqual(got, want)
    self.assertIs(type(got), type(want))

  def test_undecodable_string_is_replaced_not_raised(self):
    self.assertEqual(kernels.attr_to_python(_A(s=b"ab\xff")), "ab\ufffd")

  def test_tensor_becomes_an_array(self):
    value = np.arange(6, dtype=np.int64).reshape(2, 3)
    got = kernels.attr_to_python(_A(tensor=tf.make_tensor_proto(value)))
    self.assertIsInstance(got, np.ndarray)
    self.assertEqual(got.dtype, np.int64)
    np.testing.assert_array_equal(got, value)

  def test_attrs_sorted_by_name(self):
    got = kernels.attrs_to_python({"strides": _A(list=_L(i=[1, 2, 2, 1])), "T": _A(type=1),
                                   "padding": _A(s=b"VALID")})
    self.assertEqual(list(got), ["T", "padding", "strides"])
    self.assertEqual(got, {"T": "float32", "padding": "VALID", "strides": [1, 2, 2, 1]})


class ContextFromNodeDefTest(absltest.TestCase):

  def _conv_graph(self):
    graph = tf.Graph()
    with graph.as_default():
      x = tf.compat.v1.placeholder(tf.float64, (2, 7, 6, 3), name="x")
      f = tf.compat.v1.placeholder(tf.float64, (3, 3, 3, 4), name="f")
      y = tf.raw_ops.Conv2D(input=x, filter=f, strides=[1, 2, 2, 1], padding="SAME",
                            name="conv")
    return graph, x, f, y

  def test_context_is_the_node_def(self):
    graph, _, _, y = self._conv_graph()
    ins = [TensorInfo((2, 7, 6, 3), "float64"), TensorInfo((3, 3, 3, 4), "float64")]
    outs = [TensorInfo((2, 4, 3, 4), "float64")]
    ctx = kernels.context_from_node_def(y.op.node_def, ins, outs)
    self.assertIsInstance(ctx, OpContext)
    self.assertEqual((ctx.name, ctx.op_type), ("conv", "Conv2D"))
    self.assertEqual(ctx.inputs, tuple(ins))
    self.assertEqual(ctx.outputs, tuple(outs))
    self.assertEqual(ctx.attrs, {"T": "float64", "data_format": "NHWC",
                                 "dilations": [1, 1, 1, 1], "explicit_paddings": [],
                                 "padding": "SAME", "strides": [1, 2, 2, 1],
                                 "use_cudnn_on_gpu": True})
    self.assertEqual(list(ctx.attrs), sorted(y.op.node_def.attr))
    self.assertEqual(kernels.context_from_node_def(y.op.node_def, ins).outputs, ())

  def test_running_the_context_matches_the_graph(self):
    graph, x, f, y = self._conv_graph()
    rng = _rng()
    xv, fv = rng.standard_normal((2, 7, 6, 3)), rng.standard_normal((3, 3, 3, 4))
    with tf.compat.v1.Session(graph=graph) as sess:
      want = sess.run(y, {x: xv, f: fv})
    ctx = kernels.context_from_node_def(y.op.node_def, [])
    (got,) = kernels.run_op(ctx.op_type, ctx.attrs, [xv, fv])
    self.assertEqual(got.shape, (2, 4, 3, 4))
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


class InputGroupsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("plain", "MatMul", {}, 2, [("a", 1, False), ("b", 1, False)]),
      ("number_attr", "ConcatV2", {"N": 3}, 4, [("values", 3, True), ("axis", 1, False)]),
      ("number_attr_first", "Concat", {"N": 2}, 3, [("concat_dim", 1, False),
                                                    ("values", 2, True)]),
      ("type_list_attr", "IdentityN", {"T": ["float32", "int32", "bool"]}, 3,
       [("input", 3, True)]),
      ("no_inputs", "NoOp", {}, 0, []),
  )
  def test_groups_follow_the_op_def(self, op_type, attrs, n_flat, want):
    self.assertEqual(kernels.input_groups(op_type, attrs, n_flat), want)

  def test_wrong_count_raises(self):
    with self.assertRaisesRegex(ValueError, "^ConcatV2 takes 4 inputs with these attrs, got 3$"):
      kernels.input_groups("ConcatV2", {"N": 3}, 3)

  def test_unknown_op_type_raises(self):
    with self.assertRaisesRegex(ValueError, "^'NoSuchOp' is not a TensorFlow op type$"):
      kernels.input_groups("NoSuchOp", {}, 1)


class CallRawOpTest(absltest.TestCase):

  def test_inputs_by_position_although_raw_ops_renames_them(self):
    # Sum's OpDef input is reduction_indices; tf.raw_ops.Sum calls it axis.
    x = _rng().standard_normal((3, 4, 5))
    got = kernels.call_raw_op("Sum", [tf.constant(x), tf.constant([2, 0])],
                              {"keep_dims": True}).numpy()
    np.testing.assert_allclose(got, np.sum(x, axis=(0, 2), keepdims=True), rtol=0, atol=ATOL)

  def test_squeeze_dims_is_passed_as_axis(self):
    x = np.arange(6.0).reshape(1, 2, 1, 3)
    got = kernels.call_raw_op("Squeeze", [tf.constant(x)], {"squeeze_dims": [2]}).numpy()
    np.testing.assert_array_equal(got, np.squeeze(x, axis=2))
    self.assertEqual(got.shape, (1, 2, 3))

  def test_inferred_and_unknown_attrs_are_dropped(self):
    # T (inferred from the inputs) says int32 and _class is no OpDef attr: both ignored.
    a, b = np.eye(2) * 3.0, np.arange(4.0).reshape(2, 2)
    got = kernels.call_raw_op("MatMul", [tf.constant(a), tf.constant(b)],
                              {"T": "int32", "_class": ["loc:@x"], "transpose_b": True})
    np.testing.assert_allclose(got.numpy(), a @ b.T, rtol=0, atol=ATOL)

  def test_wrong_number_of_args_raises(self):
    with self.assertRaisesRegex(ValueError, "^MatMul takes 2 input args, got 1$"):
      kernels.call_raw_op("MatMul", [tf.constant(np.eye(2))], {})


class RunOpTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("plain", False, False, (4, 3), (3, 5)),
      ("transpose_a", True, False, (3, 4), (3, 5)),
      ("transpose_b", False, True, (4, 3), (5, 3)),
      ("both", True, True, (3, 4), (5, 3)),
  )
  def test_matmul(self, ta, tb, sa, sb):
    rng = _rng()
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    out = kernels.run_op("MatMul", {"transpose_a": ta, "transpose_b": tb}, [a, b])
    self.assertLen(out, 1)
    self.assertIsInstance(out[0], np.ndarray)
    self.assertEqual(out[0].dtype, np.float64)
    want = (a.T if ta else a) @ (b.T if tb else b)
    np.testing.assert_allclose(out[0], want, rtol=0, atol=ATOL)

  def test_list_input(self):
    rng = _rng()
    parts = [rng.standard_normal((2, k)) for k in (3, 1, 4)]
    out = kernels.run_op("ConcatV2", {"N": 3}, [*parts, np.int32(-1)])
    self.assertLen(out, 1)
    np.testing.assert_array_equal(out[0], np.concatenate(parts, axis=1))

  def test_list_output_is_flattened(self):
    x = _rng().standard_normal((3, 4, 2))
    out = kernels.run_op("Unpack", {"num": 4, "axis": 1}, [x])
    self.assertLen(out, 4)
    for k, o in enumerate(out):
      np.testing.assert_array_equal(o, x[:, k, :])

  def test_split_value_after_axis(self):
    x = np.arange(12, dtype=np.int32).reshape(2, 6)
    out = kernels.run_op("Split", {"num_split": 3}, [np.int32(1), x])
    self.assertEqual([o.dtype for o in out], [np.int32] * 3)
    for o, want in zip(out, np.split(x, 3, axis=1)):
      np.testing.assert_array_equal(o, want)

  def test_several_named_outputs(self):
    """FusedBatchNormV3 returns a namedtuple of 6; float32 kernel vs float64 numpy, atol 1e-5."""
    rng = _rng()
    x = rng.standard_normal((2, 3, 2, 4)).astype(np.float32)
    scale, offset = (rng.standard_normal(4).astype(np.float32) for _ in range(2))
    empty = np.zeros((0,), np.float32)
    out = kernels.run_op("FusedBatchNormV3", {"epsilon": 1e-3, "is_training": True,
                                              "exponential_avg_factor": 1.0},
                         [x, scale, offset, empty, empty])
    self.assertLen(out, 6)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=(0, 1, 2)), x64.var(axis=(0, 1, 2))
    y = (x64 - mean) / np.sqrt(var + 1e-3) * scale + offset
    m = x.size // 4
    for got, want in zip(out[:5], (y, mean, var * m / (m - 1), mean, var)):
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

  def test_op_without_outputs(self):
    self.assertEqual(kernels.run_op("NoOp", {}, []), [])

  def test_integer_dtype_is_kept(self):
    x = np.array([[3, -1], [0, 7]], np.int32)
    (out,) = kernels.run_op("Transpose", {}, [x, np.array([1, 0], np.int64)])
    self.assertEqual(out.dtype, np.int32)
    np.testing.assert_array_equal(out, x.T)


if __name__ == "__main__":
  absltest.main()
