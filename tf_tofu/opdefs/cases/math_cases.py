"""Kernel-check cases for ``math_ops`` descriptions.

``CASES`` is what ``python -m tf_tofu.opdefs.validate`` runs.

Shapes are small and mostly uneven (5, 7 do not divide 2, 3 or 4).  Inputs
that a kernel needs in a domain (Log, Sqrt, Pow, denominators, Acosh, ...)
are drawn uniformly from it; integer ops get int32 inputs with positive
divisors, logical ops bool inputs.
"""

from __future__ import annotations

from tf_tofu.opdefs.cases import Case, Fixed, Rand

_POS = {"lo": 0.5, "hi": 2.0}     # Log, Sqrt, Rsqrt, Pow's base, denominators
_UNIT = {"lo": -0.9, "hi": 0.9}   # Asin, Acos, Atanh, Tan
_INT = {"dtype": "int32", "lo": -9, "hi": 10}
_DIVISOR = {"dtype": "int32", "lo": 1, "hi": 5}
_SMALL_INT = {"dtype": "int32", "lo": 0, "hi": 3}  # ties for Equal / NotEqual
_BOOL = {"dtype": "bool"}


def _r(shape, spec=None) -> Rand:
  return Rand(tuple(shape), **(spec or {}))


# ---------------------------------------------------------------- element-wise

# Unary op -> input domain (None: standard normal).
_UNARY = {
    "Abs": None, "Acos": _UNIT, "Acosh": {"lo": 1.1, "hi": 3.0}, "Asin": _UNIT,
    "Asinh": None, "Atan": None, "Atanh": _UNIT, "Ceil": None, "Cos": None, "Cosh": None,
    "Digamma": _POS, "Elu": None, "Erf": None, "Erfc": None, "Exp": None, "Expm1": None,
    "Floor": None, "Identity": None, "Inv": _POS, "IsFinite": None, "Lgamma": _POS,
    "Log": _POS, "Log1p": _POS, "LogicalNot": _BOOL, "Neg": None, "OnesLike": None,
    "Reciprocal": _POS, "Relu": None, "Relu6": {"lo": -3.0, "hi": 9.0}, "Rint": None,
    "Round": None, "Rsqrt": _POS, "Selu": None, "Sigmoid": None, "Sign": None, "Sin": None,
    "Sinh": None, "Softplus": None, "Softsign": None, "Sqrt": _POS, "Square": None,
    "StopGradient": None, "Tan": _UNIT, "Tanh": None, "ZerosLike": None,
}

# Binary op that broadcasts -> (domain of x, domain of y).
_BINARY = {
    "Add": (None, None), "AddV2": (None, None), "Atan2": (None, None),
    "Div": (None, _POS), "DivNoNan": (None, _POS), "Equal": (_SMALL_INT, _SMALL_INT),
    "FloorDiv": (None, _POS), "FloorMod": (None, _POS), "Greater": (None, None),
    "GreaterEqual": (_SMALL_INT, _SMALL_INT), "Less": (None, None),
    "LessEqual": (_SMALL_INT, _SMALL_INT), "LogicalAnd": (_BOOL, _BOOL),
    "LogicalOr": (_BOOL, _BOOL), "Maximum": (None, None), "Minimum": (None, None),
    "Mod": (None, _POS), "Mul": (None, None), "MulNoNan": (None, None),
    "NotEqual": (_SMALL_INT, _SMALL_INT), "Pow": (_POS, None), "RealDiv": (None, _POS),
    "SquaredDifference": (None, None), "Sub": (None, None), "TruncateDiv": (_INT, _DIVISOR),
    "TruncateMod": (_INT, _DIVISOR), "Xdivy": (None, _POS), "Xlog1py": (None, _POS),
    "Xlogy": (None, _POS),
}

# Integer versions of the division family (FloorDiv rounds down, TruncateDiv to zero).
_INT_BINARY = ("Div", "FloorDiv", "FloorMod", "Mod")

