"""Descriptions of TensorFlow's array ops: reshapes, slices, concatenation, gathers.

Most array ops move data without arithmetic, so their lambdas are a single
access whose indices say where each output element comes from::

    transpose(X, perm) = lambda *i: X[i'],  i'[perm[d]] = i[d]
    slice(X, b, s)     = lambda *i: X[b + i]
    concat(X0, X1)     = lambda .., i, ..: X0.at(.., i, ..) + X1.at(.., i - a0, ..)

Shape-carrying inputs (Reshape's shape, Transpose's perm, slice bounds,
multiples, paddings, axes) are constant meta inputs; where a worker's sub-op
needs them changed (a new shape, bounds relative to its input region) the
description's shard hook recomputes them from the :class:`WorkerView`.
Data-dependent dimensions (the gathered axis of a Gather, the segment dim of
a segment sum, the depth of a one-hot) are opaque.

Not described (left whole, never guessed): MirrorPad (reflected indices are
not affine) and Range.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.common import broadcast_access, index_vars, normalize_axes
from tf_tofu.opdefs.description import OpContext, Semantics, ShardSpec, WorkerView
from tf_tofu.opdefs.registry import describe


# ---------------------------------------------------------------- helpers


def _ints(value) -> list[int]:
  """A constant meta input (scalar or vector) as a list of Python ints."""
  return [int(x) for x in np.asarray(value).reshape(-1)]


def _axis(op: OpContext, a: int, rank: int) -> int:
  """One axis in ``[-rank, rank)`` as a non-negative int; raises naming the op."""
  if not -rank <= a < rank:
    raise op.fail(f"axis {a} is out of range for rank {rank}")
  return a % rank


def _nonempty(op: OpContext, shape: Sequence[int], what: str) -> None:
  if any(int(s) == 0 for s in shape):
    raise op.fail(f"{what} of shape {tuple(shape)} is empty; an empty tensor is not "
                  "partitioned (leave the op whole)")


def _dims(vars_: Sequence[tdl.Var]) -> tuple:
  """Output dims for per-dim variables: a size-1 dim is indexed by nothing."""
  return tuple(() if v.extent == 1 else (v,) for v in vars_)


def _index(vars_: Sequence[tdl.Var]) -> list:
  """Access indices for per-dim variables: a size-1 dim reads index 0."""
  return [0 if v.extent == 1 else v for v in vars_]


def _block_of(region, d: int) -> tuple[int, int]:
  iv = region.intervals[d]
  return iv.lo, iv.hi


# ---------------------------------------------------------------- BroadcastTo


@describe("BroadcastTo")
def broadcast_to(op: OpContext) -> Semantics:
  """``out[i] = X[i']`` with NumPy broadcasting: a size-1 dim of X is read at 0.

  Shard hook: the worker's shape is its output block's shape.
  """
  x = op.input(0)
  shape = _ints(op.const(1))
  if len(shape) < x.rank:
    raise op.fail(f"cannot broadcast rank {x.rank} to shape {shape}")
  i = index_vars("i", shape)
  body = broadcast_access(x, i)  # size-1 dims of X read at 0

  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(meta_inputs={1: np.asarray(worker.output_shapes[0])})

  return Semantics(op, [tdl.Output(i, body)], shard=shard)


# ---------------------------------------------------------------- Concat


@describe("Concat", "ConcatV2")
def concat(op: OpContext) -> Semantics:
  """``out[.., i, ..] = X0.at(.., i, ..) + X1.at(.., i - a0, ..) + X2.at(.., i - a0 - a1, ..) ...``

  ``a_k`` is operand k's size on the axis and an access outside its operand
  reads 0, so exactly one term is live for each i.  Cutting the axis gives
  each worker the part of every operand that falls in its block (possibly
  empty): a region need, not a plain cut.
  """
  n_values = len(op.inputs) - 1
  axis_input, first = (0, 1) if op.op_type == "Concat" else (n_values, 0)
  xs = [op.input(first + k) for k in range(n_values)]
  rank = xs[0].rank
  axis = _axis(op, _ints(op.const(axis_input))[0], rank)
  for x in xs:
    if x.rank != rank or any(x.shape[d] != xs[0].shape[d] for d in range(rank) if d != axis):
      raise op.fail(f"operand shapes {[x.shape for x in xs]} do not concatenate on axis {axis}")
  shape = list(xs[0].shape)
  shape[axis] = sum(x.shape[axis] for x in xs)
  i = index_vars("i", shape)
  terms, offset = [], 0
  for x in xs:
    idx = list(i)
    idx[axis] = i[axis] - offset
    terms.append(x.at(*idx))
    offset += x.shape[axis]
  body = terms[0]
  for t in terms[1:]:
    body = body + t
  return Semantics(op, [tdl.Output(i, body)])


# ---------------------------------------------------------------- ExpandDims


@describe("ExpandDims")
def expand_dims(op: OpContext) -> Semantics:
  """``out[i_0, .., i_{a-1}, 0, i_a, ..] = X[i_0, .., i_{a-1}, i_a, ..]``: a size-1 dim at a."""
  x = op.input(0)
  a = _ints(op.const(1))
  if len(a) != 1:
    raise op.fail(f"dim must hold one axis, got {a}")
  axis = _axis(op, a[0], x.rank + 1)
  i = index_vars("i", x.shape)
  dims = list(_dims(i))
  dims.insert(axis, ())
  return Semantics(op, [tdl.Output(tuple(dims), x[tuple(_index(i))])])


# ---------------------------------------------------------------- Fill


@describe("Fill")
def fill(op: OpContext) -> Semantics:
  """``out[i] = value`` (the scalar value is read whole by every worker).

  Shard hook: the worker's dims are its output block's shape.
  """
  shape = _ints(op.const(0))
  v = op.input(1)
  if v.rank != 0:
    raise op.fail(f"value must be a scalar, got shape {v.shape}")
  i = index_vars("i", shape)

  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(meta_inputs={0: np.asarray(worker.output_shapes[0])})

  return Semantics(op, [tdl.Output(_dims(i), v[()])], shard=shard)


# ---------------------------------------------------------------- Gather


@describe("Gather", "GatherV2")
def gather(op: OpContext) -> Semantics:
  """``out[b, p, q, r] = Opaque(params[b, p, :, r], indices[b, q])``.

  ``b`` are the batch dims (``batch_dims``, shared by params and indices),
  ``p`` params' dims before the axis, ``q`` indices' other dims and ``r``
  params' dims after the axis.  Which row of the axis is read depends on the
  data, so the axis is needed whole; every output dim is free.
  """
  params, indices = op.input(0), op.input(1)
  if op.op_type == "Gather":
    axis, batch_dims = 0, 0
  else:
    axis = _axis(op, _ints(op.const(2))[0], params.rank)
    batch_dims = int(op.attr("batch_dims", 0) or 0)
    if batch_dims < 0:
      batch_dims += indices.rank
  if not 0 <= batch_dims <= min(axis, indices.rank):
    raise op.fail(f"batch_dims={batch_dims} must lie in [0, min(axis={axis}, "
                  f"indices rank={indices.rank})]")
  if params.shape[:batch_dims] != indices.shape[:batch_dims]:
    raise op.fail(f"batch dims of params {params.shape} and indices {indices.shape} differ")
  b = index_vars("b", params.shape[:batch_dims])
  p = index_vars("p", params.shape[batch_dims:axis])
  q = index_vars("q", indices.shape[batch_dims:])
  r = index_vars("r", params.shape[axis + 1:])
  body = tdl.Opaque("gather", (params[(*_index(b), *_index(p), slice(None), *_index(r))],
                               indices[(*_index(b), *_index(q))]))
  return Semantics(op, [tdl.Output(_dims(b + p + q + r), body)])


# ---------------------------------------------------------------- OneHot


@describe("OneHot")
def one_hot(op: OpContext) -> Semantics:
  """``out[.., c, ..] = select(indices[..] == c, on, off)``; the depth dim c is opaque.

  Cutting c would need the indices shifted per worker, which a sub-op cannot
  do; every indices dim is free.
  """
  indices = op.input(0)
  depth = _ints(op.const(1))[0]
  on, off = op.input(2), op.input(3)
  if on.rank or off.rank:
    raise op.fail("on_value and off_value must be scalars")
  a = int(op.attr("axis", -1))
  axis = indices.rank if a == -1 else _axis(op, a, indices.rank + 1)
  q = index_vars("q", indices.shape)
  c = tdl.Var("c", depth)
  hit = tdl.Opaque("one_hot", (indices[tuple(_index(q))],), over=(c,) if depth != 1 else ())
  dims = list(_dims(q))
  dims.insert(axis, (c,) if depth != 1 else ())
  return Semantics(op, [tdl.Output(tuple(dims), tdl.call("select", hit, on[()], off[()]))])


# ---------------------------------------------------------------- scans, top-k, scatters


@describe("Cumsum", "Cumprod")
def cumulative(op: OpContext) -> Semantics:
  """``out[p, j, r] = Opaque(X[p, :, r])[j]``: a running sum (or product) along the axis.

  Each output along the axis depends on a prefix (a suffix when ``reverse``)
  of the axis, so the axis is opaque; every other dim is free.
  """
  x = op.input(0)
  axis = _axis(op, _ints(op.const(1))[0], x.rank)
  p, r = index_vars("p", x.shape[:axis]), index_vars("r", x.shape[axis + 1:])
  j = tdl.Var("j", x.shape[axis])
  over = (j,) if j.extent != 1 else ()
  body = tdl.Opaque(op.op_type.lower(), (x[(*_index(p), slice(None), *_index(r))],), over=over)
  return Semantics(op, [tdl.Output(_dims(p) + (over,) + _dims(r), body)])


@describe("TopKV2")
def top_k(op: OpContext) -> Semantics:
  """``values[i, j]``, ``indices[i, j] = Opaque(X[i, :])[j]``: the k largest of each row.

  The last dim is searched whole (opaque); the leading dims are free.
  """
  x = op.input(0)
  k = _ints(op.const(1))[0]
  i = index_vars("i", x.shape[:-1])
  j = tdl.Var("j", k)
  over = (j,) if k != 1 else ()
  outs = [tdl.Output(_dims(i) + (over,), tdl.Opaque(
      name, (x[(*_index(i), slice(None))],), over=over)) for name in ("top_k", "top_k_indices")]
  return Semantics(op, outs)


@describe("ScatterNd")
def scatter_nd(op: OpContext) -> Semantics:
  """``out[s, t] = Sum_q select(indices[q, :] == s, updates[q, t], 0)``.

  ``q`` are the index rows (reduced: cutting them gives a PARTIAL, each worker
  scattering its rows into a full-size output), ``s`` the ``D`` scattered
  dims (data dependent: opaque) and ``t`` the slice dims updates carry whole
  (free).  Shard hook: the ``shape`` input is the worker's output block.
  """
  indices, updates = op.input(0), op.input(1)
  shape = _ints(op.const(2))
  depth = indices.shape[-1]
  rows = indices.shape[:-1]
  if updates.shape[:len(rows)] != rows or updates.shape[len(rows):] != tuple(shape[depth:]):
    raise op.fail(f"updates {updates.shape} do not match indices {indices.shape} and shape "
                  f"{tuple(shape)}")
  q = index_vars("q", rows)
  s = index_vars("s", shape[:depth])
  t = index_vars("t", shape[depth:])
  over = tuple(v for v in s if v.extent != 1)
  hit = tdl.Opaque("scatter_nd", (indices[(*_index(q), slice(None))],), over=over)
  body = hit * updates[tuple(_index(q) + _index(t))]
  red = tuple(v for v in q if v.extent != 1)
  if red:
    body = tdl.Sum(red, body)

  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(meta_inputs={2: np.asarray(worker.output_shapes[0])})

  return Semantics(op, [tdl.Output(_dims(s + t), body)], shard=shard)


# ---------------------------------------------------------------- Pack


@describe("Pack")
def pack(op: OpContext) -> Semantics:
  """``out[.., k, ..] = X_k[..]``: the stacked dim k picks an operand, so it is opaque.

  The other dims are free (every operand cut alike).
  """
  xs = [op.input(k) for k in range(len(op.inputs))]
  shape = xs[0].shape
  if any(x.shape != shape for x in xs):
    raise op.fail(f"operand shapes {[x.shape for x in xs]} differ")
  axis = _axis(op, int(op.attr("axis", 0)), len(shape) + 1)
  i = index_vars("i", shape)
  k = tdl.Var("k", len(xs))
  body = tdl.Opaque("pack", tuple(x[tuple(_index(i))] for x in xs),
                    over=(k,) if len(xs) > 1 else ())
  dims = list(_dims(i))
  dims.insert(axis, (k,) if len(xs) > 1 else ())
  return Semantics(op, [tdl.Output(tuple(dims), body)])


# ---------------------------------------------------------------- Pad


@describe("Pad", "PadV2")
def pad(op: OpContext) -> Semantics:
  """``out[i] = X.at(i - p_lo)``: an index outside X reads 0 (PadV2: ``constant_values``).

  Shard hook: each worker's paddings are the parts of its output block that
  fall before and after its region of X.
  """
  x = op.input(0)
  pads = np.asarray(op.const(1)).reshape(-1, 2)
  if pads.shape != (x.rank, 2) or (pads < 0).any():
    raise op.fail(f"paddings {pads.tolist()} must be [rank={x.rank}, 2] and non-negative")
  lo = [int(p) for p in pads[:, 0]]
  shape = [s + int(a) + int(b) for s, (a, b) in zip(x.shape, pads)]
  i = index_vars("i", shape)
  body = x.at(*(v - p for v, p in zip(i, lo)))
  if op.op_type == "PadV2":
    c = op.input(2)
    if c.rank:
      raise op.fail("constant_values must be a scalar")
    body = tdl.call("pad", body, c[()])

  def shard(worker: WorkerView) -> ShardSpec:
    out, reg = worker.output_regions[0], worker.input_regions[0]
    new = []
    for d in range(x.rank):
      o_lo, o_hi = _block_of(out, d)
      before = max(0, min(o_hi, lo[d]) - o_lo)
      new.append([before, (o_hi - o_lo) - before - reg.intervals[d].size])
    return ShardSpec(meta_inputs={1: np.asarray(new).reshape(x.rank, 2)})

  return Semantics(op, [tdl.Output(i, body)], shard=shard)


# ---------------------------------------------------------------- Reshape


def _reshape_structure(in_shape: Sequence[int], out_shape: Sequence[int]):
  """Factors a reshape into shared and entangled index variables.

  Size-1 dims are dropped.  Walking both shapes major-first, the greatest
  common factor ``g`` of what remains of the current input and output dims
  is one *shared* variable (it is a digit of both mixed-radix numbers).  When
  the remainders are coprime the dims are *entangled* up to the next point
  where the products of both sides agree (a minimal block whose digits do
  not line up): there the output dims get their own variables and the input
  is read through floor divisions of their flat index.

  Returns ``(out_parts, in_parts, cuttable, extents)``: per output dim the
  variables' ``(id, extent)`` major-first; per input dim its parts
  major-first, ``("var", id, extent)`` (a shared digit), ``("div", ids,
  extent)`` (the head of an entangled run: its flat index over the output
  variables ``ids``, floor-divided) or ``("full",)`` (a dim inside an
  entangled run); the ids of the shared variables that are major in both
  their input and output dim (the only ones whose cut is a contiguous box on
  both sides); and every variable's extent.
  """
  ins = [d for d, s in enumerate(in_shape) if s != 1]
  outs = [d for d, s in enumerate(out_shape) if s != 1]
  out_parts: dict[int, list] = {d: [] for d in outs}
  in_parts: dict[int, list] = {d: [] for d in ins}
  extents: list[int] = []
  cuttable: set = set()
  i = o = 0
  rin = in_shape[ins[0]] if ins else 1
  rout = out_shape[outs[0]] if outs else 1
  while i < len(ins):
    g = math.gcd(rin, rout)
    if g > 1:
      vid = len(extents)
      extents.append(g)
      din, dout = ins[i], outs[o]
      if not in_parts[din] and not out_parts[dout]:
        cuttable.add(vid)
      in_parts[din].append(("var", vid, g))
      out_parts[dout].append((vid, g))
      rin //= g
      rout //= g
    else:
      in_run, out_run = [(ins[i], rin)], [(outs[o], rout)]
      pin, pout = rin, rout
      while pin != pout:
        if pin < pout:
          i += 1
          in_run.append((ins[i], in_shape[ins[i]]))
          pin *= in_shape[ins[i]]
        else:
          o += 1
          out_run.append((outs[o], out_shape[outs[o]]))
          pout *= out_shape[outs[o]]
      ids = []
      for d, size in out_run:
        ids.append(len(extents))
        extents.append(size)
        out_parts[d].append((ids[-1], size))
      in_parts[in_run[0][0]].append(("div", tuple(ids), in_run[0][1]))
      for d, _ in in_run[1:]:
        in_parts[d].append(("full",))
      rin = rout = 1
    if rin == 1:
      i += 1
      rin = in_shape[ins[i]] if i < len(ins) else 1
    if rout == 1:
      o += 1
      rout = out_shape[outs[o]] if o < len(outs) else 1
  return out_parts, in_parts, cuttable, extents


@describe("Reshape")
def reshape(op: OpContext) -> Semantics:
  """Reshape as a correspondence of index digits (row-major order is kept).

  Both shapes are mixed-radix numbers of the same flat index.  Where a dim
  maps to whole dims the lambda is a plain access with composite dims,
  ``[a, b] -> [a*b]: out[(i, j)] = X[i, j]`` (merge) and
  ``[a*b] -> [a, b]: out[i, j] = X[i*B + j]`` (split); a common factor of two
  dims is a digit of both (``[6, 4] -> [4, 6]`` shares the major 2).  Digits
  that do not line up are read through floor divisions of their flat index
  and are opaque.  A digit can be cut only when it is the major digit of
  both its input dim and its output dim (then a worker's rows are one
  contiguous box of X and of the output); size-1 dims are free.

  Shard hook: the worker's new shape is its output block's shape.
  """
  x = op.input(0)
  spec = _ints(op.const(1))
  total = math.prod(x.shape)
  known = math.prod(s for s in spec if s != -1)
  if spec.count(-1) > 1 or any(s < -1 for s in spec):
    raise op.fail(f"invalid shape {spec}")
  if -1 in spec:
    if known == 0 or total % known:
      raise op.fail(f"cannot reshape {x.shape} to {spec}")
    spec = [total // known if s == -1 else s for s in spec]
  if math.prod(spec) != total:
    raise op.fail(f"cannot reshape {x.shape} ({total} elements) to {spec}")
  _nonempty(op, x.shape, "input")
  out_parts, in_parts, cuttable, extents = _reshape_structure(x.shape, spec)
  names = {}
  for d, parts in out_parts.items():
    for k, (vid, _) in enumerate(parts):
      names[vid] = f"o{d}" if len(parts) == 1 else f"o{d}_{k}"
  v = [tdl.Var(names[vid], e) for vid, e in enumerate(extents)]
  dims = tuple(tuple(v[vid] for vid, _ in out_parts[d]) if d in out_parts else ()
               for d in range(len(spec)))
  index = []
  for d in range(x.rank):
    parts = in_parts.get(d)
    if not parts:
      index.append(0)
      continue
    if parts[0][0] == "full":
      index.append(slice(None))
      continue
    e, stride = 0, 1
    for part in reversed(parts):
      if part[0] == "var":
        term = v[part[1]]
      else:
        ids = part[1]
        flat, s = 0, 1
        for vid in reversed(ids):
          flat = flat + v[vid] * s
          s *= extents[vid]
        term = tdl.Div(flat, s // part[2], exact=False)
      e = term * stride + e
      stride *= part[2]
    index.append(e)
  body = x[tuple(index)]
  opaque = tuple(var for vid, var in enumerate(v) if vid not in cuttable)
  if opaque:
    body = tdl.Opaque("reshape", (body,), over=opaque)

  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(meta_inputs={1: np.asarray(worker.output_shapes[0])})

  return Semantics(op, [tdl.Output(dims, body)], shard=shard)


# ---------------------------------------------------------------- ReverseV2


@describe("ReverseV2")
def reverse_v2(op: OpContext) -> Semantics:
  """``out[i] = X[i']`` with ``i'_d = D_d - 1 - i_d`` on the reversed axes, ``i_d`` elsewhere.

  A worker's block of a reversed dim reads the mirrored block of X.
  """
  x = op.input(0)
  axes = normalize_axes(op, op.const(1), x.rank)
  i = index_vars("i", x.shape)
  idx = [x.shape[d] - 1 - v if d in axes else v for d, v in enumerate(i)]
  return Semantics(op, [tdl.Output(i, x[tuple(idx)])])


# ---------------------------------------------------------------- Slice


@describe("Slice")
def slice_(op: OpContext) -> Semantics:
  """``out[i] = X[b + i]`` (size -1: to the end of the dim).

  Shard hook: begin 0 and size = the output block's shape (the worker's
  region of X starts at ``b + block start``).
  """
  x = op.input(0)
  begin, size = _ints(op.const(1)), _ints(op.const(2))
  if len(begin) != x.rank or len(size) != x.rank:
    raise op.fail(f"begin {begin} and size {size} must have rank {x.rank} entries")
  size = [x.shape[d] - b if s == -1 else s for d, (b, s) in enumerate(zip(begin, size))]
  if any(b < 0 or s < 0 or b + s > x.shape[d] for d, (b, s) in enumerate(zip(begin, size))):
    raise op.fail(f"slice begin {begin}, size {size} is out of range of {x.shape}")
  i = index_vars("i", size)

  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(meta_inputs={1: np.zeros(x.rank, np.int64),
                                  2: np.asarray(worker.output_shapes[0])})

  return Semantics(op, [tdl.Output(i, x[tuple(b + v for b, v in zip(begin, i))])],
                   shard=shard)


# ---------------------------------------------------------------- Split


@describe("Split")
def split(op: OpContext) -> Semantics:
  """``out_k[.., i, ..] = X[.., k*S + i, ..]`` with ``S = D / num_split``; i is opaque.

  Cutting i would need a strided set of X per worker; the other dims are
  free (X and every output cut alike).
  """
  x = op.input(1)
  axis = _axis(op, _ints(op.const(0))[0], x.rank)
  num = int(op.attr("num_split"))
  if x.shape[axis] % num:
    raise op.fail(f"dim {axis} of size {x.shape[axis]} does not split {num} ways")
  return _split_outputs(op, x, axis, [x.shape[axis] // num] * num, shared=True)


@describe("SplitV")
def split_v(op: OpContext) -> Semantics:
  """``out_k[.., i_k, ..] = X[.., o_k + i_k, ..]``, ``o_k`` the sum of the sizes before k.

  One size may be -1 (the rest of the dim).  The split dim is opaque; the
  other dims are free.
  """
  x = op.input(0)
  sizes = _ints(op.const(1))
  axis = _axis(op, _ints(op.const(2))[0], x.rank)
  if sizes.count(-1) > 1:
    raise op.fail(f"size_splits {sizes} has more than one -1")
  if -1 in sizes:
    sizes[sizes.index(-1)] = x.shape[axis] - sum(s for s in sizes if s != -1)
  if sum(sizes) != x.shape[axis] or any(s < 0 for s in sizes):
    raise op.fail(f"size_splits {sizes} do not add up to dim {axis} of size {x.shape[axis]}")
  return _split_outputs(op, x, axis, sizes, shared=False)


def _split_outputs(op: OpContext, x, axis: int, sizes: Sequence[int],
                   shared: bool) -> Semantics:
  """Output k reads ``sizes[k]`` entries of the axis from its offset; the axis var is opaque.

  With ``shared`` (equal pieces) every output uses the same axis variable.
  """
  i = list(index_vars("i", x.shape))
  outs, offset = [], 0
  for k, size in enumerate(sizes):
    s = tdl.Var("s" if shared else f"s{k}", size)
    idx = _index(i)
    idx[axis] = s + offset if size != 1 else offset
    body = x[tuple(idx)]
    if size > 1:
      body = tdl.Opaque("split", (body,), over=(s,))
    dims = list(_dims(i))
    dims[axis] = (s,) if size != 1 else ()
    outs.append(tdl.Output(tuple(dims), body))
    offset += size
  return Semantics(op, outs)


# ---------------------------------------------------------------- Squeeze


@describe("Squeeze")
def squeeze(op: OpContext) -> Semantics:
  """``out[i_0, .., i_{s-1}, i_{s+1}, ..] = X[i_0, .., i_{s-1}, 0, i_{s+1}, ..]`` for squeezed s.

  Shard hook: ``squeeze_dims`` made explicit, so that a dim cut down to one
  element on a worker is not squeezed too.
  """
  x = op.input(0)
  given = list(op.attr("squeeze_dims", []) or [])
  if given:
    dims_sq = set(normalize_axes(op, given, x.rank))
    bad = [d for d in dims_sq if x.shape[d] != 1]
    if bad:
      raise op.fail(f"cannot squeeze dims {bad} of shape {x.shape}: not of size 1")
  else:
    dims_sq = {d for d, s in enumerate(x.shape) if s == 1}
  i = index_vars("i", x.shape)
  kept = [v for d, v in enumerate(i) if d not in dims_sq]
  explicit = sorted(dims_sq)

  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(attrs={"squeeze_dims": explicit})

  return Semantics(op, [tdl.Output(_dims(kept), x[tuple(_index(i))])], shard=shard)


# ---------------------------------------------------------------- StridedSlice


@dataclasses.dataclass(frozen=True)
class _SliceDim:
  """One entry of a strided slice in output order.

  ``kind`` is "range" (output dim reading X dim ``in_dim`` at
  ``start + stride * v``, ``size`` elements), "shrink" (X dim ``in_dim`` read at
  ``start``, no output dim) or "new" (an output dim of size 1, no X dim).
  """

  kind: str
  in_dim: int = -1
  start: int = 0
  stride: int = 1
  size: int = 1


def _strided_slice_dims(op: OpContext, shape: Sequence[int], begin: Sequence[int],
                        end: Sequence[int], strides: Sequence[int]) -> list[_SliceDim]:
  """TF's dense slice spec (``ValidateStridedSliceOp``), in output order."""
  bm, em, elm, nam, sam = (int(op.attr(k, 0) or 0) for k in (
      "begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"))
  m = len(begin)
  if len(end) != m or len(strides) != m:
    raise op.fail(f"begin {list(begin)}, end {list(end)} and strides {list(strides)} "
                  "differ in length")
  if elm & (elm - 1):
    raise op.fail("more than one ellipsis in the slice spec")
  rank = len(shape)
  seen, new_after = False, 0
  for k in range(m):
    if seen and nam >> k & 1:
      new_after += 1
    if elm >> k & 1:
      seen = True
  sparse = m
  if not seen:
    elm |= 1 << m
    sparse = m + 1
  out: list[_SliceDim] = []
  full = 0
  for k in range(sparse):
    if elm >> k & 1:
      nxt = min(rank - (sparse - k) + 1 + new_after, rank)
      while full < nxt:
        out.append(_SliceDim("range", full, 0, 1, int(shape[full])))
        full += 1
    elif nam >> k & 1:
      out.append(_SliceDim("new"))
    else:
      if full >= rank:
        raise op.fail(f"slice spec indexes dim {full} of a rank-{rank} input")
      dim, s = int(shape[full]), int(strides[k])
      if s == 0:
        raise op.fail(f"stride {k} is 0")
      if sam >> k & 1:
        b = int(begin[k])
        b = b + dim if b < 0 else b
        if s <= 0 or not 0 <= b < dim:
          raise op.fail(f"shrink index {begin[k]} (stride {s}) is invalid for dim of size {dim}")
        out.append(_SliceDim("shrink", full, b))
      else:
        lo, hi = (0, dim) if s > 0 else (-1, dim - 1)

        def canonical(x: int, c: int, masked: bool) -> int:
          if masked:
            return (lo, hi)[c] if s > 0 else (lo, hi)[1 - c]
          x = x + dim if x < 0 else x
          return min(max(x, lo), hi)

        b = canonical(int(begin[k]), 0, bool(bm >> k & 1))
        e = canonical(int(end[k]), 1, bool(em >> k & 1))
        length = e - b
        size = 0 if length == 0 or (length < 0) != (s < 0) else -(-abs(length) // abs(s))
        out.append(_SliceDim("range", full, b, s, size))
      full += 1
  return out


def _respec(dims: Sequence[_SliceDim], ranges: Sequence[Optional[tuple[int, ...]]]):
  """A slice spec without ellipsis or begin/end masks for one worker's sub-op.

  ``ranges[k]`` is None for a new axis, ``(index,)`` for a shrink entry and
  ``(first, count)`` for a range entry: the position of its first element in
  the sub-op's tensor and how many elements it takes (stride unchanged).
  Returns ``(begin, end, strides, attrs)``; a negative-stride range that runs
  to index 0 sets its end_mask bit, since an end of -1 would wrap around.
  """
  begin, end, strides = [], [], []
  em = nam = sam = 0
  for k, (dim, rng) in enumerate(zip(dims, ranges)):
    if dim.kind == "new":
      begin.append(0), end.append(0), strides.append(1)
      nam |= 1 << k
    elif dim.kind == "shrink":
      begin.append(rng[0]), end.append(rng[0] + 1), strides.append(1)
      sam |= 1 << k
    else:
      first, count = rng
      s = dim.stride
      if count == 0:
        begin.append(0), end.append(0), strides.append(1)
        continue
      last = first + s * (count - 1)
      begin.append(first), strides.append(s)
      if s > 0:
        end.append(last + 1)
      elif last == 0:
        end.append(0)
        em |= 1 << k  # with a negative stride, end -1 would wrap around
      else:
        end.append(last - 1)
  attrs = {"begin_mask": 0, "end_mask": em, "ellipsis_mask": 0, "new_axis_mask": nam,
           "shrink_axis_mask": sam}
  return np.asarray(begin), np.asarray(end), np.asarray(strides), attrs


def _slice_consts(op: OpContext, first: int):
  return (_ints(op.const(first)), _ints(op.const(first + 1)), _ints(op.const(first + 2)))


@describe("StridedSlice")
def strided_slice(op: OpContext) -> Semantics:
  """``out[.., i, ..] = X[.., b + s*i, .., c, ..]`` after TF's mask expansion.

  Each range entry reads its X dim at ``b + s*i`` (s may be negative), a
  shrink entry reads a fixed index c (no output dim), a new axis is an output
  dim of size 1; the ellipsis expands to whole dims.  Every output dim is
  free; a strided cut reads the hull of its elements.

  Shard hook: the spec rewritten without masks (but new/shrink axes) relative
  to the worker's region of X.
  """
  x = op.input(0)
  begin, end, strides = _slice_consts(op, 1)
  dims = _strided_slice_dims(op, x.shape, begin, end, strides)
  _nonempty(op, [d.size for d in dims if d.kind == "range"], "result")
  idx: list = [None] * x.rank
  out_dims, out_of = [], []  # out_of[k]: the output dim of entry k (or None)
  for k, dim in enumerate(dims):
    if dim.kind == "new":
      out_of.append(len(out_dims))
      out_dims.append(())
    elif dim.kind == "shrink":
      out_of.append(None)
      idx[dim.in_dim] = dim.start
    else:
      v = tdl.Var(f"i{len(out_dims)}", dim.size)
      out_of.append(len(out_dims))
      out_dims.append((v,) if dim.size != 1 else ())
      idx[dim.in_dim] = dim.start + dim.stride * v if dim.size != 1 else dim.start

  def shard(worker: WorkerView) -> ShardSpec:
    out, reg = worker.output_regions[0], worker.input_regions[0]
    ranges = []
    for k, dim in enumerate(dims):
      if dim.kind == "new":
        ranges.append(None)
        continue
      r_lo = reg.intervals[dim.in_dim].lo
      if dim.kind == "shrink":
        ranges.append((dim.start - r_lo,))
        continue
      o_lo, o_hi = _block_of(out, out_of[k])
      ranges.append((dim.start + dim.stride * o_lo - r_lo, o_hi - o_lo))
    b, e, s, attrs = _respec(dims, ranges)
    return ShardSpec(attrs=attrs, meta_inputs={1: b, 2: e, 3: s})

  return Semantics(op, [tdl.Output(tuple(out_dims), x[tuple(idx)])], shard=shard)


@describe("StridedSliceGrad")
def strided_slice_grad(op: OpContext) -> Semantics:
  """``out[x] = dy.at(.., (x_d - b_d) / s_d, ..)``: dy scattered into zeros.

  ``/`` is exact division (a position between strides reads 0) and an index
  outside dy reads 0.  A shrink dim is zero except at its index, so its
  output dim is opaque; every other output dim is free.

  Shard hook: the worker's shape is its output block's shape and the spec is
  rewritten relative to that block and the worker's region of dy.
  """
  shape = _ints(op.const(0))
  begin, end, strides = _slice_consts(op, 1)
  dy = op.input(4)
  dims = _strided_slice_dims(op, shape, begin, end, strides)
  _nonempty(op, shape, "result")
  xv = index_vars("x", shape)
  opaque = []
  idx, dy_of = [], []  # dy_of[k]: the dy dim of entry k (or None)
  for dim in dims:
    if dim.kind == "new":
      dy_of.append(len(idx))
      idx.append(0)
    elif dim.kind == "shrink":
      dy_of.append(None)
      if shape[dim.in_dim] != 1:
        opaque.append(xv[dim.in_dim])
    else:
      dy_of.append(len(idx))
      v = xv[dim.in_dim] if shape[dim.in_dim] != 1 else 0
      if dim.stride == 1:
        idx.append(v - dim.start)
      elif dim.stride > 0:
        idx.append(tdl.Div(v - dim.start, dim.stride, exact=True))
      else:
        idx.append(tdl.Div(dim.start - v, -dim.stride, exact=True))
  dy_shape = tuple(d.size for d in dims if d.kind != "shrink")
  if dy.shape != dy_shape:
    raise op.fail(f"dy of shape {dy.shape} does not match the slice's shape {dy_shape}")
  body = dy.at(*idx)
  if opaque:
    body = tdl.Opaque("shrink_scatter", (body,), over=tuple(opaque))

  def shard(worker: WorkerView) -> ShardSpec:
    out, reg = worker.output_regions[0], worker.input_regions[4]
    ranges = []
    for k, dim in enumerate(dims):
      if dim.kind == "new":
        ranges.append(None)
        continue
      o_lo = out.intervals[dim.in_dim].lo
      if dim.kind == "shrink":
        ranges.append((dim.start - o_lo,))
        continue
      v_lo, v_hi = _block_of(reg, dy_of[k])
      ranges.append((dim.start + dim.stride * v_lo - o_lo, v_hi - v_lo))
    b, e, s, attrs = _respec(dims, ranges)
    return ShardSpec(attrs=attrs, meta_inputs={0: np.asarray(worker.output_shapes[0]),
                                               1: b, 2: e, 3: s})

  return Semantics(op, [tdl.Output(_dims(xv), body)], shard=shard)


# ---------------------------------------------------------------- Tile


@describe("Tile")
def tile(op: OpContext) -> Semantics:
  """``out[(t_0, i_0), (t_1, i_1), ..] = X[i_0, i_1, ..]``: dim d composes (tile t_d, index i_d).

  Cutting t_d is a contiguous cut of the output (X replicated) when the
  blocks of t_d land on the output's blocks; cutting i_d is not (strided),
  except where ``multiples[d] = 1``.

  Shard hook: multiples = output block shape / the worker's region of X.
  """
  x = op.input(0)
  mult = _ints(op.const(1))
  if len(mult) != x.rank or any(m < 0 for m in mult):
    raise op.fail(f"multiples {mult} must be {x.rank} non-negative ints")
  _nonempty(op, [s * m for s, m in zip(x.shape, mult)], "result")
  i = index_vars("i", x.shape)
  dims = []
  for d, (v, m) in enumerate(zip(i, mult)):
    parts = (tdl.Var(f"t{d}", m),) if m != 1 else ()
    dims.append(parts + ((v,) if v.extent != 1 else ()))

  def shard(worker: WorkerView) -> ShardSpec:
    reg = worker.input_regions[0]
    return ShardSpec(meta_inputs={1: np.asarray(
        [o // r for o, r in zip(worker.output_shapes[0], reg.shape)])})

  return Semantics(op, [tdl.Output(tuple(dims), x[tuple(_index(i))])], shard=shard)


# ---------------------------------------------------------------- Transpose


@describe("Transpose")
def transpose(op: OpContext) -> Semantics:
  """``out[i_0, .., i_{r-1}] = X[j]`` with ``j[perm[d]] = i_d``: output dim d is X's dim perm[d]."""
  x = op.input(0)
  perm = _ints(op.const(1))
  if sorted(perm) != list(range(x.rank)):
    raise op.fail(f"perm {perm} is not a permutation of {x.rank} dims")
  i = index_vars("i", [x.shape[p] for p in perm])
  idx: list = [None] * x.rank
  for d, p in enumerate(perm):
    idx[p] = i[d]
  return Semantics(op, [tdl.Output(i, x[tuple(idx)])])


# ---------------------------------------------------------------- Unpack


@describe("Unpack")
def unpack(op: OpContext) -> Semantics:
  """``out_k[i_0, .., i_{a-1}, i_{a+1}, ..] = X[i_0, .., i_{a-1}, k, i_{a+1}, ..]``."""
  x = op.input(0)
  axis = _axis(op, int(op.attr("axis", 0)), x.rank)
  num = x.shape[axis]
  i = list(index_vars("i", x.shape))
  del i[axis]
  outs = []
  for k in range(num):
    idx = _index(i)
    idx.insert(axis, k)
    outs.append(tdl.Output(_dims(i), x[tuple(idx)]))
  return Semantics(op, outs)


# ---------------------------------------------------------------- UnsortedSegment*


_SEGMENT_REDUCERS = {"UnsortedSegmentSum": "sum", "UnsortedSegmentMax": "max",
                     "UnsortedSegmentMin": "min", "UnsortedSegmentProd": "prod"}


@describe(*_SEGMENT_REDUCERS)
def unsorted_segment(op: OpContext) -> Semantics:
  """``out[s, t] = R_q select(ids[q] == s, data[q, t], identity)`` (R = sum, max, min, prod).

  The segment dim s is data dependent (opaque); data's trailing dims t are
  free; the id dims q are reduced: for the sum, cutting them gives a
  PARTIAL (each worker sums its share of the rows into a full-size output;
  this is the gradient of an embedding Gather).
  """
  data, ids = op.input(0), op.input(1)
  num = _ints(op.const(2))[0]
  k = ids.rank
  if data.shape[:k] != ids.shape:
    raise op.fail(f"segment_ids shape {ids.shape} is not a prefix of data shape {data.shape}")
  q = index_vars("q", ids.shape)
  t = index_vars("t", data.shape[k:])
  s = tdl.Var("s", num)
  hit = tdl.Opaque("segment", (ids[tuple(_index(q))],), over=(s,) if num != 1 else ())
  row = data[tuple(_index(q) + _index(t))]
  reducer = _SEGMENT_REDUCERS[op.op_type]
  body = hit * row if reducer == "sum" else tdl.call("select", hit, row, 0.0)
  red = tuple(v for v in q if v.extent != 1)
  if red:
    body = tdl.Reduce(reducer, red, body)
  return Semantics(op, [tdl.Output(_dims((s,) + t), body)])
