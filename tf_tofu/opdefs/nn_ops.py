"""Descriptions of TensorFlow's neural-network ops: convolutions, pooling, normalisation.

Layout: channels last (NHWC, and NDHWC for the batch norms); any other data
format raises ``op.fail`` so the op is left whole.

Windowed ops read their data input at ``y * s + k * d - pad`` (a halo when a
spatial dim is cut).  A worker's sub-op is the same op on its regions with
EXPLICIT padding equal to the part of its window range that falls outside the
input (``WorkerView.input_padding``), and with its own shape inputs
(``input_sizes``, ``filter_sizes``, ``orig_input_shape``).  The gradients with
respect to a windowed op's input read the output gradient at exact divisions
``dy[(i + pad - k * d) / s]`` (``tdl.Div(..., exact=True)``).

Where the same op on a worker's regions cannot compute the worker's part
exactly (AvgPool's SAME divisor, a transposed window that would need negative
padding, a normalisation over a cut dim), the variables concerned are marked
opaque (:func:`not_cuttable`) so that no strategy is derived for them.  One
reason recurs: when a dim is cut but a statistic over that same dim (a batch
norm's mean, a softmax's denominator) makes every worker need the whole dim,
the sub-op would compute the whole output, not the worker's block.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.common import broadcast_shape, index_vars
from tf_tofu.opdefs.description import OpContext, Semantics, ShardSpec, TensorRef, WorkerView
from tf_tofu.opdefs.registry import describe

NEG_INF = float("-inf")


# ---------------------------------------------------------------- helpers


def same_padding(size: int, k: int, stride: int, dilation: int = 1) -> tuple[int, int]:
  """TF's SAME padding ``(before, after)`` of one spatial dim."""
  eff = (k - 1) * dilation + 1
  out = -(-size // stride)
  total = max(0, (out - 1) * stride + eff - size)
  return total // 2, total - total // 2


def window_padding(op: OpContext, sizes, ksizes, strides, dilations) -> list[tuple[int, int]]:
  """Per spatial dim ``(before, after)`` padding of a windowed op under its padding attr."""
  padding = op.attr("padding")
  if padding == "VALID":
    return [(0, 0)] * len(sizes)
  if padding == "SAME":
    return [same_padding(s, k, st, d) for s, k, st, d in zip(sizes, ksizes, strides, dilations)]
  if padding == "EXPLICIT":
    ex = list(op.attr("explicit_paddings") or [])
    if len(ex) != 2 * (len(sizes) + 2):
      raise op.fail(f"explicit_paddings {ex} should hold {2 * (len(sizes) + 2)} values")
    if ex[0] or ex[1] or ex[-2] or ex[-1]:
      raise op.fail(f"explicit_paddings {ex} pad the batch or channel dim")
    return [(ex[2 * d], ex[2 * d + 1]) for d in range(1, 1 + len(sizes))]
  raise op.fail(f"unsupported padding {padding!r}")


def window_out(size: int, k: int, stride: int, dilation: int, pad: tuple[int, int]) -> int:
  """Output size of one windowed dim: ``(size + pads - eff) // stride + 1``."""
  eff = (k - 1) * dilation + 1
  return (size + pad[0] + pad[1] - eff) // stride + 1


def _explicit_nhwc(pads_hw) -> list[int]:
  (t, b), (l, r) = pads_hw
  return [0, 0, t, b, l, r, 0, 0]


def _require_nhwc(op: OpContext) -> None:
  fmt = op.attr("data_format", "NHWC")
  if fmt != "NHWC":
    raise op.fail(f"data_format {fmt!r} is not described; only NHWC (channels last) is")


def _spatial(op: OpContext, key: str, default=None) -> tuple[int, int]:
  """The (height, width) entries of a 4-entry NHWC attr; batch and channel must be 1."""
  vals = op.attr(key, default)
  if vals is None or len(vals) != 4:
    raise op.fail(f"attr {key} = {vals!r} should have 4 entries (NHWC)")
  if vals[0] != 1 or vals[3] != 1:
    raise op.fail(f"attr {key} = {list(vals)} must be 1 on the batch and channel dims")
  return int(vals[1]), int(vals[2])


def _undilated(op: OpContext) -> None:
  dh, dw = _spatial(op, "dilations", [1, 1, 1, 1])
  if (dh, dw) != (1, 1):
    raise op.fail(f"dilations {[1, dh, dw, 1]} are not described for {op.op_type}: TF's CPU "
                  "kernels reject them, so the description could not be checked")


def not_cuttable(value: tdl.Value, over: Sequence[tdl.Var], why: str) -> tdl.Value:
  """``value`` with ``over`` marked opaque: no strategy cuts those variables.

  ``why`` names the reason (it is the Opaque's name); the accesses inside stay
  analysable, so the other variables keep their strategies and regions.
  """
  over = tuple(over)
  return tdl.Opaque(why, (value,), over=over) if over else value


def _check_shape(op: OpContext, what: str, got: Sequence[int], want: Sequence[int]) -> None:
  if tuple(got) != tuple(want):
    raise op.fail(f"{what} has shape {tuple(got)}, expected {tuple(want)}")


def _forward_pads(worker: WorkerView, x_index: int, out_rows: Sequence[int],
                  taps: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                  dims: Sequence[int] = (1, 2)) -> list[tuple[int, int]]:
  """EXPLICIT padding of a worker's sub-op for a forward window ``x[y * s + k * d - p]``.

  Where the worker's region of ``x`` is non-empty the unclamped access range is
  the region plus ``input_padding``, which is exactly what the sub-op needs.
  Where every access falls in the padding the region is empty; the sub-op then
  reads a zero-size input and all of ``(out - 1) * s + eff`` is padding.
  """
  region = worker.input_regions[x_index]
  pads = worker.input_padding[x_index]
  out = []
  for d, rows, k, s, dil in zip(dims, out_rows, taps, strides, dilations):
    if region.intervals[d].empty:
      out.append(((rows - 1) * s + (k - 1) * dil + 1, 0))
    else:
      out.append(tuple(pads[d]))
  return out


def _transposed_pads(op: OpContext, worker: WorkerView, dy_index: int,
                     pads: Sequence[tuple[int, int]], ksizes: Sequence[int],
                     strides: Sequence[int], dims: Sequence[int] = (1, 2)) -> list[tuple[int, int]]:
  """EXPLICIT padding of a worker's gradient-w.r.t.-input sub-op.

  The worker computes input rows ``[i0, i0 + H')`` from output-gradient rows
  ``[r0, r0 + R')`` (its regions).  In the sub-op, gradient row ``r'`` feeds
  input rows ``r' * s + k - top``; in the original it feeds ``(r0 + r') * s + k
  - pad``, so ``top = i0 + pad - r0 * s``.  ``bottom`` is the least padding
  that makes the forward window count ``(H' + top + bottom - eff) // s + 1``
  equal ``R'``.  Both are non-negative whenever the window is at least as wide
  as the stride (the description makes the dim opaque otherwise).
  """
  out_iv = worker.output_regions[0].intervals
  dy_iv = worker.input_regions[dy_index].intervals
  res = []
  for d, (pad, _), k, s in zip(dims, pads, ksizes, strides):
    i0, rows = out_iv[d].lo, out_iv[d].size
    r0, r_rows = dy_iv[d].lo, dy_iv[d].size
    if r_rows == 0:
      # No gradient row reaches these input rows: the sub-op must see zero
      # windows, (rows + top + bottom - k + s) / s == 0 in TF's rounding.
      top, bottom = 0, max(0, k - 2 * s - rows + 1)
      ok = rows + bottom < k
    else:
      top = i0 + pad - r0 * s
      least = (r_rows - 1) * s + k - rows - top
      bottom = max(0, least)
      ok = top >= 0 and bottom <= least + s - 1
    if not ok:
      raise op.fail(f"worker {worker.w}/{worker.n} cutting {worker.var}: rows {i0}+{rows} "
                    f"from gradient rows {r0}+{r_rows} need padding ({top}, {bottom}) that "
                    "EXPLICIT padding cannot give; this is a bug in the description")
    res.append((top, bottom))
  return res


def _channels_last(op: OpContext, x: TensorRef, prefix: str = "") -> tuple[tdl.Var, ...]:
  """Checks NHWC / NDHWC and returns variables for the non-channel dims (b, [d,] h, w)."""
  fmt = op.attr("data_format", "NHWC")
  want = {4: "NHWC", 5: "NDHWC"}.get(x.rank)
  if fmt != want:
    raise op.fail(f"data_format {fmt!r} with a rank-{x.rank} input is not described; only "
                  "channels-last NHWC (rank 4) and NDHWC (rank 5) are")
  names = "bhw" if x.rank == 4 else "bdhw"
  return tuple(tdl.Var(prefix + nm, size) for nm, size in zip(names, x.shape[:-1]))


def _depthwise_strides(op: OpContext) -> tuple[int, int]:
  _require_nhwc(op)
  _undilated(op)
  return _spatial(op, "strides")


def _unused_output(op: OpContext, k: int, prefix: str) -> tdl.Output:
  """An output the CPU kernel leaves empty or undefined (reserve spaces)."""
  shape = tuple(op.outputs[k].shape) if op.outputs else (0,)
  return tdl.Output(index_vars(prefix, shape), tdl.Opaque("unspecified_reserve_space", ()))


def _last_dim_vars(op: OpContext, x: TensorRef):
  if x.rank < 1:
    raise op.fail("logits must have rank >= 1")
  lead = index_vars("i", x.shape[:-1])
  return lead, tdl.Var("j", x.shape[-1]), tdl.Var("k", x.shape[-1])


def _transposed_window_check(op: OpContext, pads, ksizes, strides) -> None:
  """Rejects a padding that the per-worker EXPLICIT padding of a transposed window cannot give.

  With a window narrower than its stride and a leading padding at least as
  wide as the window, the first gradient rows feed padding only; a sub-op
  that drops them would need a negative leading padding.
  """
  for (pad, _), k, s in zip(pads, ksizes, strides):
    if k < s and pad >= k:
      raise op.fail(f"padding {pad} before a window of {k} with stride {s} is not described "
                    "(a worker's sub-op would need negative padding)")


# ---------------------------------------------------------------- descriptions


@describe("AvgPool")
def avg_pool(op: OpContext) -> Semantics:
  """NHWC: ``Y[b, y, x, c] = Sum_{ky, kx} X[b, y*sh + ky - pt, x*sw + kx - pl, c] / count[y, x]``.

  Under VALID (and under SAME when it pads nothing) ``count = kh * kw`` and
  the op is exact on a worker's window region with VALID padding: batch,
  channel and spatial dims are cut (halo), and the taps give a partial whose
  sub-op divides by its own ``kh' * kw'``, rescaled by ``kh' kw' / (kh kw)``.
  Under SAME with padding, ``count`` is the number of valid elements in the
  window; AvgPool has no EXPLICIT padding, so a worker's sub-op cannot
  reproduce the original divisors: the spatial dims and taps are opaque.
  """
  _require_nhwc(op)
  x = op.input(0)
  n_, h, w, c_ = x.shape
  kh, kw = _spatial(op, "ksize")
  sh, sw = _spatial(op, "strides")
  (pt, pb), (pl, pr) = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  oh, ow = window_out(h, kh, sh, 1, (pt, pb)), window_out(w, kw, sw, 1, (pl, pr))
  b, y, xx, c = tdl.Var("b", n_), tdl.Var("y", oh), tdl.Var("x", ow), tdl.Var("c", c_)
  ky, kx = tdl.Var("ky", kh), tdl.Var("kx", kw)
  window = x.at(b, y * sh + ky - pt, xx * sw + kx - pl, c)
  unpadded = (pt, pb, pl, pr) == (0, 0, 0, 0)
  if unpadded:
    body = tdl.Sum((ky, kx), window) / float(kh * kw)
  else:
    body = tdl.Sum((ky, kx), not_cuttable(
        window * tdl.Opaque("inverse_count_of_valid_window_elements", ()),
        (y, xx, ky, kx), "avg_pool_same_divisor_not_reproducible_by_a_sub_op"))

  def shard(worker: WorkerView) -> ShardSpec:
    if not unpadded:
      return ShardSpec()
    taps = {"ky": kh, "kx": kw}
    if worker.var in taps:
      lo, hi = worker.var_block
      ksize = [1, hi - lo, kw, 1] if worker.var == "ky" else [1, kh, hi - lo, 1]
      return ShardSpec(attrs={"padding": "VALID", "ksize": ksize},
                       output_scale=((hi - lo) / taps[worker.var],))
    return ShardSpec(attrs={"padding": "VALID"})

  return Semantics(op, [tdl.Output((b, y, xx, c), body)], shard=shard)


@describe("AvgPoolGrad")
def avg_pool_grad(op: OpContext) -> Semantics:
  """The gradient of AvgPool w.r.t. its input (NHWC)::

    dX[b, i, j, c] = Sum_{ky, kx} G[b, (i + pt - ky) / sh, (j + pl - kx) / sw, c] / count

  ``/ sh`` is an exact division (``tdl.Div``); ``count`` is the window's
  element count (``kh * kw`` under VALID, the valid ones under SAME).
  ``orig_input_shape`` (input 0) is a meta input: a worker's is its block's
  shape.  Batch and channel are cut.  A spatial cut would need the gradient
  rows to start at a window boundary of the worker's rows (AvgPoolGrad has no
  EXPLICIT padding to shift them) and a tap cut would need a shifted window:
  both are opaque.
  """
  _require_nhwc(op)
  sizes = [int(s) for s in op.const(0).reshape(-1)]
  if len(sizes) != 4:
    raise op.fail(f"orig_input_shape {sizes} should have 4 entries")
  g = op.input(1)
  n_, h, w, c_ = sizes
  kh, kw = _spatial(op, "ksize")
  sh, sw = _spatial(op, "strides")
  (pt, pb), (pl, pr) = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  _check_shape(op, "grad", g.shape, (n_, window_out(h, kh, sh, 1, (pt, pb)),
                                     window_out(w, kw, sw, 1, (pl, pr)), c_))
  b, i, j, c = tdl.Var("b", n_), tdl.Var("i", h), tdl.Var("j", w), tdl.Var("c", c_)
  ky, kx = tdl.Var("ky", kh), tdl.Var("kx", kw)
  spread = g.at(b, tdl.Div(i + pt - ky, sh), tdl.Div(j + pl - kx, sw), c)
  divisor = (1.0 / (kh * kw) if op.attr("padding") == "VALID"
             else tdl.Opaque("inverse_count_of_valid_window_elements", ()))
  body = tdl.Sum((ky, kx), not_cuttable(spread * divisor, (i, j, ky, kx),
                                         "avg_pool_grad_windows_not_alignable_without_padding"))

  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(meta_inputs={0: list(worker.output_regions[0].shape)})

  return Semantics(op, [tdl.Output((b, i, j, c), body)], shard=shard)


@describe("BiasAdd")
def bias_add(op: OpContext) -> Semantics:
  """Channels last (``NHWC`` means ``N...C``): ``Y[i..., c] = X[i..., c] + bias[c]``."""
  _require_nhwc(op)
  x, bias = op.input(0), op.input(1)
  if x.rank < 2:
    raise op.fail(f"value must have rank >= 2, got shape {x.shape}")
  _check_shape(op, "bias", bias.shape, (x.shape[-1],))
  i = index_vars("i", x.shape)
  return Semantics(op, [tdl.Output(i, tdl.call("add", x[i], bias[i[-1]]))])


@describe("BiasAddGrad")
def bias_add_grad(op: OpContext) -> Semantics:
  """Channels last: ``dbias[c] = Sum_{i...} dY[i..., c]``; cutting a reduced dim gives a partial."""
  _require_nhwc(op)
  dy = op.input(0)
  if dy.rank < 2:
    raise op.fail(f"out_backprop must have rank >= 2, got shape {dy.shape}")
  i = index_vars("i", dy.shape)
  return Semantics(op, [tdl.Output((i[-1],), tdl.Sum(i[:-1], dy[i]))])


@describe("Conv2D")
def conv2d(op: OpContext) -> Semantics:
  """A 2-D convolution (NHWC)::

    Y[b, y, x, co] = Sum_{ky, kx, ci} X[b, y*sh + ky*dh - pt, x*sw + kx*dw - pl, ci]
                                      F[ky, kx, ci, co]

  X is read guarded (zero padding).  A worker's sub-op is the same Conv2D
  with EXPLICIT padding equal to the part of its window range that falls
  outside the input (all of it, on a zero-size input, when a block of taps
  reads only padding).
  """
  _require_nhwc(op)
  x, f = op.input(0), op.input(1)
  n_, h, w, ci_ = x.shape
  kh, kw, fci, co_ = f.shape
  if fci != ci_:
    raise op.fail(f"grouped convolutions are not described (input depth {ci_}, filter "
                  f"depth {fci})")
  sh, sw = _spatial(op, "strides")
  dh, dw = _spatial(op, "dilations", [1, 1, 1, 1])
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (dh, dw))
  (pt, _), (pl, _) = pads
  oh, ow = window_out(h, kh, sh, dh, pads[0]), window_out(w, kw, sw, dw, pads[1])
  b, y, xx, co = tdl.Var("b", n_), tdl.Var("y", oh), tdl.Var("x", ow), tdl.Var("co", co_)
  ky, kx, ci = tdl.Var("ky", kh), tdl.Var("kx", kw), tdl.Var("ci", ci_)
  body = tdl.Sum((ky, kx, ci), x.at(b, y * sh + ky * dh - pt, xx * sw + kx * dw - pl, ci)
                 * f[ky, kx, ci, co])

  def shard(worker: WorkerView) -> ShardSpec:
    out_rows = worker.output_regions[0].shape[1:3]
    taps = worker.input_regions[1].shape[0:2]
    p = _forward_pads(worker, 0, out_rows, taps, (sh, sw), (dh, dw))
    return ShardSpec(attrs={"padding": "EXPLICIT", "explicit_paddings": _explicit_nhwc(p)})

  return Semantics(op, [tdl.Output((b, y, xx, co), body)], shard=shard)


