"""Depthwise convolutions without EXPLICIT padding: Pad + VALID, as Grappler accepts them.

A worker's windowed sub-op carries its padding as ``padding="EXPLICIT"`` with
``explicit_paddings = [0, 0, pt, pb, pl, pr, 0, 0]`` (the part of its window
range outside the input).  TensorFlow's kernels accept that for the depthwise
family, but Grappler's shape inference of ``DepthwiseConv2dNative`` aborts
the process on it (``tensor_format.h: Check failed ... Invalid index from the
dimension: 1, 0, H``; TF 2.21).  So the rewrite emits the same math in a form
every optimizer knows:

* ``DepthwiseConv2dNative(x, f)`` and ``DepthwiseConv2dNativeBackpropFilter(x,
  sizes, dy)``: ``Pad(x, [[0,0],[pt,pb],[pl,pr],[0,0]])`` then the op with
  ``VALID`` padding (zero padding is what EXPLICIT means);
* ``DepthwiseConv2dNativeBackpropInput(sizes, f, dy)``: the gradient with
  respect to the padded input (``sizes`` grown by the pads, ``VALID``), then
  ``Slice`` of its interior ``[pt : pt + h, pl : pl + w]``.

All nodes sit on the worker's device: no bytes move.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tf_tofu.ops import comm

DEPTHWISE = ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter",
             "DepthwiseConv2dNativeBackpropInput")


def needs_rewrite(op_type: str, attrs) -> bool:
  """Whether a sub-op must be emitted without EXPLICIT padding."""
  return op_type in DEPTHWISE and attrs.get("padding") in ("EXPLICIT", b"EXPLICIT")


def emit(b: comm.GraphBuilder, ctx, node: str, inputs: Sequence[str], dev: str) -> str:
  """Emits ``ctx`` (a depthwise sub-op with EXPLICIT padding) as Pad/VALID(/Slice) nodes on
  ``dev``; returns the node that holds its output."""
  ex = [int(v) for v in ctx.attrs["explicit_paddings"]]
  pads = [[ex[0], ex[1]], [ex[2], ex[3]], [ex[4], ex[5]], [ex[6], ex[7]]]
  dtype = ctx.attrs["T"]
  attrs = dict(ctx.attrs, padding="VALID", explicit_paddings=[])
  if ctx.op_type == "DepthwiseConv2dNativeBackpropInput":
    sizes = [int(s) for s in np.asarray(ctx.inputs[0].value).reshape(-1)]
    padded = [s + lo + hi for s, (lo, hi) in zip(sizes, pads)]
    grown = comm.const(b, f"{node}/padded_sizes", np.asarray(padded, np.int32), "int32", dev,
                       shared=True)
    full = b.add(ctx.op_type, f"{node}/padded", [grown, inputs[1], inputs[2]], dev, attrs)
    begin = comm.const(b, f"{node}/begin", np.asarray([lo for lo, _ in pads], np.int32),
                       "int32", dev, shared=True)
    size = comm.const(b, f"{node}/size", np.asarray(sizes, np.int32), "int32", dev,
                      shared=True)
    return b.add("Slice", node, [full, begin, size], dev, {"T": dtype, "Index": "int32"})
  paddings = comm.const(b, f"{node}/paddings", np.asarray(pads, np.int32), "int32", dev,
                        shared=True)
  x = b.add("Pad", f"{node}/pad", [inputs[0], paddings], dev, {"T": dtype, "Tpaddings": "int32"})
  return b.add(ctx.op_type, node, [x, *inputs[1:]], dev, attrs)

