"""Descriptions of TensorFlow's neural-network ops: convolutions, pooling, normalisation."""

from __future__ import annotations

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.description import OpContext, Semantics, ShardSpec, WorkerView
from tf_tofu.opdefs.registry import describe


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
    ex = list(op.attr("explicit_paddings"))
    return [(ex[2 * d], ex[2 * d + 1]) for d in range(1, 1 + len(sizes))]
  raise op.fail(f"unsupported padding {padding!r}")


def _explicit_nhwc(pads_hw) -> list[int]:
  (t, b), (l, r) = pads_hw
  return [0, 0, t, b, l, r, 0, 0]


@describe("Conv2D")
def conv2d(op: OpContext) -> Semantics:
  """NHWC: ``Y[b, y, x, co] = Sum_{ky, kx, ci} X[b, y*sh + ky*dh - pt, x*sw + kx*dw - pl, ci] F[ky, kx, ci, co]``.

  X is read guarded (zero padding).  A worker's sub-op is the same Conv2D
  with EXPLICIT padding equal to the part of its window range that falls
  outside the input.
  """
  if op.attr("data_format", "NHWC") != "NHWC":
    raise op.fail("only NHWC is described; convert the model to channels-last")
  x, f = op.input(0), op.input(1)
  n_, h, w, ci_ = x.shape
  kh, kw, fci, co_ = f.shape
  if fci != ci_:
    raise op.fail("grouped convolutions are not described")
  _, sh, sw, _ = op.attr("strides")
  _, dh, dw, _ = op.attr("dilations", [1, 1, 1, 1])
  (pt, pb), (pl, pr) = window_padding(op, (h, w), (kh, kw), (sh, sw), (dh, dw))
  oh = (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
  ow = (w + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
  b, y, xx, co = tdl.Var("b", n_), tdl.Var("y", oh), tdl.Var("x", ow), tdl.Var("co", co_)
  ky, kx, ci = tdl.Var("ky", kh), tdl.Var("kx", kw), tdl.Var("ci", ci_)
  body = tdl.Sum((ky, kx, ci), x.at(b, y * sh + ky * dh - pt, xx * sw + kx * dw - pl, ci)
                 * f[ky, kx, ci, co])

  def shard(worker: WorkerView) -> ShardSpec:
    pads = worker.input_padding[0]
    return ShardSpec(attrs={"padding": "EXPLICIT",
                            "explicit_paddings": _explicit_nhwc(pads[1:3])})

  return Semantics(op, [tdl.Output((b, y, xx, co), body)], shard=shard)