@describe("Conv2DBackpropFilter")
def conv2d_backprop_filter(op: OpContext) -> Semantics:
  """The gradient of Conv2D w.r.t. its filter (NHWC)::

    dF[ky, kx, ci, co] = Sum_{b, y, x} X[b, y*sh + ky - pt, x*sw + kx - pl, ci] dY[b, y, x, co]

  ``filter_sizes`` (input 1) is a meta input: a worker's is its block of dF.
  Taps and channels are output variables (a tap cut reads X with a halo);
  batch and output positions are reductions, so cutting them gives a partial
  dF.  The sub-op's EXPLICIT padding is the part of its window range outside
  X, as for Conv2D.
  """
  _require_nhwc(op)
  _undilated(op)
  x, dy = op.input(0), op.input(2)
  sizes = [int(s) for s in op.const(1).reshape(-1)]
  if len(sizes) != 4:
    raise op.fail(f"filter_sizes {sizes} should have 4 entries")
  kh, kw, ci_, co_ = sizes
  n_, h, w, xci = x.shape
  if xci != ci_:
    raise op.fail(f"input depth {xci} != filter depth {ci_} (grouped convolutions are not "
                  "described)")
  sh, sw = _spatial(op, "strides")
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  (pt, _), (pl, _) = pads
  oh, ow = window_out(h, kh, sh, 1, pads[0]), window_out(w, kw, sw, 1, pads[1])
  _check_shape(op, "out_backprop", dy.shape, (n_, oh, ow, co_))
  ky, kx, ci, co = tdl.Var("ky", kh), tdl.Var("kx", kw), tdl.Var("ci", ci_), tdl.Var("co", co_)
  b, y, xx = tdl.Var("b", n_), tdl.Var("y", oh), tdl.Var("x", ow)
  body = tdl.Sum((b, y, xx), x.at(b, y * sh + ky - pt, xx * sw + kx - pl, ci) * dy[b, y, xx, co])

  def shard(worker: WorkerView) -> ShardSpec:
    out_shape = worker.output_regions[0].shape
    rows = worker.input_regions[2].shape[1:3]
    p = _forward_pads(worker, 0, rows, out_shape[0:2], (sh, sw), (1, 1))
    return ShardSpec(attrs={"padding": "EXPLICIT", "explicit_paddings": _explicit_nhwc(p)},
                     meta_inputs={1: list(out_shape)})

  return Semantics(op, [tdl.Output((ky, kx, ci, co), body)], shard=shard)


