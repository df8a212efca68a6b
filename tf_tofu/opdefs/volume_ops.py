"""Descriptions of TensorFlow's 3-D convolutions and poolings (NDHWC), as Keras' Conv3D,
MaxPooling3D and AveragePooling3D emit them with their gradients.

Layout: channels last (NDHWC); any other data format raises ``op.fail`` so
the op is left whole.  The windows are those of the 2-D ops (``nn_ops``) with
a depth dim in front::

    Conv3D(X, F)[b, z, y, x, co] = Sum_{kz, ky, kx, ci} X[b, z*sz + kz - pz, ..., ci]
                                                        F[kz, ky, kx, ci, co]

(dilations other than 1 are refused: TensorFlow's shape function and the
NDHWC attribute order disagree on which dim they dilate).

None of these ops takes EXPLICIT padding, so a worker's sub-op cannot be
given the halo of a spatial block with the padding its edge needs: every
spatial variable and every tap is opaque (``nn_ops.not_cuttable``).  What
is cut is exact with the original padding: the batch, the output channels,
the input channels of a convolution (a reduction: partial sums), the
channels of a pooling.  Shape-carrying inputs (``input_sizes``,
``filter_sizes``, ``orig_input_shape``) are meta inputs, recomputed per
worker as its block's shape.
"""

from __future__ import annotations

from typing import Sequence

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.description import OpContext, Semantics, ShardSpec, WorkerView
from tf_tofu.opdefs.nn_ops import NEG_INF, not_cuttable, window_out, window_padding
from tf_tofu.opdefs.registry import describe

_WHY = "no_explicit_padding_for_a_spatial_block"


def _ndhwc(op: OpContext) -> None:
  fmt = op.attr("data_format", "NDHWC")
  if fmt != "NDHWC":
    raise op.fail(f"data_format {fmt!r} is not described; only NDHWC (channels last) is")


def _spatial(op: OpContext, key: str, default=None) -> tuple[int, int, int]:
  """The (depth, height, width) entries of a 5-entry NDHWC attr (batch and channel 1)."""
  vals = op.attr(key, default)
  if vals is None or len(vals) != 5:
    raise op.fail(f"attr {key} = {vals!r} should have 5 entries (NDHWC)")
  if vals[0] != 1 or vals[4] != 1:
    raise op.fail(f"attr {key} = {list(vals)} must be 1 on the batch and channel dims")
  return int(vals[1]), int(vals[2]), int(vals[3])


def _geometry(op: OpContext, sizes: Sequence[int], taps: Sequence[int]):
  """Strides, dilations (all 1), per-dim padding before, and output sizes of a 3-D window."""
  strides = _spatial(op, "strides")
  dil = _spatial(op, "dilations", [1] * 5)
  if dil != (1, 1, 1):
    raise op.fail(f"dilations {[1, *dil, 1]} are not described for {op.op_type} (TensorFlow's "
                  "shape function and the NDHWC order disagree on which dim they dilate)")
  pads = window_padding(op, sizes, taps, strides, dil)
  outs = tuple(window_out(s, k, st, d, p) for s, k, st, d, p in zip(sizes, taps, strides, dil,
                                                                    pads))
  return strides, dil, tuple(p[0] for p in pads), outs


def _vars(prefix: str, sizes: Sequence[int]) -> tuple[tdl.Var, ...]:
  return tuple(tdl.Var(f"{prefix}{d}", s) for d, s in zip("zyx", sizes))


def _window(pos, taps, strides, dil, before):
  return [p * s + k * d - b for p, k, s, d, b in zip(pos, taps, strides, dil, before)]


def _spread(pos, taps, strides, dil, before):
  """The output positions an input position feeds: ``(i + p - k*d) / s`` (exact)."""
  return [tdl.Div(i + b - k * d, s) for i, k, s, d, b in zip(pos, taps, strides, dil, before)]


