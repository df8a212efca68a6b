"""TDL: the small language in which an operator's semantics are written.

An operator is described as a lambda from output coordinates to the value at
those coordinates (docs/method.md section 3)::

    matmul(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[k, j])

written here as::

    i, j, k = Var("i", M), Var("j", N), Var("k", K)
    Output((i, j), Sum(k, A[i, k] * B[k, j]))

The pieces:

* :class:`Var` - an index variable with a static extent ``[0, extent)``.
* Index expressions (:class:`Affine`, :class:`Div`) - ``x * stride + dx - pad``
  and the monotone divisions needed by transposed convolutions.  They support
  interval evaluation: given an interval for each variable they return the
  exact range of values the expression can take.
* Value expressions - input accesses ``T[e1, ..., en]`` (:class:`Access`),
  constants, element-wise functions (:class:`Apply`), reducers
  (:class:`Reduce`: Sum, Max, Min, Prod; ``Mean = Sum / size``) and opaque
  sub-computations (:class:`Opaque`).  A *guarded* access may fall outside its
  input and then reads a pad value; an unguarded one must stay in bounds.
* :class:`Output` - one lambda per output of the op: the index variables of
  each output dimension and the body.  A dimension may be a composite of
  several variables, major first (``Reshape`` ``[a, b] -> [a * b]``); only
  the major one can cut it into contiguous blocks.

Expressions are immutable; only their structure is analysed (see
``analysis.py``), the real kernels are what compute values.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Iterator, Sequence, Union


# ---------------------------------------------------------------- indices


@dataclasses.dataclass(frozen=True)
class Var:
  """An index variable ranging over ``[0, extent)``."""

  name: str
  extent: int

  def __post_init__(self):
    if not isinstance(self.extent, int) or self.extent < 0:
      raise ValueError(f"index variable {self.name!r} needs a static extent >= 0, "
                       f"got {self.extent!r}")

  def __repr__(self):
    return self.name

  def __hash__(self) -> int:
    # Computed once: variables key the analysis' interval environments, looked up
    # per access, dim and worker.  Equal variables hash alike, as the generated hash.
    h = self.__dict__.get("_hash")
    if h is None:
      h = hash((self.name, self.extent))
      object.__setattr__(self, "_hash", h)
    return h

  def __getstate__(self) -> dict:
    # A string's hash differs between processes: a copy computes its own.
    return {"name": self.name, "extent": self.extent}

  # Arithmetic lifts a variable into an affine expression.
  def _affine(self) -> "Affine":
    return Affine(((self, 1),), 0)

  def __add__(self, other): return self._affine() + other
  def __radd__(self, other): return self._affine() + other
  def __sub__(self, other): return self._affine() - other
  def __rsub__(self, other): return (-1) * self._affine() + other
  def __mul__(self, other): return self._affine() * other
  def __rmul__(self, other): return self._affine() * other
  def __floordiv__(self, d): return Div(self._affine(), d, exact=False)


IndexAtom = Union[Var, "Div"]


def _as_affine(e) -> "Affine":
  if isinstance(e, Affine):
    return e
  if isinstance(e, (Var, Div)):
    return Affine(((e, 1),), 0)
  if isinstance(e, int) and not isinstance(e, bool):
    return Affine((), e)
  raise TypeError(f"{e!r} is not an index expression (a Var, an int or an affine "
                  "combination of them)")


@dataclasses.dataclass(frozen=True)
class Affine:
  """``sum(coef * atom) + const`` where each atom is a :class:`Var` or a :class:`Div`."""

  terms: tuple[tuple[IndexAtom, int], ...]
  const: int = 0

  def __post_init__(self):
    merged: dict = {}
    for atom, coef in self.terms:
      merged[atom] = merged.get(atom, 0) + coef
    object.__setattr__(self, "terms",
                       tuple((a, c) for a, c in merged.items() if c != 0))

  def __add__(self, other):
    o = _as_affine(other)
    return Affine(self.terms + o.terms, self.const + o.const)

  __radd__ = __add__

  def __sub__(self, other):
    return self + (-1) * _as_affine(other)

  def __rsub__(self, other):
    return (-1) * self + other

  def __mul__(self, k):
    if not isinstance(k, int) or isinstance(k, bool):
      raise TypeError(f"index expressions are affine: cannot multiply by {k!r}")
    return Affine(tuple((a, c * k) for a, c in self.terms), self.const * k)

  __rmul__ = __mul__

  def __floordiv__(self, d):
    return Div(self, d, exact=False)

  def vars(self) -> frozenset:
    out = self.__dict__.get("_vars")  # computed once: the analysis asks per worker
    if out is None:
      out = set()
      for atom, _ in self.terms:
        out |= {atom} if isinstance(atom, Var) else atom.vars()
      out = frozenset(out)
      object.__setattr__(self, "_vars", out)
    return out

  def coefficient(self, v: Var) -> int:
    """The coefficient of ``v`` when it appears directly (not under a Div)."""
    return dict(self.terms).get(v, 0)

  def interval(self, env) -> tuple[int, int]:
    """Inclusive ``(min, max)`` over the variable ranges in ``env``.

    ``env`` maps each Var to an inclusive ``(lo, hi)``.  Each atom varies
    independently, so the bound is exact when no variable occurs in two atoms.
    """
    lo = hi = self.const
    for atom, coef in self.terms:
      a_lo, a_hi = env[atom] if isinstance(atom, Var) else atom.interval(env)
      if coef >= 0:
        lo, hi = lo + coef * a_lo, hi + coef * a_hi
      else:
        lo, hi = lo + coef * a_hi, hi + coef * a_lo
    return lo, hi

  def __repr__(self):
    parts = [f"{c}*{a!r}" if c != 1 else repr(a) for a, c in self.terms]
    if self.const or not parts:
      parts.append(str(self.const))
    return " + ".join(parts)


@dataclasses.dataclass(frozen=True)
class Div:
  """``expr // divisor``; with ``exact`` it only counts where the division is exact.

  An exact division appears in gradients of strided windows: ``dy[(y + p - ky) / s]``
  contributes only when ``s`` divides ``y + p - ky``.  Its range over
  ``expr in [lo, hi]`` is ``[ceil(lo / s), floor(hi / s)]``; a floor
  division's is ``[floor(lo / s), floor(hi / s)]``.  Both are monotone.
  """

  expr: Affine
  divisor: int
  exact: bool = True

  def __post_init__(self):
    object.__setattr__(self, "expr", _as_affine(self.expr))
    if not isinstance(self.divisor, int) or self.divisor < 1:
      raise ValueError(f"divisor must be a positive int, got {self.divisor!r}")

  def vars(self) -> frozenset:
    return self.expr.vars()

  def interval(self, env) -> tuple[int, int]:
    lo, hi = self.expr.interval(env)
    first = -((-lo) // self.divisor) if self.exact else lo // self.divisor
    return first, hi // self.divisor

  def __add__(self, o): return _as_affine(self) + o
  def __radd__(self, o): return _as_affine(self) + o
  def __sub__(self, o): return _as_affine(self) - o
  def __mul__(self, k): return _as_affine(self) * k
  def __rmul__(self, k): return _as_affine(self) * k

  def __repr__(self):
    return f"({self.expr!r}) {'/' if self.exact else '//'} {self.divisor}"


class _Full:
  """A whole dimension, written ``T[b, :, :]`` (used under :class:`Opaque`)."""

  def __repr__(self):
    return ":"


FULL = _Full()


# ---------------------------------------------------------------- values


class Value:
  """Base of value expressions; arithmetic builds :class:`Apply` nodes."""

  def __add__(self, o): return Apply("add", (self, _as_value(o)))
  def __radd__(self, o): return Apply("add", (_as_value(o), self))
  def __sub__(self, o): return Apply("sub", (self, _as_value(o)))
  def __rsub__(self, o): return Apply("sub", (_as_value(o), self))
  def __mul__(self, o): return Apply("mul", (self, _as_value(o)))
  def __rmul__(self, o): return Apply("mul", (_as_value(o), self))
  def __truediv__(self, o): return Apply("div", (self, _as_value(o)))
  def __rtruediv__(self, o): return Apply("div", (_as_value(o), self))
  def __neg__(self): return Apply("neg", (self,))
  def __pow__(self, o): return Apply("pow", (self, _as_value(o)))

  def children(self) -> tuple["Value", ...]:
    return ()


def _as_value(x) -> Value:
  if isinstance(x, Value):
    return x
  if isinstance(x, (int, float)):
    return Const(float(x))
  raise TypeError(f"{x!r} is not a TDL value")


@dataclasses.dataclass(frozen=True, eq=False)
class Const(Value):
  value: float

  def __repr__(self):
    return repr(self.value)


@dataclasses.dataclass(frozen=True, eq=False)
class Access(Value):
  """``T[e1, ..., en]``: read input ``input`` of the op at the given indices.

  With ``guarded`` set the access may fall outside the input and then reads
  ``pad`` (zero padding of a convolution, -inf of a max pool, the other
  operand's range of a concatenation).
  """

  input: int
  name: str
  shape: tuple[int, ...]
  index: tuple[Union[Affine, _Full], ...]
  guarded: bool = False
  pad: float = 0.0

  def __post_init__(self):
    if len(self.index) != len(self.shape):
      raise ValueError(f"access {self.name}[{', '.join(map(repr, self.index))}] gives "
                       f"{len(self.index)} indices for a tensor of rank {len(self.shape)}")

  def vars(self) -> frozenset:
    out = set()
    for e in self.index:
      if not isinstance(e, _Full):
        out |= e.vars()
    return frozenset(out)

  def __repr__(self):
    return f"{self.name}[{', '.join(map(repr, self.index))}]"


@dataclasses.dataclass(frozen=True, eq=False)
class Apply(Value):
  """An element-wise function of its arguments (``add``, ``exp``, ``select``, ...)."""

  fn: str
  args: tuple[Value, ...]

  def children(self):
    return self.args

  def __repr__(self):
    return f"{self.fn}({', '.join(map(repr, self.args))})"


REDUCERS = ("sum", "max", "min", "prod")


@dataclasses.dataclass(frozen=True, eq=False)
class Reduce(Value):
  """``reducer`` of ``body`` over the reduction variables ``vars``."""

  reducer: str
  vars: tuple[Var, ...]
  body: Value

  def __post_init__(self):
    if self.reducer not in REDUCERS:
      raise ValueError(f"unknown reducer {self.reducer!r}; one of {REDUCERS}")

  def children(self):
    return (self.body,)

  def __repr__(self):
    return f"{self.reducer.capitalize()}({', '.join(map(repr, self.vars))}: {self.body!r})"


@dataclasses.dataclass(frozen=True, eq=False)
class Opaque(Value):
  """A computation TDL cannot express, of ``args``, varying with ``over`` unknowably.

  The variables in ``over`` index the opaque result and can never be cut;
  variables that appear in ``args``' accesses outside ``over`` stay analysable
  (``batched_chol(M) = lambda b, i, j: Opaque(M[b, :, :])[i, j]``: only b).
  """

  name: str
  args: tuple[Value, ...]
  over: tuple[Var, ...] = ()

  def children(self):
    return self.args

  def __repr__(self):
    return f"Opaque[{self.name}]({', '.join(map(repr, self.args))})[{', '.join(map(repr, self.over))}]"


def _vars_tuple(vs) -> tuple[Var, ...]:
  return (vs,) if isinstance(vs, Var) else tuple(vs)


def Sum(vs, body) -> Reduce:
  return Reduce("sum", _vars_tuple(vs), _as_value(body))


def Max(vs, body) -> Reduce:
  return Reduce("max", _vars_tuple(vs), _as_value(body))


def Min(vs, body) -> Reduce:
  return Reduce("min", _vars_tuple(vs), _as_value(body))


def Prod(vs, body) -> Reduce:
  return Reduce("prod", _vars_tuple(vs), _as_value(body))


def Mean(vs, body) -> Value:
  """``Sum(vs, body) / size``: the mean as a sum, so cutting ``vs`` gives a partial."""
  vs = _vars_tuple(vs)
  return Sum(vs, body) / float(max(1, math.prod(v.extent for v in vs)))


def call(fn: str, *args) -> Apply:
  """An element-wise function application, e.g. ``call("exp", X[i])``."""
  return Apply(fn, tuple(_as_value(a) for a in args))


def walk(v: Value) -> Iterator[Value]:
  """All nodes of a value expression, pre-order.

  With an explicit stack: nested generators would cost each node its depth, and
  ``x0 + x1 + ... + x255`` (an AddN's body) is a chain 256 deep.
  """
  stack = [v]
  while stack:
    node = stack.pop()
    yield node
    stack.extend(reversed(node.children()))


# ---------------------------------------------------------------- outputs


Dim = tuple[Var, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class Output:
  """``lambda *dims: body`` for one output of an op.

  ``dims`` has one entry per output dimension: a Var, or a tuple of Vars that
  compose the dimension major-first (index ``sum(v * stride_v)``), or ``()``
  for a dimension of size 1 indexed by nothing.
  """

  dims: tuple[Dim, ...]
  body: Value

  def __post_init__(self):
    dims = tuple(_vars_tuple(d) for d in self.dims)
    object.__setattr__(self, "dims", dims)
    object.__setattr__(self, "body", _as_value(self.body))

  @property
  def shape(self) -> tuple[int, ...]:
    return tuple(math.prod(v.extent for v in d) for d in self.dims)

  def output_vars(self) -> tuple[Var, ...]:
    return tuple(v for d in self.dims for v in d)


def accesses(v: Value) -> Iterable[Access]:
  return (n for n in walk(v) if isinstance(n, Access))


def index_items(items: Sequence) -> tuple:
  """Normalises the items of ``T[...]`` into affine expressions or FULL."""
  out = []
  for e in items:
    if isinstance(e, slice):
      if e != slice(None):
        raise ValueError(f"only a whole-dimension slice ':' is allowed in an access, got {e}")
      out.append(FULL)
    elif isinstance(e, _Full):
      out.append(e)
    else:
      out.append(_as_affine(e))
  return tuple(out)