def _input_backprop_shard(op: OpContext, pads, ksizes, strides):
  """Shard hook of an input backprop: EXPLICIT padding of the worker's transposed window
  and its own ``input_sizes`` (the worker's block of the input gradient)."""

  def shard(worker: WorkerView) -> ShardSpec:
    p = _transposed_pads(op, worker, 2, pads, ksizes, strides)
    return ShardSpec(attrs={"padding": "EXPLICIT", "explicit_paddings": _explicit_nhwc(p)},
                     meta_inputs={0: list(worker.output_regions[0].shape)})

  return shard


@describe("Conv2DBackpropInput")
def conv2d_backprop_input(op: OpContext) -> Semantics:
  """The gradient of Conv2D w.r.t. its input (NHWC)::

    dX[b, i, j, ci] = Sum_{ky, kx, co} dY[b, (i + pt - ky) / sh, (j + pl - kx) / sw, co]
                                       F[ky, kx, ci, co]

  ``/ sh`` is an exact division: a term counts only where ``sh`` divides
  ``i + pt - ky`` and the quotient is a row of dY (guarded access).
  ``input_sizes`` (input 0) is a meta input: a worker's is its block of dX.
  Batch, spatial (dY with a halo) and input-channel cuts are outputs; the
  output channel is a reduction (partial).  The taps stay whole: a block of
  taps not starting at 0 would need negative EXPLICIT padding.  A spatial dim
  whose window is narrower than its stride (1x1 stride 2) is opaque too: a
  worker whose rows start between windows would need negative padding.
  """
  _require_nhwc(op)
  _undilated(op)
  sizes = [int(s) for s in op.const(0).reshape(-1)]
  if len(sizes) != 4:
    raise op.fail(f"input_sizes {sizes} should have 4 entries")
  f, dy = op.input(1), op.input(2)
  n_, h, w, ci_ = sizes
  kh, kw, fci, co_ = f.shape
  if fci != ci_:
    raise op.fail(f"input depth {ci_} != filter depth {fci} (grouped convolutions are not "
                  "described)")
  sh, sw = _spatial(op, "strides")
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  _transposed_window_check(op, pads, (kh, kw), (sh, sw))
  (pt, _), (pl, _) = pads
  oh, ow = window_out(h, kh, sh, 1, pads[0]), window_out(w, kw, sw, 1, pads[1])
  _check_shape(op, "out_backprop", dy.shape, (n_, oh, ow, co_))
  b, i, j, ci = tdl.Var("b", n_), tdl.Var("i", h), tdl.Var("j", w), tdl.Var("ci", ci_)
  ky, kx, co = tdl.Var("ky", kh), tdl.Var("kx", kw), tdl.Var("co", co_)
  term = dy.at(b, tdl.Div(i + pt - ky, sh), tdl.Div(j + pl - kx, sw), co) * f[ky, kx, ci, co]
  opaque = [ky, kx] + [v for v, k, s in ((i, kh, sh), (j, kw, sw)) if k < s]
  body = tdl.Sum((ky, kx, co), not_cuttable(
      term, opaque, "transposed_window_would_need_negative_padding"))

  return Semantics(op, [tdl.Output((b, i, j, ci), body)],
                   shard=_input_backprop_shard(op, pads, (kh, kw), (sh, sw)))


