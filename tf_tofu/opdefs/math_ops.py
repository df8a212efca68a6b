"""Descriptions of TensorFlow's math ops: element-wise, reductions, matrix products.

Element-wise ops (with NumPy broadcasting) are one lambda each::

    add(X, Y) = lambda *i: X[i'] + Y[i'']     (i', i'': i with size-1 dims read at 0)

so every output dim is free and a broadcast input is replicated along its
size-1 dims.  Reductions sum (or max, min, multiply) over the reduced axes::

    sum(X, axes=[1]) = lambda i0, i2: Sum(lambda i1: X[i0, i1, i2])

and matrix products (MatMul, BatchMatMul*, Einsum) sum over the contracted
labels::

    einsum("abc,cd->abd") = lambda a, b, d: Sum(lambda c: X[a, b, c] * Y[c, d])

The analysis turns a summed variable into a partial strategy; Max, Min, Prod
and other non-linear reducers leave their reduced dims uncut.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable, Sequence

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.common import (broadcast_access, broadcast_shape, index_vars,
                                   normalize_axes)
from tf_tofu.opdefs.description import (OpContext, Semantics, ShardSpec, TensorRef,
                                        WorkerView)
from tf_tofu.opdefs.registry import describe


def _f(name: str) -> Callable[..., tdl.Value]:
  """An opaque element-wise function ``name(x, y, ...)`` (the attrs do not matter)."""
  return lambda op, *xs: tdl.call(name, *xs)


def _batch_access(x: TensorRef, batch: Sequence[tdl.Var], last: tuple) -> tdl.Access:
  """``x[b', last...]``: the batch dims of ``x`` broadcast against ``batch`` (right-aligned)."""
  nb = x.rank - len(last)
  offset = len(batch) - nb
  idx = [0 if size == 1 and batch[offset + d].extent != 1 else batch[offset + d]
         for d, size in enumerate(x.shape[:nb])]
  return x[(*idx, *last)]


@describe("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def batch_matmul(op: OpContext) -> Semantics:
  """``Z[b..., i, j] = Sum_k X[b'..., i, k] Y[b''..., k, j]`` with broadcast batch dims.

  ``X`` is read as ``X[b'..., k, i]`` under ``adj_x`` (likewise ``Y`` under
  ``adj_y``); ``b'``, ``b''`` are the batch coordinates with size-1 (and
  missing leading) batch dims read at 0, as in NumPy.  ``Tout`` (V3) only
  changes the output type.  Batch dims and ``i``, ``j`` are output cuts; ``k``
  is a partial.
  """
  x, y = op.input(0), op.input(1)
  if x.rank < 2 or y.rank < 2:
    raise op.fail(f"inputs need rank >= 2, got shapes {x.shape} and {y.shape}")
  adj_x, adj_y = bool(op.attr("adj_x")), bool(op.attr("adj_y"))
  m, k_x = (x.shape[-1], x.shape[-2]) if adj_x else x.shape[-2:]
  k_y, n = (y.shape[-1], y.shape[-2]) if adj_y else y.shape[-2:]
  if k_x != k_y:
    raise op.fail(f"contracted sizes differ: {k_x} and {k_y} (shapes {x.shape}, {y.shape})")
  batch = index_vars("b", broadcast_shape(op, [x.shape[:-2], y.shape[:-2]]))
  i, j, k = tdl.Var("i", m), tdl.Var("j", n), tdl.Var("k", k_x)
  xv = _batch_access(x, batch, (k, i) if adj_x else (i, k))
  yv = _batch_access(y, batch, (j, k) if adj_y else (k, j))
  return Semantics(op, [tdl.Output((*batch, i, j), tdl.Sum(k, xv * yv))])


_ELLIPSIS = "."


def _einsum_terms(op: OpContext, equation: str, n_inputs: int):
  """Splits ``equation`` into per-operand label strings (``"..."`` -> ``"."``) and the output.

  The output is None for the implicit form (no ``->``).
  """
  if "->" in equation:
    lhs, _, rhs = equation.partition("->")
    if "->" in rhs:
      raise op.fail(f"equation {equation!r} has more than one '->'")
  else:
    lhs, rhs = equation, None
  terms = lhs.split(",")
  if len(terms) != n_inputs:
    raise op.fail(f"equation {equation!r} names {len(terms)} operands, the op has {n_inputs}")

  def clean(term: str) -> str:
    t = term.replace("...", _ELLIPSIS)
    if any(not (c.isascii() and c.isalpha()) and c != _ELLIPSIS for c in t):
      raise op.fail(f"equation {equation!r}: subscripts {term!r} must be letters and at most "
                    "one '...'")
    if t.count(_ELLIPSIS) > 1:
      raise op.fail(f"equation {equation!r}: subscripts {term!r} have more than one '...'")
    return t

  return [clean(t) for t in terms], (None if rhs is None else clean(rhs))


def einsum_labels(op: OpContext, equation: str,
                  shapes: Sequence[Sequence[int]]) -> tuple[list[list[str]], list[str], dict]:
  """Parses an einsum equation against the operand shapes.

  Returns ``(input_labels, output_labels, sizes)``: one label per dim of each
  operand and of the output, where the broadcast dims that ``...`` stands for
  are labelled ``"...0"``, ``"...1"``, ... (right-aligned across operands, as
  in NumPy), and the size of every label.  A broadcast dim of size 1 in one
  operand has its own size there; ``sizes`` holds the broadcast size.  The
  implicit form (no ``->``) outputs ``...`` and then the letters that occur
  exactly once, in alphabetical order.  Raises (naming the op) for labels of
  unequal size, a repeated or unknown output label, and broadcast dims that
  the output drops (TensorFlow rejects that too).
  """
  terms, out_term = _einsum_terms(op, equation, len(shapes))
  ell_ranks = []
  for t, shape in zip(terms, shapes):
    letters = len(t) - t.count(_ELLIPSIS)
    if (_ELLIPSIS in t and len(shape) < letters) or (_ELLIPSIS not in t and len(shape) != letters):
      raise op.fail(f"equation {equation!r}: subscripts {t.replace(_ELLIPSIS, '...')!r} do "
                    f"not fit an operand of shape {tuple(shape)}")
    ell_ranks.append(len(shape) - letters)
  ell_rank = max(ell_ranks, default=0)
  ell = [f"...{g}" for g in range(ell_rank)]
  in_labels: list[list[str]] = []
  sizes: dict = {}
  for t, shape, er in zip(terms, shapes, ell_ranks):
    labels: list[str] = []
    for c in t:
      labels.extend(ell[ell_rank - er:] if c == _ELLIPSIS else [c])
    for lab, size in zip(labels, shape):
      if lab.startswith("..."):
        prev = sizes.get(lab)
        if prev is None or prev == 1:
          sizes[lab] = size
        elif size not in (1, prev):
          raise op.fail(f"equation {equation!r}: the '...' dims of shapes "
                        f"{[tuple(s) for s in shapes]} do not broadcast")
      elif sizes.setdefault(lab, size) != size:
        raise op.fail(f"equation {equation!r}: label {lab!r} has sizes {sizes[lab]} and "
                      f"{size} in shapes {[tuple(s) for s in shapes]}")
    in_labels.append(labels)
  if out_term is None:
    counts: dict = {}
    for t in terms:
      for c in t.replace(_ELLIPSIS, ""):
        counts[c] = counts.get(c, 0) + 1
    out_labels = ell + sorted(c for c, k in counts.items() if k == 1)
  else:
    if ell_rank and _ELLIPSIS not in out_term:
      raise op.fail(f"equation {equation!r}: the operands have {ell_rank} broadcast dims "
                    "('...') that the output drops; write '...' in the output")
    out_labels = []
    for c in out_term:
      out_labels.extend(ell if c == _ELLIPSIS else [c])
    letters = [c for c in out_labels if not c.startswith("...")]
    if len(set(letters)) != len(letters):
      raise op.fail(f"equation {equation!r}: an output label is repeated (a diagonal "
                    "embedding, not described)")
    unknown = sorted(set(letters) - set(sizes))
    if unknown:
      raise op.fail(f"equation {equation!r}: output labels {unknown} occur in no operand")
  return in_labels, out_labels, sizes


@describe("Einsum")
def einsum(op: OpContext) -> Semantics:
  """``Z[out...] = Sum_{contracted} prod_t X_t[labels_t...]``, one index variable per label.

  Every output label (and every broadcast dim of ``...``) is an output
  variable, every label the output drops is a reduction variable (a partial
  strategy).  A label repeated within one operand reads its diagonal
  (``"ii->i"``: ``Z[i] = X[i, i]``), which a worker's sub-op on its block of
  both dims computes alike.  Broadcast dims of size 1 read index 0.
  """
  equation = op.attr("equation")
  if not isinstance(equation, str) or not equation:
    raise op.fail("has no equation attr")
  refs = [op.input(t) for t in range(len(op.inputs))]
  in_labels, out_labels, sizes = einsum_labels(op, equation, [r.shape for r in refs])
  var = {lab: tdl.Var(f"ell{lab[3:]}" if lab.startswith("...") else lab, size)
         for lab, size in sizes.items()}
  factors = []
  for r, labels in zip(refs, in_labels):
    idx = [0 if size == 1 and var[lab].extent != 1 else var[lab]
           for lab, size in zip(labels, r.shape)]
    factors.append(r[tuple(idx)])
  body = functools.reduce(operator.mul, factors)
  reduced = []
  for labels in in_labels:
    for lab in labels:
      if lab not in out_labels and var[lab] not in reduced:
        reduced.append(var[lab])
  if reduced:
    body = tdl.Sum(tuple(reduced), body)
  return Semantics(op, [tdl.Output(tuple(var[lab] for lab in out_labels), body)])


# f per op type: ``f(op, X0, X1, ...)`` gives the value at one output coordinate
# from the inputs read there.
_ELEMENTWISE: dict[str, Callable[..., tdl.Value]] = {
    "Abs": _f("abs"),
    "Acos": _f("acos"),
    "Acosh": _f("acosh"),
    "Add": lambda op, x, y: x + y,
    "AddN": lambda op, *xs: functools.reduce(operator.add, xs),
    "AddV2": lambda op, x, y: x + y,
    "Asin": _f("asin"),
    "Asinh": _f("asinh"),
    "Atan": _f("atan"),
    "Atan2": _f("atan2"),
    "Atanh": _f("atanh"),
    "Cast": _f("cast"),
    "Ceil": _f("ceil"),
    "ClipByValue": lambda op, t, lo, hi: tdl.call("min", tdl.call("max", t, lo), hi),
    "Cos": _f("cos"),
    "Cosh": _f("cosh"),
    "Digamma": _f("digamma"),
    "Div": _f("div"),
    "DivNoNan": _f("div_no_nan"),
    "Elu": _f("elu"),
    "EluGrad": _f("elu_grad"),
    "Equal": _f("equal"),
    "Erf": _f("erf"),
    "Erfc": _f("erfc"),
    "Exp": _f("exp"),
    "Expm1": _f("expm1"),
    "Floor": _f("floor"),
    "FloorDiv": _f("floor_div"),
    "FloorMod": _f("floor_mod"),
    "Greater": _f("greater"),
    "GreaterEqual": _f("greater_equal"),
    "Identity": lambda op, x: x,
    "Inv": lambda op, x: 1.0 / x,
    "InvGrad": lambda op, y, dy: -dy * y * y,
    "IsFinite": _f("is_finite"),
    "IsInf": _f("is_inf"),
    "IsNan": _f("is_nan"),
    "LeakyRelu": lambda op, x: tdl.call("leaky_relu", x, float(op.attr("alpha", 0.2))),
    "LeakyReluGrad": lambda op, dy, x: tdl.call("leaky_relu_grad", dy, x,
                                                float(op.attr("alpha", 0.2))),
    "Less": _f("less"),
    "LessEqual": _f("less_equal"),
    "Lgamma": _f("lgamma"),
    "Log": _f("log"),
    "Log1p": _f("log1p"),
    "LogicalAnd": _f("and"),
    "LogicalNot": _f("not"),
    "LogicalOr": _f("or"),
    "Maximum": _f("max"),
    "Minimum": _f("min"),
    "Mod": _f("mod"),
    "Mul": lambda op, x, y: x * y,
    "MulNoNan": _f("mul_no_nan"),
    "Neg": lambda op, x: -x,
    "NotEqual": _f("not_equal"),
    "OnesLike": _f("ones_like"),
    "Pow": lambda op, x, y: x ** y,
    "RealDiv": lambda op, x, y: x / y,
    "Reciprocal": lambda op, x: 1.0 / x,
    "ReciprocalGrad": lambda op, y, dy: -dy * y * y,
    "Relu": lambda op, x: tdl.call("max", x, 0.0),
    "Relu6": lambda op, x: tdl.call("min", tdl.call("max", x, 0.0), 6.0),
    "Relu6Grad": _f("relu6_grad"),
    "ReluGrad": _f("relu_grad"),
    "Rint": _f("rint"),
    "Round": _f("round"),
    "Rsqrt": _f("rsqrt"),
    "RsqrtGrad": _f("rsqrt_grad"),
    "SelectV2": _f("select"),
    "Selu": _f("selu"),
    "SeluGrad": _f("selu_grad"),
    "Sigmoid": _f("sigmoid"),
    "SigmoidGrad": _f("sigmoid_grad"),
    "Sign": _f("sign"),
    "Sin": _f("sin"),
    "Sinh": _f("sinh"),
    "Softplus": _f("softplus"),
    "SoftplusGrad": _f("softplus_grad"),
    "Softsign": _f("softsign"),
    "SoftsignGrad": _f("softsign_grad"),
    "Sqrt": _f("sqrt"),
    "SqrtGrad": _f("sqrt_grad"),
    "Square": lambda op, x: x * x,
    "SquaredDifference": lambda op, x, y: (x - y) * (x - y),
    "StopGradient": lambda op, x: x,
    "Sub": lambda op, x, y: x - y,
    "Tan": _f("tan"),
    "Tanh": _f("tanh"),
    "TanhGrad": _f("tanh_grad"),
    "TruncateDiv": _f("truncate_div"),
    "TruncateMod": _f("truncate_mod"),
    "Xdivy": _f("xdivy"),
    "Xlog1py": _f("xlog1py"),
    "Xlogy": _f("xlogy"),
    "ZerosLike": _f("zeros_like"),
}


@describe(*_ELEMENTWISE)
def elementwise(op: OpContext) -> Semantics:
  """``lambda *i: f(X0[i'], X1[i''], ...)`` over the broadcast shape of the inputs.

  ``i'`` is ``i`` right-aligned to the input's rank with size-1 dims read at
  index 0 (NumPy broadcasting; the ops that need equal shapes simply never
  see unequal ones).  ``f`` is the op's scalar function (``_ELEMENTWISE``):
  ``x + y`` for Add/AddV2, ``x0 + ... + xn`` for AddN, ``x * y``, ``x - y``,
  ``x / y``, ``x ** y``, ``(x - y)^2``, ``-x``, ``x * x``, ``1 / x``,
  ``max(x, 0)`` (Relu), ``min(max(t, lo), hi)`` (ClipByValue),
  ``cond ? x : y`` (SelectV2), the identity (Identity, StopGradient), and an
  opaque scalar function for the rest (exp, tanh, comparisons giving bool,
  logical ops on bool, Cast to DstT, integer FloorDiv/FloorMod/TruncateDiv,
  the activation gradients ``*Grad(dy, x)`` of equal-shaped inputs,
  LeakyRelu(Grad) with ``alpha``, ZerosLike/OnesLike of ``X``'s shape).
  Every output dim is an output variable; no sub-op needs other attrs.
  """
  refs = [op.input(k) for k in range(len(op.inputs))]
  shape = broadcast_shape(op, [r.shape for r in refs])
  i = index_vars("i", shape)
  body = _ELEMENTWISE[op.op_type](op, *(broadcast_access(r, i) for r in refs))
  return Semantics(op, [tdl.Output(i, body)])


@describe("L2Loss")
def l2_loss(op: OpContext) -> Semantics:
  """``lambda: Sum_{i...} X[i...]^2 / 2``: a scalar, so every cut dim gives a partial."""
  x = op.input(0)
  i = index_vars("i", x.shape)
  body = tdl.Sum(i, x[i] * x[i]) / 2.0 if i else x[()] * x[()] / 2.0
  return Semantics(op, [tdl.Output((), body)])


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


def _integer_mean(vs, body) -> tdl.Value:
  """An integer Mean truncates ``Sum / size``: not linear, so its sum is never cut."""
  return tdl.call("truncating_mean", tdl.Sum(vs, body))


_REDUCERS: dict[str, Callable[..., tdl.Value]] = {
    "All": tdl.Min,    # logical and
    "Any": tdl.Max,    # logical or
    "EuclideanNorm": lambda vs, x: tdl.call("sqrt", tdl.Sum(vs, x * x)),
    "Max": tdl.Max,
    "Mean": tdl.Mean,
    "Min": tdl.Min,
    "Prod": tdl.Prod,
    "Sum": tdl.Sum,
}


@describe(*_REDUCERS)
def reduction(op: OpContext) -> Semantics:
  """``Y[k...] = R_{r...} X[i...]`` with ``i`` the kept dims ``k`` and reduced dims ``r``.

  ``reduction_indices`` (input 1) is a constant; negative axes count from the
  end, an empty list reduces nothing, ``keep_dims`` keeps reduced dims as
  size-1 dims indexed by nothing.  ``R`` is Sum, Max, Min, Prod, Mean
  (``Sum / size``), All (min over bools), Any (max) or EuclideanNorm
  (``sqrt(Sum x^2)``).  The analysis finds: kept dims are output cuts (the
  sub-op on a block of X is the same op); a reduced dim is a partial only for
  Sum and float Mean, where the sub-op's mean over its ``block`` of ``total``
  elements must be scaled by ``block / total`` (``output_scale``); Max, Min,
  Prod, All, Any, EuclideanNorm and an integer Mean (which truncates) are
  not linear in the sum, so only their kept dims can be cut.
  """
  x = op.input(0)
  axes = set(normalize_axes(op, op.const(1), x.rank))
  keep = bool(op.attr("keep_dims"))
  i = index_vars("i", x.shape)
  reduced = tuple(v for d, v in enumerate(i) if d in axes)
  dims = [() if d in axes else (v,) for d, v in enumerate(i) if keep or d not in axes]
  reducer = _REDUCERS[op.op_type]
  if op.op_type == "Mean" and x.info.dtype.startswith(("int", "uint")):
    reducer = _integer_mean
  body = reducer(reduced, x[i]) if reduced else x[i]
  shard = None
  if op.op_type == "Mean" and reducer is tdl.Mean:
    names = {v.name for v in reduced}

    def shard(worker: WorkerView) -> ShardSpec:
      if worker.var not in names:
        return ShardSpec()
      lo, hi = worker.var_block
      return ShardSpec(output_scale=((hi - lo) / worker.var_extent,))

  return Semantics(op, [tdl.Output(tuple(dims), body)], shard=shard)


@describe("Select")
def select(op: OpContext) -> Semantics:
  """``Z[i...] = C[c] ? X[i...] : Y[i...]`` with ``X``, ``Y`` of one shape.

  ``c`` is ``i`` when ``C`` has the shape of ``X``, nothing when ``C`` is a
  scalar, and the first coordinate ``i0`` when ``C`` is a vector over
  ``X``'s first dim (it picks whole rows).  SelectV2, which broadcasts all
  three NumPy-style, is element-wise.
  """
  c, x, y = op.input(0), op.input(1), op.input(2)
  if x.shape != y.shape:
    raise op.fail(f"x and y must have one shape, got {x.shape} and {y.shape}")
  i = index_vars("i", x.shape)
  if c.shape == x.shape:
    cond = c[i]
  elif c.rank == 0:
    cond = c[()]
  elif c.rank == 1 and x.rank >= 1 and c.shape[0] == x.shape[0]:
    cond = c[i[0]]
  else:
    raise op.fail(f"condition of shape {c.shape} neither matches x's shape {x.shape}, nor "
                  "is a scalar or a vector over its first dim")
  return Semantics(op, [tdl.Output(i, tdl.call("select", cond, x[i], y[i]))])