def _check(op: OpContext, what: str, got, want) -> None:
  if tuple(got) != tuple(want):
    raise op.fail(f"{what} has shape {tuple(got)}, expected {tuple(want)}")


def _sizes(op: OpContext, i: int, what: str) -> list[int]:
  sizes = [int(s) for s in op.const(i).reshape(-1)]
  if len(sizes) != 5:
    raise op.fail(f"{what} {sizes} should have 5 entries")
  return sizes


def _block_shape(index: int):
  """Shard hook: meta input ``index`` is the worker's block of the output."""
  def shard(worker: WorkerView) -> ShardSpec:
    return ShardSpec(meta_inputs={index: list(worker.output_regions[0].shape)})
  return shard


@describe("Conv3D")
def conv3d(op: OpContext) -> Semantics:
  """``Y[b, z, y, x, co] = Sum_{k, ci} X[b, pos*s + k*d - p, ci] F[k, ci, co]``: batch and
  output channels cut, input channels a reduction (partial), spatial dims and taps opaque."""
  _ndhwc(op)
  x, f = op.input(0), op.input(1)
  n_, *size, ci_ = x.shape
  *taps, fci, co_ = f.shape
  if fci != ci_:
    raise op.fail(f"grouped convolutions are not described (input depth {ci_}, filter "
                  f"depth {fci})")
  strides, dil, before, outs = _geometry(op, size, taps)
  b, ci, co = tdl.Var("b", n_), tdl.Var("ci", ci_), tdl.Var("co", co_)
  pos, k = _vars("o", outs), _vars("k", taps)
  term = x.at(b, *_window(pos, k, strides, dil, before), ci) * f[(*k, ci, co)]
  body = tdl.Sum((*k, ci), not_cuttable(term, (*pos, *k), _WHY))
  return Semantics(op, [tdl.Output((b, *pos, co), body)])


@describe("Conv3DBackpropFilterV2")
def conv3d_backprop_filter(op: OpContext) -> Semantics:
  """``dF[k, ci, co] = Sum_{b, pos} X[b, pos*s + k*d - p, ci] dY[b, pos, co]``: channels cut,
  batch a reduction (partial), positions and taps opaque; ``filter_sizes`` per worker."""
  _ndhwc(op)
  x, dy = op.input(0), op.input(2)
  *taps, ci_, co_ = _sizes(op, 1, "filter_sizes")
  n_, *size, xci = x.shape
  if xci != ci_:
    raise op.fail(f"input depth {xci} != filter depth {ci_} (grouped convolutions are not "
                  "described)")
  strides, dil, before, outs = _geometry(op, size, taps)
  _check(op, "out_backprop", dy.shape, (n_, *outs, co_))
  b, ci, co = tdl.Var("b", n_), tdl.Var("ci", ci_), tdl.Var("co", co_)
  pos, k = _vars("o", outs), _vars("k", taps)
  term = x.at(b, *_window(pos, k, strides, dil, before), ci) * dy[(b, *pos, co)]
  body = tdl.Sum((b, *pos), not_cuttable(term, (*pos, *k), _WHY))
  return Semantics(op, [tdl.Output((*k, ci, co), body)], shard=_block_shape(1))


@describe("Conv3DBackpropInputV2")
def conv3d_backprop_input(op: OpContext) -> Semantics:
  """``dX[b, i, ci] = Sum_{k, co} dY[b, (i + p - k*d) / s, co] F[k, ci, co]``: batch and input
  channels cut, output channels a reduction (partial), positions and taps opaque;
  ``input_sizes`` per worker."""
  _ndhwc(op)
  f, dy = op.input(1), op.input(2)
  n_, *size, ci_ = _sizes(op, 0, "input_sizes")
  *taps, fci, co_ = f.shape
  if fci != ci_:
    raise op.fail(f"input depth {ci_} != filter depth {fci} (grouped convolutions are not "
                  "described)")
  strides, dil, before, outs = _geometry(op, size, taps)
  _check(op, "out_backprop", dy.shape, (n_, *outs, co_))
  b, ci, co = tdl.Var("b", n_), tdl.Var("ci", ci_), tdl.Var("co", co_)
  pos, k = _vars("i", size), _vars("k", taps)
  term = dy.at(b, *_spread(pos, k, strides, dil, before), co) * f[(*k, ci, co)]
  body = tdl.Sum((*k, co), not_cuttable(term, (*pos, *k), _WHY))
  return Semantics(op, [tdl.Output((b, *pos, ci), body)], shard=_block_shape(0))