@describe("DepthwiseConv2dNative")
def depthwise_conv2d_native(op: OpContext) -> Semantics:
  """A depthwise 2-D convolution with channel multiplier M (NHWC)::

    Y[b, y, x, c*M + m] = Sum_{ky, kx} X[b, y*sh + ky - pt, x*sw + kx - pl, c] F[ky, kx, c, m]

  The output channel dim is the composite ``(c, m)``, major first: cutting
  ``c`` cuts it only where the blocks of ``c`` land on its blocks (``M = 1``,
  say); ``m`` is minor and never cuts it.  Taps give a partial; the sub-op's
  EXPLICIT padding is computed as for Conv2D.
  """
  x, f = op.input(0), op.input(1)
  n_, h, w, c_ = x.shape
  kh, kw, fc, mult = f.shape
  if fc != c_:
    raise op.fail(f"filter depth {fc} != input depth {c_}")
  sh, sw = _depthwise_strides(op)
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  (pt, _), (pl, _) = pads
  oh, ow = window_out(h, kh, sh, 1, pads[0]), window_out(w, kw, sw, 1, pads[1])
  b, y, xx = tdl.Var("b", n_), tdl.Var("y", oh), tdl.Var("x", ow)
  c, m = tdl.Var("c", c_), tdl.Var("m", mult)
  ky, kx = tdl.Var("ky", kh), tdl.Var("kx", kw)
  body = tdl.Sum((ky, kx), x.at(b, y * sh + ky - pt, xx * sw + kx - pl, c) * f[ky, kx, c, m])

  def shard(worker: WorkerView) -> ShardSpec:
    out_rows = worker.output_regions[0].shape[1:3]
    taps = worker.input_regions[1].shape[0:2]
    p = _forward_pads(worker, 0, out_rows, taps, (sh, sw), (1, 1))
    return ShardSpec(attrs={"padding": "EXPLICIT", "explicit_paddings": _explicit_nhwc(p)})

  return Semantics(op, [tdl.Output((b, y, xx, (c, m)), body)], shard=shard)


