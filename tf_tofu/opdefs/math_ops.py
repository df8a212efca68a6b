"""Descriptions of TensorFlow's math ops: element-wise, reductions, matrix products.

Element-wise ops (with NumPy broadcasting) are one lambda each::

    add(X, Y) = lambda *i: X[i'] + Y[i'']     (i', i'': i with size-1 dims read at 0)

so every output dim is free and a broadcast input is replicated along its
size-1 dims.  Reductions sum (or max, min, multiply) over the reduced axes;
matrix products sum over the contracted index.
"""

from __future__ import annotations

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.common import broadcast_access, broadcast_shape, index_vars
from tf_tofu.opdefs.description import OpContext, Semantics
from tf_tofu.opdefs.registry import describe


def _elementwise(op: OpContext, fn: str) -> Semantics:
  """``lambda *i: fn(X0[i], X1[i], ...)`` over the broadcast output shape."""
  refs = [op.input(k) for k in range(len(op.inputs))]
  shape = broadcast_shape(op, [r.shape for r in refs])
  i = index_vars("i", shape)
  body = tdl.call(fn, *(broadcast_access(r, i) for r in refs))
  return Semantics(op, [tdl.Output(i, body)])


_UNARY = ("Abs", "Ceil", "Cos", "Erf", "Exp", "Floor", "Identity", "Inv", "Log", "Log1p",
          "Neg", "Reciprocal", "Relu", "Relu6", "Round", "Rsqrt", "Sigmoid", "Sign", "Sin",
          "Softplus", "Sqrt", "Square", "Tanh", "Elu", "Selu", "Expm1", "IsFinite",
          "LogicalNot", "StopGradient", "Cast")
_BINARY = ("Add", "AddV2", "BiasAdd", "DivNoNan", "Equal", "FloorDiv", "FloorMod", "Greater",
           "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalOr", "Maximum",
           "Minimum", "Mul", "MulNoNan", "NotEqual", "Pow", "RealDiv", "ReluGrad",
           "Relu6Grad", "RsqrtGrad", "SigmoidGrad", "SqrtGrad", "SquaredDifference", "Sub",
           "TanhGrad", "EluGrad", "SeluGrad", "SoftplusGrad", "Xdivy", "Xlogy", "Div",
           "TruncateDiv", "ReciprocalGrad")


@describe(*(t for t in _UNARY + _BINARY if t != "BiasAdd"))
def elementwise(op: OpContext) -> Semantics:
  """Every unary and binary element-wise op: ``lambda *i: f(X[i], Y[i])`` with broadcasting."""
  return _elementwise(op, op.op_type.lower())


@describe("MatMul")
def matmul(op: OpContext) -> Semantics:
  """``C[i, j] = Sum_k A[i, k] B[k, j]`` (A read as ``A[k, i]`` under transpose_a, likewise B)."""
  a, b = op.input(0), op.input(1)
  ta, tb = bool(op.attr("transpose_a")), bool(op.attr("transpose_b"))
  m, k_a = (a.shape[1], a.shape[0]) if ta else a.shape
  k_b, n = (b.shape[1], b.shape[0]) if tb else b.shape
  if k_a != k_b:
    raise op.fail(f"contracted sizes differ: {k_a} and {k_b}")
  i, j, k = tdl.Var("i", m), tdl.Var("j", n), tdl.Var("k", k_a)
  av = a[k, i] if ta else a[i, k]
  bv = b[j, k] if tb else b[k, j]
  return Semantics(op, [tdl.Output((i, j), tdl.Sum(k, av * bv))])