@describe("MaxPool3D", "AvgPool3D")
def pool3d(op: OpContext) -> Semantics:
  """``Y[b, pos, c] = Max_k X[b, pos*s + k - p, c]`` (AvgPool3D: the mean over the window's
  valid elements): batch and channels cut, positions and taps opaque."""
  _ndhwc(op)
  x = op.input(0)
  n_, *size, c_ = x.shape
  taps = _spatial(op, "ksize")
  strides, dil, before, outs = _geometry(op, size, taps)
  b, c = tdl.Var("b", n_), tdl.Var("c", c_)
  pos, k = _vars("o", outs), _vars("k", taps)
  if op.op_type == "MaxPool3D":
    window = x.at(b, *_window(pos, k, strides, dil, before), c, pad=NEG_INF)
    body = tdl.Max(k, not_cuttable(window, (*pos, *k), _WHY))
  else:
    window = x.at(b, *_window(pos, k, strides, dil, before), c)
    body = tdl.Sum(k, not_cuttable(window * tdl.Opaque("inverse_count_of_valid_elements", ()),
                                    (*pos, *k), _WHY))
  return Semantics(op, [tdl.Output((b, *pos, c), body)])


@describe("MaxPool3DGrad")
def max_pool3d_grad(op: OpContext) -> Semantics:
  """``dX[b, i, c] = Sum_k G[b, w, c] [X[b, i, c] is the max of window w]``, ``w = (i + p - k)
  / s``: batch and channels cut, positions and taps opaque."""
  _ndhwc(op)
  x, y_, g = op.input(0), op.input(1), op.input(2)
  n_, *size, c_ = x.shape
  taps = _spatial(op, "ksize")
  strides, dil, before, outs = _geometry(op, size, taps)
  _check(op, "orig_output", y_.shape, (n_, *outs, c_))
  _check(op, "grad", g.shape, (n_, *outs, c_))
  b, c = tdl.Var("b", n_), tdl.Var("c", c_)
  pos, k = _vars("i", size), _vars("k", taps)
  w = _spread(pos, k, strides, dil, before)
  is_max = tdl.Opaque("is_window_argmax", (x[b, :, :, :, c], y_.at(b, *w, c)))
  body = tdl.Sum(k, not_cuttable(g.at(b, *w, c) * is_max, (*pos, *k), _WHY))
  return Semantics(op, [tdl.Output((b, *pos, c), body)])


@describe("AvgPool3DGrad")
def avg_pool3d_grad(op: OpContext) -> Semantics:
  """``dX[b, i, c] = Sum_k G[b, (i + p - k) / s, c] / count``: batch and channels cut,
  positions and taps opaque; ``orig_input_shape`` per worker."""
  _ndhwc(op)
  n_, *size, c_ = _sizes(op, 0, "orig_input_shape")
  g = op.input(1)
  taps = _spatial(op, "ksize")
  strides, dil, before, outs = _geometry(op, size, taps)
  _check(op, "grad", g.shape, (n_, *outs, c_))
  b, c = tdl.Var("b", n_), tdl.Var("c", c_)
  pos, k = _vars("i", size), _vars("k", taps)
  term = g.at(b, *_spread(pos, k, strides, dil, before), c) * tdl.Opaque(
      "inverse_count_of_valid_elements", ())
  body = tdl.Sum(k, not_cuttable(term, (*pos, *k), _WHY))
  return Semantics(op, [tdl.Output((b, *pos, c), body)], shard=_block_shape(0))