@describe("DepthwiseConv2dNativeBackpropFilter")
def depthwise_conv2d_native_backprop_filter(op: OpContext) -> Semantics:
  """The gradient of DepthwiseConv2dNative w.r.t. its filter (NHWC)::

    dF[ky, kx, c, m] = Sum_{b, y, x} X[b, y*sh + ky - pt, x*sw + kx - pl, c] dY[b, y, x, c*M + m]

  ``filter_sizes`` (input 1) is a meta input.  Taps and ``c`` are outputs,
  batch and positions reductions (partial).  A block of ``m`` reads dY
  channels ``c*M + m`` for every ``c``: not a box unless ``C = 1``, so ``m``
  is opaque otherwise.
  """
  x, dy = op.input(0), op.input(2)
  sizes = [int(s) for s in op.const(1).reshape(-1)]
  if len(sizes) != 4:
    raise op.fail(f"filter_sizes {sizes} should have 4 entries")
  kh, kw, c_, mult = sizes
  n_, h, w, xc = x.shape
  if xc != c_:
    raise op.fail(f"input depth {xc} != filter depth {c_}")
  sh, sw = _depthwise_strides(op)
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  (pt, _), (pl, _) = pads
  oh, ow = window_out(h, kh, sh, 1, pads[0]), window_out(w, kw, sw, 1, pads[1])
  _check_shape(op, "out_backprop", dy.shape, (n_, oh, ow, c_ * mult))
  ky, kx, c, m = tdl.Var("ky", kh), tdl.Var("kx", kw), tdl.Var("c", c_), tdl.Var("m", mult)
  b, y, xx = tdl.Var("b", n_), tdl.Var("y", oh), tdl.Var("x", ow)
  term = x.at(b, y * sh + ky - pt, xx * sw + kx - pl, c) * dy[b, y, xx, c * mult + m]
  body = tdl.Sum((b, y, xx), not_cuttable(term, [m] if c_ > 1 else [],
                                           "strided_channel_block_is_not_a_box"))

  def shard(worker: WorkerView) -> ShardSpec:
    out_shape = worker.output_regions[0].shape
    rows = worker.input_regions[2].shape[1:3]
    p = _forward_pads(worker, 0, rows, out_shape[0:2], (sh, sw), (1, 1))
    return ShardSpec(attrs={"padding": "EXPLICIT", "explicit_paddings": _explicit_nhwc(p)},
                     meta_inputs={1: list(out_shape)})

  return Semantics(op, [tdl.Output((ky, kx, c, m), body)], shard=shard)


