"""Kernel-check cases for ``volume_ops`` descriptions (3-D convolutions and poolings).

Batch 3 and channels 5 and 7 split unevenly over 2, 3 and 4 workers; SAME
and VALID padding, strides 1 and 2; the gradient
cases take their shapes from the forward geometry (``nn_cases.out_size``).
"""

from tf_tofu.opdefs.cases import Case, Fixed, Rand
from tf_tofu.opdefs.cases.nn_cases import out_size


def _attrs(s, padding, k=None):
  attrs = {"strides": [1, *s, 1], "padding": padding}
  if k is not None:
    attrs["ksize"] = [1, *k, 1]
  return attrs


def _conv(x, f, s, padding, label=""):
  """Conv3D and its two gradients for input ``x`` and filter ``f``."""
  n, *size, ci = x
  *taps, _, co = f
  out = [out_size(z, k, st, padding) for z, k, st in zip(size, taps, s)]
  attrs = _attrs(s, padding)
  dy = Rand((n, *out, co))
  return [Case("Conv3D", [Rand(x), Rand(f)], attrs, label=label),
          Case("Conv3DBackpropFilterV2", [Rand(x), Fixed(list(f), "int32"), dy], attrs,
               label=label),
          Case("Conv3DBackpropInputV2", [Fixed(list(x), "int32"), Rand(f), dy], attrs,
               label=label)]


def _pool(x, k, s, padding, label=""):
  """MaxPool3D, AvgPool3D and their gradients."""
  n, *size, c = x
  y = (n, *[out_size(z, kk, st, padding) for z, kk, st in zip(size, k, s)], c)
  attrs = _attrs(s, padding, k=k)
  return [Case("MaxPool3D", [Rand(x)], attrs, label=label),
          Case("AvgPool3D", [Rand(x)], attrs, label=label),
          Case("MaxPool3DGrad", [Rand(x), Rand(y), Rand(y)], attrs, label=label),
          Case("AvgPool3DGrad", [Fixed(list(x), "int32"), Rand(y)], attrs, label=label)]


CASES = [
    *_conv((3, 4, 5, 4, 5), (2, 3, 2, 5, 7), (1, 1, 1), "VALID", label="VALID"),
    *_conv((3, 5, 4, 6, 5), (3, 3, 3, 5, 4), (2, 1, 2), "SAME", label="SAME, strided"),
    *_pool((3, 4, 5, 6, 5), (2, 2, 2), (2, 2, 2), "VALID", label="2x2x2 stride 2"),
    *_pool((3, 5, 4, 5, 7), (3, 3, 3), (2, 1, 2), "SAME", label="SAME, padded"),
]