# Binary ops whose kernels need equal shapes (activation gradients) -> domains.
_GRADS = {
    "EluGrad": (None, None), "InvGrad": (_POS, None), "LeakyReluGrad": (None, None),
    "ReciprocalGrad": (_POS, None), "Relu6Grad": (None, {"lo": -3.0, "hi": 9.0}),
    "ReluGrad": (None, None), "RsqrtGrad": (_POS, None), "SeluGrad": (None, None),
    "SigmoidGrad": (None, None), "SoftplusGrad": (None, None), "SoftsignGrad": (None, None),
    "SqrtGrad": (_POS, None), "TanhGrad": (None, None),
}

# (x shape, y shape, label): equal shapes; a size-1 dim on each side with a rank
# difference (x broadcasts dim 1, y dim 2 and the leading dim); the reverse.
_BROADCASTS = [
    ((5, 7), (5, 7), "same shape"),
    ((5, 1, 7), (6, 1), "size-1 dims on both sides, ranks 3 and 2"),
    ((6, 1), (5, 1, 7), "ranks 2 and 3"),
]

_NONFINITE = Fixed([[1.0, float("nan"), -2.0, float("inf"), 0.5],
                    [float("-inf"), 3.0, float("nan"), 4.0, -1.0],
                    [0.0, 1.0, 2.0, float("inf"), 5.0]], "float32")


def _elementwise_cases() -> list[Case]:
  out = []
  for op, spec in _UNARY.items():
    out.append(Case(op, [_r((5, 7), spec)]))
  for op in ("Exp", "Relu", "Tanh"):
    out.append(Case(op, [_r((3, 5, 6))], label="rank 3"))
  for op in ("IsFinite", "IsInf", "IsNan"):
    out.append(Case(op, [_NONFINITE], label="nan and inf"))
  out.append(Case("LeakyRelu", [_r((5, 7))], {"alpha": 0.3}, label="alpha"))
  for op, (sx, sy) in _BINARY.items():
    for shape_x, shape_y, label in _BROADCASTS:
      out.append(Case(op, [_r(shape_x, sx), _r(shape_y, sy)], label=label))
  for op in ("Mul", "Sub", "Pow", "Maximum"):
    out.append(Case(op, [_r((5, 7), _BINARY[op][0]), _r((), _BINARY[op][1])], label="scalar"))
  for op in _INT_BINARY:
    out.append(Case(op, [_r((5, 1, 7), _INT), _r((6, 1), _DIVISOR)], label="int32"))
  for op, (sx, sy) in _GRADS.items():
    out.append(Case(op, [_r((5, 7), sx), _r((5, 7), sy)]))
  out.append(Case("ReluGrad", [_r((3, 5, 6)), _r((3, 5, 6))], label="rank 3"))
  out.append(Case("LeakyReluGrad", [_r((5, 7)), _r((5, 7))], {"alpha": 0.1}, label="alpha"))
  out += [
      Case("AddN", [[_r((5, 7)), _r((5, 7)), _r((5, 7))]], label="3 inputs"),
      Case("AddN", [[_r((3, 5, 6))]], label="1 input"),
      Case("AddN", [[_r((4, 6)), _r((4, 6))]], label="2 inputs"),
      Case("Cast", [_r((5, 7))], {"DstT": "int32"}, label="float32 -> int32"),
      Case("Cast", [_r((5, 7), _INT)], {"DstT": "float32"}, label="int32 -> float32"),
      Case("Cast", [_r((5, 7), _BOOL)], {"DstT": "float32"}, label="bool -> float32"),
      Case("Cast", [_r((5, 7))], {"DstT": "bool"}, label="float32 -> bool"),
      Case("Cast", [_r((5, 7))], {"DstT": "bfloat16", "Truncate": True}, label="truncate"),
      Case("Cast", [_r((5, 7))], {"DstT": "float16"}, label="float32 -> float16"),
      Case("ClipByValue", [_r((5, 7)), _r(()), _r((), {"lo": 0.5, "hi": 1.0})],
           label="scalar bounds"),
      Case("ClipByValue", [_r((5, 7)), _r((5, 7), {"lo": -1.0, "hi": 0.0}),
                           _r((5, 7), {"lo": 0.0, "hi": 1.0})], label="tensor bounds"),
      Case("ClipByValue", [_r((3, 5, 6)), _r((), {"lo": -1.0, "hi": 0.0}),
                           _r((3, 5, 6), {"lo": 0.0, "hi": 1.0})], label="mixed bounds"),
      Case("SelectV2", [_r((5, 1, 7), _BOOL), _r((6, 1)), _r(())], label="broadcast"),
      Case("SelectV2", [_r((5, 7), _BOOL), _r((5, 7)), _r((5, 7))], label="same shape"),
      Case("SelectV2", [_r((), _BOOL), _r((1, 7)), _r((5, 1))], label="scalar condition"),
  ]
  return out