@describe("DepthwiseConv2dNativeBackpropInput")
def depthwise_conv2d_native_backprop_input(op: OpContext) -> Semantics:
  """The gradient of DepthwiseConv2dNative w.r.t. its input (NHWC)::

    dX[b, i, j, c] = Sum_{ky, kx, m} dY[b, (i + pt - ky) / sh, (j + pl - kx) / sw, c*M + m]
                     F[ky, kx, c, m]

  As Conv2DBackpropInput (exact divisions, ``input_sizes`` meta, taps and
  windows narrower than the stride opaque); ``c`` is an output variable.  A
  block of ``m`` reads dY channels ``c*M + m`` for every ``c``, not a box, so
  ``m`` is opaque.
  """
  sizes = [int(s) for s in op.const(0).reshape(-1)]
  if len(sizes) != 4:
    raise op.fail(f"input_sizes {sizes} should have 4 entries")
  f, dy = op.input(1), op.input(2)
  n_, h, w, c_ = sizes
  kh, kw, fc, mult = f.shape
  if fc != c_:
    raise op.fail(f"filter depth {fc} != input depth {c_}")
  sh, sw = _depthwise_strides(op)
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  _transposed_window_check(op, pads, (kh, kw), (sh, sw))
  (pt, _), (pl, _) = pads
  oh, ow = window_out(h, kh, sh, 1, pads[0]), window_out(w, kw, sw, 1, pads[1])
  _check_shape(op, "out_backprop", dy.shape, (n_, oh, ow, c_ * mult))
  b, i, j, c = tdl.Var("b", n_), tdl.Var("i", h), tdl.Var("j", w), tdl.Var("c", c_)
  ky, kx, m = tdl.Var("ky", kh), tdl.Var("kx", kw), tdl.Var("m", mult)
  term = (dy.at(b, tdl.Div(i + pt - ky, sh), tdl.Div(j + pl - kx, sw), c * mult + m)
          * f[ky, kx, c, m])
  opaque = [ky, kx, m] + [v for v, k, s in ((i, kh, sh), (j, kw, sw)) if k < s]
  body = tdl.Sum((ky, kx, m), not_cuttable(
      term, opaque, "transposed_window_would_need_negative_padding"))

  return Semantics(op, [tdl.Output((b, i, j, c), body)],
                   shard=_input_backprop_shard(op, pads, (kh, kw), (sh, sw)))


@describe("FusedBatchNormGradV3")
def fused_batch_norm_grad_v3(op: OpContext) -> Semantics:
  """Channels last, ``mu = reserve_space_1[c]``, ``rstd = rsqrt(reserve_space_2[c] + eps)``:

  ``scale_backprop[c] = rstd * Sum_r dY[r, c] (X[r, c] - mu)``,
  ``offset_backprop[c] = Sum_r dY[r, c]`` (``r`` over N, H, W; M of them), and

  * training: ``dX[p, c] = scale[c] rstd (dY[p, c] - Sum_r dY[r, c] / M -
    (X[p, c] - mu) rstd^2 Sum_r dY[r, c] (X[r, c] - mu) / M)`` - every dX
    element needs the sums over all of N, H, W, so cutting them cannot give a
    block of dX from the same op: they are opaque and only the channel is cut;
  * inference: ``dX[p, c] = dY[p, c] scale[c] rstd``; the sums use the very
    variables of dX's dims, so cutting N, H or W cuts dX and leaves the two
    sums partial.

  (On CPU, reserve_space_1/2 are the forward's batch mean and biased
  variance in training, the population ones in inference.)
  reserve_space_3 is unused on CPU (replicated); reserve_space_4/5 are
  empty outputs.
  """
  dy, x, scale = op.input(0), op.input(1), op.input(2)
  p = _channels_last(op, x)
  c_ = x.shape[-1]
  _check_shape(op, "y_backprop", dy.shape, x.shape)
  for k, name in ((2, "scale"), (3, "reserve_space_1"), (4, "reserve_space_2")):
    _check_shape(op, name, op.inputs[k].shape, (c_,))
  mean, var = op.input(3), op.input(4)
  op.replicated(5)
  eps = float(op.attr("epsilon", 1e-4))
  c = tdl.Var("c", c_)
  mu = mean[c]
  rstd = tdl.call("rsqrt", var[c] + eps)
  if op.attr("is_training", True):
    # One set of reduction variables serves every sum: dX references them
    # non-linearly, so no cut of them can pass scale/offset_backprop off as
    # partials while dX's accesses widen the regions to the whole batch.
    r = _channels_last(op, x, "r")
    m = float(math.prod(x.shape[:-1]))
    sum_dy = tdl.Sum(r, dy[(*r, c)])
    sum_dyx = tdl.Sum(r, dy[(*r, c)] * (x[(*r, c)] - mu))
    dx = not_cuttable(
        scale[c] * rstd * (dy[(*p, c)] - sum_dy / m
                           - (x[(*p, c)] - mu) * rstd * rstd * sum_dyx / m),
        p, "batch_norm_grad_needs_sums_over_the_whole_batch")
  else:
    r = p  # the sums run over dX's own variables: cutting one leaves them partial
    sum_dy = tdl.Sum(r, dy[(*r, c)])
    sum_dyx = tdl.Sum(r, dy[(*r, c)] * (x[(*r, c)] - mu))
    dx = dy[(*p, c)] * scale[c] * rstd
  return Semantics(op, [
      tdl.Output((*p, c), dx),
      tdl.Output((c,), sum_dyx * rstd),
      tdl.Output((c,), sum_dy),
      _unused_output(op, 3, "z4_"),
      _unused_output(op, 4, "z5_"),
  ])