# ---------------------------------------------------------------- reductions

_AXES = [
    ([1], False, "one axis"),
    ([-1], True, "negative axis, keep_dims"),
    ([0, 2], False, "two axes"),
    ([2, -3], True, "two axes, keep_dims"),
    ([0, 1, 2], False, "all axes"),
    ([], False, "no axes"),
]


def _select_cases() -> list[Case]:
  return [
      Case("Select", [_r((5, 7), _BOOL), _r((5, 7)), _r((5, 7))], label="same shape"),
      Case("Select", [_r((5,), _BOOL), _r((5, 7)), _r((5, 7))], label="row vector"),
      Case("Select", [_r((5,), _BOOL), _r((5, 3, 6)), _r((5, 3, 6))], label="rank 3 rows"),
      Case("Select", [_r((), _BOOL), _r((5, 7)), _r((5, 7))], label="scalar"),
  ]


def _reduction_cases() -> list[Case]:
  out = []
  for op in ("Sum", "Mean"):
    for axes, keep, label in _AXES:
      out.append(Case(op, [_r((5, 6, 7)), Fixed(axes, "int32")], {"keep_dims": keep},
                      label=label))
    out.append(Case(op, [_r((5, 7)), Fixed(1, "int64")], label="scalar int64 axis"))
    out.append(Case(op, [_r((5, 7)), Fixed([0, 1], "int32")], {"keep_dims": True},
                    label="all axes, keep_dims"))
  out.append(Case("Mean", [_r((5, 7), _INT), Fixed([1], "int32")], label="int32 truncates"))
  out.append(Case("Sum", [_r((5, 7), _INT), Fixed([0], "int32")], label="int32"))
  for op in ("Max", "Min", "Prod", "EuclideanNorm"):
    spec = {"lo": 0.5, "hi": 1.5} if op == "Prod" else None
    out.append(Case(op, [_r((5, 6, 7), spec), Fixed([1], "int32")], label="one axis"))
    out.append(Case(op, [_r((5, 6, 7), spec), Fixed([-1, 0], "int32")], {"keep_dims": True},
                    label="two axes, keep_dims"))
  for op in ("All", "Any"):
    out.append(Case(op, [_r((5, 7), _BOOL), Fixed([1], "int32")], label="one axis"))
    out.append(Case(op, [_r((5, 6, 7), _BOOL), Fixed([0, 2], "int32")], {"keep_dims": True},
                    label="two axes, keep_dims"))
  return out


def _loss_cases() -> list[Case]:
  return [
      Case("L2Loss", [_r((5, 7))]),
      Case("L2Loss", [_r((3, 5, 6))], label="rank 3"),
      Case("L2Loss", [_r((9,))], label="rank 1"),
  ]


# ---------------------------------------------------------------- matrix products

# Label sizes of the einsum cases (a batch, b sequence, c model, d heads or out, e head dim).
EINSUM_SIZES = {"a": 4, "b": 5, "c": 6, "d": 7, "e": 3}

# Keras 3 EinsumDense / MultiHeadAttention equations of a GPT block (forward) and
# the equations tf.einsum's gradient generates for them (backward).
EINSUM_EQUATIONS = (
    "abc,cd->abd", "abd,cd->abc", "abc,abd->cd", "abd,abc->cd", "cd,abc->abd",
    "cd,abd->abc",
    "abc,cde->abde", "abde,cde->abc", "abc,abde->cde", "abde,abc->cde", "cde,abc->abde",
    "cde,abde->abc",
    "abcd,cde->abe", "abe,cde->abcd", "abcd,abe->cde", "abe,abcd->cde", "cde,abcd->abe",
    "cde,abe->abcd",
    "aecd,abcd->acbe", "acbe,aecd->abcd", "acbe,abcd->aecd", "abcd,acbe->aecd",
    "abcd,aecd->acbe", "aecd,acbe->abcd",
)