@describe("FusedBatchNormV3")
def fused_batch_norm_v3(op: OpContext) -> Semantics:
  """Channels last, ``p`` and ``r`` over N, H, W (M positions), ``f = exponential_avg_factor``.

  Training::

    mean[c] = Sum_r X[r, c] / M,    var[c] = Sum_r (X[r, c] - mean[c])^2 / M
    y[p, c] = (X[p, c] - mean[c]) rsqrt(var[c] + eps) scale[c] + offset[c]
    batch_mean[c]     = (1 - f) mean_in[c] + f mean[c]
    batch_variance[c] = (1 - f) var_in[c]  + f var[c] M / (M - 1)
    reserve_space_1 = mean, reserve_space_2 = var (biased), reserve_space_3 = 0 (a scalar)

  ``mean_in``/``var_in`` may be empty when ``f == 1`` (then replicated).
  Every y element needs the statistics of the whole batch: a cut of N, H or
  W would hand a worker all of X and the same op would compute all of y, so
  those variables are opaque and only the channel is cut (exactly).

  Inference: ``y[p, c] = (X[p, c] - mean_in[c]) rsqrt(var_in[c] + eps)
  scale[c] + offset[c]``, ``batch_mean = mean_in``, ``batch_variance =
  var_in``, every dim cut; reserve_space_1/2 are left uninitialised by the
  CPU kernel (unspecified values), reserve_space_3 is the scalar 0.
  """
  x, scale, offset = op.input(0), op.input(1), op.input(2)
  p = _channels_last(op, x)
  c_ = x.shape[-1]
  for k, name in ((1, "scale"), (2, "offset")):
    _check_shape(op, name, op.inputs[k].shape, (c_,))
  eps = float(op.attr("epsilon", 1e-4))
  f = float(op.attr("exponential_avg_factor", 1.0))
  training = bool(op.attr("is_training", True))
  c = tdl.Var("c", c_)
  running = []
  for k, name in ((3, "mean"), (4, "variance")):
    shape = op.inputs[k].shape
    if shape == (c_,):
      running.append(op.input(k)[c])
    elif training and f == 1.0 and math.prod(shape) == 0:
      op.replicated(k)  # empty and unread
      running.append(None)
    else:
      raise op.fail(f"{name} has shape {shape}, expected ({c_},)"
                    + (" or empty (exponential_avg_factor is 1)" if training else ""))
  mean_in, var_in = running
  # reserve_space_3's static shape is unknown (a scalar 0 on CPU, a workspace on GPU)
  rs3_shape = tuple(op.outputs[5].shape) if op.outputs else ()
  scalar_zero = tdl.Output(index_vars("z3_", rs3_shape), tdl.Const(0.0) if rs3_shape == () else
                           tdl.Opaque("unspecified_reserve_space", ()))
  if not training:
    y = (x[(*p, c)] - mean_in) * tdl.call("rsqrt", var_in + eps) * scale[c] + offset[c]
    return Semantics(op, [
        tdl.Output((*p, c), y),
        tdl.Output((c,), mean_in),
        tdl.Output((c,), var_in),
        tdl.Output((c,), tdl.Opaque("uninitialised_on_cpu", ())),
        tdl.Output((c,), tdl.Opaque("uninitialised_on_cpu", ())),
        scalar_zero,
    ], undefined_outputs=frozenset({3, 4}))
  r = _channels_last(op, x, "r")  # one set for both statistics (see FusedBatchNormGradV3)
  m = math.prod(x.shape[:-1])
  mean = tdl.Mean(r, x[(*r, c)])
  var = tdl.Mean(r, tdl.call("square", x[(*r, c)] - mean))
  y = not_cuttable(
      (x[(*p, c)] - mean) * tdl.call("rsqrt", var + eps) * scale[c] + offset[c],
      p, "normalised_by_statistics_of_the_whole_batch")
  unbiased = var * (m / max(m - 1, 1))

  def moving(old: Optional[tdl.Value], new: tdl.Value) -> tdl.Value:
    return new if old is None else (1.0 - f) * old + f * new

  return Semantics(op, [
      tdl.Output((*p, c), y),
      tdl.Output((c,), moving(mean_in, mean)),
      tdl.Output((c,), moving(var_in, unbiased)),
      tdl.Output((c,), mean),
      tdl.Output((c,), var),
      scalar_zero,
  ])


@describe("LogSoftmax")
def log_softmax(op: OpContext) -> Semantics:
  """``Y[i..., j] = X[i..., j] - log(Sum_k exp(X[i..., k]))``.

  Cutting ``j`` would hand every worker whole rows (for the normaliser) and
  the same op would compute whole rows: ``j`` is opaque, the leading dims cut.
  """
  x = op.input(0)
  i, j, k = _last_dim_vars(op, x)
  lse = tdl.call("log", tdl.Sum(k, tdl.call("exp", x[(*i, k)])))
  body = not_cuttable(x[(*i, j)] - lse, (j,), "normalised_over_the_whole_last_dim")
  return Semantics(op, [tdl.Output((*i, j), body)])


@describe("MaxPool")
def max_pool(op: OpContext) -> Semantics:
  """Max pooling (NHWC), padding reading -inf::

    Y[b, y, x, c] = Max_{ky, kx} X[b, y*sh + ky - pt, x*sw + kx - pl, c]

  Batch, channel and spatial dims (halo) are cut; the taps, under a Max, are
  not.  A worker's sub-op has EXPLICIT padding (supported by MaxPool on CPU)
  equal to the part of its window range outside X.  An EXPLICIT padding at
  least as wide as the window (windows of padding only) keeps the spatial
  dims whole.
  """
  _require_nhwc(op)
  x = op.input(0)
  n_, h, w, c_ = x.shape
  kh, kw = _spatial(op, "ksize")
  sh, sw = _spatial(op, "strides")
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  (pt, _), (pl, _) = pads
  oh, ow = window_out(h, kh, sh, 1, pads[0]), window_out(w, kw, sw, 1, pads[1])
  b, y, xx, c = tdl.Var("b", n_), tdl.Var("y", oh), tdl.Var("x", ow), tdl.Var("c", c_)
  ky, kx = tdl.Var("ky", kh), tdl.Var("kx", kw)
  window = x.at(b, y * sh + ky - pt, xx * sw + kx - pl, c, pad=NEG_INF)
  wide = [v for v, k, pd in ((y, kh, pads[0]), (xx, kw, pads[1])) if max(pd) >= k]
  body = tdl.Max((ky, kx), not_cuttable(window, wide, "windows_of_padding_only"))

  def shard(worker: WorkerView) -> ShardSpec:
    p = [tuple(worker.input_padding[0][d]) for d in (1, 2)]
    return ShardSpec(attrs={"padding": "EXPLICIT", "explicit_paddings": _explicit_nhwc(p)})

  return Semantics(op, [tdl.Output((b, y, xx, c), body)], shard=shard)


@describe("MaxPoolGrad")
def max_pool_grad(op: OpContext) -> Semantics:
  """The gradient of MaxPool w.r.t. its input (NHWC)::

    dX[b, i, j, c] = Sum_{ky, kx} G[b, y, x, c] [X[b, i, j, c] is the max of window (y, x)]

  with ``y = (i + pt - ky) / sh`` and ``x = (j + pl - kx) / sw`` exact
  divisions.  Which element is a window's max depends on the whole window
  of X (opaque).  Batch and channel are cut.  A spatial cut is not exact:
  the op's output has the shape of its orig_input, so a worker given the
  window halo of X would compute dX for the halo too; spatial dims and taps
  are opaque.
  """
  _require_nhwc(op)
  x, y_, g = op.input(0), op.input(1), op.input(2)
  n_, h, w, c_ = x.shape
  kh, kw = _spatial(op, "ksize")
  sh, sw = _spatial(op, "strides")
  pads = window_padding(op, (h, w), (kh, kw), (sh, sw), (1, 1))
  (pt, _), (pl, _) = pads
  out_shape = (n_, window_out(h, kh, sh, 1, pads[0]), window_out(w, kw, sw, 1, pads[1]), c_)
  _check_shape(op, "orig_output", y_.shape, out_shape)
  _check_shape(op, "grad", g.shape, out_shape)
  b, i, j, c = tdl.Var("b", n_), tdl.Var("i", h), tdl.Var("j", w), tdl.Var("c", c_)
  ky, kx = tdl.Var("ky", kh), tdl.Var("kx", kw)
  wy, wx = tdl.Div(i + pt - ky, sh), tdl.Div(j + pl - kx, sw)
  is_max = tdl.Opaque("is_window_argmax", (x[b, :, :, c], y_.at(b, wy, wx, c)))
  body = tdl.Sum((ky, kx), not_cuttable(g.at(b, wy, wx, c) * is_max, (i, j, ky, kx),
                                         "output_has_the_shape_of_the_input_halo"))
  return Semantics(op, [tdl.Output((b, i, j, c), body)])


@describe("Softmax")
def softmax(op: OpContext) -> Semantics:
  """``Y[i..., j] = exp(X[i..., j]) / Sum_k exp(X[i..., k])``; ``j`` opaque as for LogSoftmax."""
  x = op.input(0)
  i, j, k = _last_dim_vars(op, x)
  body = tdl.call("exp", x[(*i, j)]) / tdl.Sum(k, tdl.call("exp", x[(*i, k)]))
  return Semantics(op, [tdl.Output((*i, j), not_cuttable(
      body, (j,), "normalised_over_the_whole_last_dim"))])


@describe("SoftmaxCrossEntropyWithLogits")
def softmax_cross_entropy_with_logits(op: OpContext) -> Semantics:
  """``F``, ``L`` broadcast to ``[B, C]`` (size-1 dims read at 0):

  ``loss[b] = log(Sum_k exp F[b, k]) Sum_k L[b, k] - Sum_k L[b, k] F[b, k]``,
  ``backprop[b, j] = exp F[b, j] / Sum_k exp F[b, k] - L[b, j]``.
  The batch is cut (a broadcast operand replicated); the classes are opaque
  (whole rows are normalised).  One class variable ``k`` serves every sum,
  so no class cut can pass for a partial of the loss.
  """
  feats, labels = op.input(0), op.input(1)
  if feats.rank != 2 or labels.rank != 2:
    raise op.fail(f"features {feats.shape} and labels {labels.shape} must both be 2-D")
  bsz, csz = broadcast_shape(op, [feats.shape, labels.shape])
  b, j, k = tdl.Var("b", bsz), tdl.Var("j", csz), tdl.Var("k", csz)

  def at(t: TensorRef, row: tdl.Var, col: tdl.Var) -> tdl.Access:
    return t[0 if t.shape[0] == 1 and bsz != 1 else row,
             0 if t.shape[1] == 1 and csz != 1 else col]

  norm = tdl.Sum(k, tdl.call("exp", at(feats, b, k)))
  loss = (tdl.call("log", norm) * tdl.Sum(k, at(labels, b, k))
          - tdl.Sum(k, at(labels, b, k) * at(feats, b, k)))
  backprop = not_cuttable(tdl.call("exp", at(feats, b, j)) / norm - at(labels, b, j), (j,),
                           "normalised_over_the_whole_class_dim")
  return Semantics(op, [tdl.Output((b,), loss), tdl.Output((b, j), backprop)])


@describe("SparseSoftmaxCrossEntropyWithLogits")
def sparse_softmax_cross_entropy_with_logits(op: OpContext) -> Semantics:
  """``loss[b] = log(Sum_k exp F[b, k]) - F[b, labels[b]]``,
  ``backprop[b, j] = exp F[b, j] / Sum_k exp F[b, k] - [j == labels[b]]``.

  The label gather and the one-hot are data dependent (opaque); the batch
  is cut, the classes are opaque.
  """
  feats, labels = op.input(0), op.input(1)
  if feats.rank != 2 or labels.rank != 1 or labels.shape[0] != feats.shape[0]:
    raise op.fail(f"features {feats.shape} must be [B, C] and labels {labels.shape} [B]")
  bsz, csz = feats.shape
  b, j, k = tdl.Var("b", bsz), tdl.Var("j", csz), tdl.Var("k", csz)
  norm = tdl.Sum(k, tdl.call("exp", feats[b, k]))
  loss = tdl.call("log", norm) - tdl.Opaque("logit_at_label", (feats[b, :], labels[b]))
  backprop = tdl.call("exp", feats[b, j]) / norm - tdl.Opaque(
      "one_hot_of_label", (labels[b],), over=(j,))
  return Semantics(op, [tdl.Output((b,), loss), tdl.Output((b, j), backprop)])