def einsum_case(equation: str, label: str = "") -> Case:
  """An Einsum case whose operand shapes follow from ``EINSUM_SIZES``."""
  lhs = equation.split("->")[0]
  shapes = [tuple(EINSUM_SIZES[c] for c in term) for term in lhs.split(",")]
  return Case("Einsum", [[_r(s) for s in shapes]], {"equation": equation}, label=label)


def _matmul_cases() -> list[Case]:
  out = [
      Case("MatMul", [_r((6, 5)), _r((5, 7))]),
      Case("MatMul", [_r((5, 6)), _r((7, 5))], {"transpose_a": True, "transpose_b": True}),
      Case("MatMul", [_r((5, 6)), _r((5, 7))], {"transpose_a": True}, label="transpose_a"),
      Case("MatMul", [_r((7, 9)), _r((5, 9))], {"transpose_b": True}, label="transpose_b"),
      Case("BatchMatMul", [_r((3, 5, 6)), _r((3, 7, 6))], {"adj_y": True}, label="adj_y"),
      Case("BatchMatMulV2", [_r((4, 5, 6)), _r((4, 6, 7))]),
      Case("BatchMatMulV2", [_r((2, 1, 5, 6)), _r((3, 6, 7))],
           label="broadcast batch, ranks 4 and 3"),
      Case("BatchMatMulV2", [_r((4, 6, 5)), _r((6, 7))], {"adj_x": True},
           label="adj_x, rank-2 y"),
      Case("BatchMatMulV2", [_r((5, 6)), _r((2, 4, 7, 6))], {"adj_y": True},
           label="adj_y, rank-2 x"),
      Case("BatchMatMulV2", [_r((1, 4, 6, 5)), _r((5, 1, 7, 6))],
           {"adj_x": True, "adj_y": True}, label="adj_x, adj_y, size-1 batch dims"),
      Case("BatchMatMulV3", [_r((4, 5, 6)), _r((6, 7))], {"Tout": "float32"}),
      Case("BatchMatMulV3", [_r((2, 5, 6), {"dtype": "int8", "lo": -5, "hi": 5}),
                             _r((2, 6, 7), {"dtype": "int8", "lo": -5, "hi": 5})],
           {"Tout": "int32"}, label="int8 -> int32"),
  ]
  out += [einsum_case(eq, "GPT block") for eq in EINSUM_EQUATIONS]
  out += [
      einsum_case("bc,cd->bd", "matmul"),
      einsum_case("abc->cb", "transpose and sum"),
      einsum_case("abc->", "sum of all"),
      einsum_case("ab,cd->abcd", "outer product"),
      einsum_case("abc,abc->ab", "element-wise and sum"),
      einsum_case("dcb,ab->", "full contraction"),
      Case("Einsum", [[_r((6, 6))]], {"equation": "ii->i"}, label="diagonal"),
      Case("Einsum", [[_r((6, 6))]], {"equation": "ii->"}, label="trace"),
      Case("Einsum", [[_r((5, 6, 6, 4)), _r((6, 4))]], {"equation": "bjjk,jk->bj"},
           label="repeated label in one operand"),
      Case("Einsum", [[_r((2, 1, 5, 6)), _r((3, 6, 4))]], {"equation": "...ij,...jk->...ik"},
           label="broadcast ellipsis"),
      Case("Einsum", [[_r((5, 6, 2, 3)), _r((6,))]], {"equation": "ab...,b->...a"},
           label="ellipsis in the middle"),
      Case("Einsum", [[_r((5, 4, 6)), _r((1, 6))]], {"equation": "a...c,...c->a..."},
           label="ellipsis of size 1 against 4"),
      Case("Einsum", [[_r((5, 6)), _r((6, 7))]], {"equation": "...ij,jk->...ik"},
           label="empty ellipsis"),
  ]
  return out


CASES = [*_elementwise_cases(), *_loss_cases(), *_matmul_cases(), *_reduction_cases(),
         *_select_cases()]
