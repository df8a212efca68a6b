"""Kernel-check cases for ``nn_ops`` descriptions.

Shapes are small (dims <= 12) and chosen so that blocks of 2, 3 and 4 are
uneven, windows straddle block boundaries (halos), strides 1 and 2, odd and
even sizes, SAME, VALID and EXPLICIT padding all occur.  The gradient cases
take their ``out_backprop`` shapes from the forward geometry (:func:`out_size`).
"""

from tf_tofu.opdefs.cases import Case, Fixed, Rand


def out_size(size: int, k: int, s: int, padding: str, d: int = 1, pads=(0, 0)) -> int:
  """Output size of one windowed dim (TF's rule)."""
  eff = (k - 1) * d + 1
  if padding == "SAME":
    return -(-size // s)
  if padding == "VALID":
    return (size - eff) // s + 1
  return (size + pads[0] + pads[1] - eff) // s + 1


def conv_attrs(s: tuple[int, int], padding: str, pads=None, d: tuple[int, int] = (1, 1)) -> dict:
  """Conv attrs: strides ``s``, padding (``pads`` = ((top, bottom), (left, right))), dilations."""
  attrs = {"strides": [1, s[0], s[1], 1], "padding": padding}
  if padding == "EXPLICIT":
    attrs["explicit_paddings"] = [0, 0, *pads[0], *pads[1], 0, 0]
  if d != (1, 1):
    attrs["dilations"] = [1, d[0], d[1], 1]
  return attrs


def conv_grad_cases(x_shape, f_shape, s, padding, pads=((0, 0), (0, 0)), label="",
                    depthwise=False) -> list[Case]:
  """The BackpropInput and BackpropFilter cases of Conv2D (or DepthwiseConv2dNative)."""
  n, h, w, c = x_shape
  kh, kw, _, co = f_shape
  if depthwise:
    co = c * co
  oh = out_size(h, kh, s[0], padding, pads=pads[0])
  ow = out_size(w, kw, s[1], padding, pads=pads[1])
  attrs = conv_attrs(s, padding, pads)
  dy = Rand((n, oh, ow, co))
  pre = "DepthwiseConv2dNative" if depthwise else "Conv2D"
  return [
      Case(f"{pre}BackpropInput", [Fixed(list(x_shape), "int32"), Rand(f_shape), dy], attrs,
           label=label),
      Case(f"{pre}BackpropFilter", [Rand(x_shape), Fixed(list(f_shape), "int32"), dy], attrs,
           label=label),
  ]


def pool_case(op_type: str, x_shape, k, s, padding: str, label: str = "", pads=None) -> Case:
  """A MaxPool / AvgPool case, or its gradient's with the matching gradient shapes."""
  attrs = {"ksize": [1, k[0], k[1], 1], "strides": [1, s[0], s[1], 1], "padding": padding}
  if padding == "EXPLICIT":
    attrs["explicit_paddings"] = [0, 0, *pads[0], *pads[1], 0, 0]
  n, h, w, c = x_shape
  pads = pads or ((0, 0), (0, 0))
  y_shape = (n, out_size(h, k[0], s[0], padding, pads=pads[0]),
             out_size(w, k[1], s[1], padding, pads=pads[1]), c)
  if op_type in ("MaxPool", "AvgPool"):
    return Case(op_type, [Rand(x_shape)], attrs, label=label)
  if op_type == "MaxPoolGrad":
    return Case(op_type, [Rand(x_shape), Rand(y_shape), Rand(y_shape)], attrs, label=label)
  return Case(op_type, [Fixed(list(x_shape), "int32"), Rand(y_shape)], attrs, label=label)


def bn_case(x_shape, training: bool, f: float = 1.0, empty_stats: bool = False,
            fmt: str = "NHWC", label: str = "") -> Case:
  """A FusedBatchNormV3 case (running variance positive; optionally empty running stats)."""
  c = x_shape[-1]
  stats = [Rand((0,)), Rand((0,))] if empty_stats else [Rand((c,)), Rand((c,), lo=0.5, hi=2.0)]
  return Case("FusedBatchNormV3", [Rand(x_shape), Rand((c,)), Rand((c,)), *stats],
              {"epsilon": 1e-3, "exponential_avg_factor": f, "is_training": training,
               "data_format": fmt}, label=label)


def bn_grad_case(x_shape, training: bool, fmt: str = "NHWC", label: str = "") -> Case:
  """A FusedBatchNormGradV3 case (saved variance positive, reserve_space_3 empty)."""
  c = x_shape[-1]
  return Case("FusedBatchNormGradV3",
              [Rand(x_shape), Rand(x_shape), Rand((c,)), Rand((c,)),
               Rand((c,), lo=0.5, hi=2.0), Rand((0,))],
              {"epsilon": 1e-3, "is_training": training, "data_format": fmt}, label=label)


CASES = [
    # --- AvgPool / AvgPoolGrad
    pool_case("AvgPool", (3, 9, 10, 5), (3, 3), (2, 2), "SAME", "SAME, padded: spatial opaque"),
    pool_case("AvgPool", (3, 9, 11, 4), (2, 2), (2, 2), "VALID", "2x2 stride 2"),
    pool_case("AvgPool", (2, 9, 7, 3), (3, 2), (1, 1), "VALID", "stride 1 halo"),
    pool_case("AvgPool", (3, 8, 12, 3), (2, 2), (2, 2), "SAME", "SAME without padding"),
    pool_case("AvgPool", (3, 7, 7, 5), (3, 3), (1, 1), "SAME", "SAME stride 1"),
    pool_case("AvgPoolGrad", (3, 9, 10, 5), (3, 3), (2, 2), "SAME"),
    pool_case("AvgPoolGrad", (3, 9, 11, 4), (2, 2), (2, 2), "VALID"),
    pool_case("AvgPoolGrad", (5, 7, 6, 3), (3, 3), (1, 1), "VALID", "stride 1"),
    # --- BiasAdd / BiasAddGrad
    Case("BiasAdd", [Rand((5, 7)), Rand((7,))]),
    Case("BiasAdd", [Rand((3, 5, 6, 7)), Rand((7,))], {"data_format": "NHWC"}),
    Case("BiasAdd", [Rand((4, 5, 6)), Rand((6,))]),
    Case("BiasAddGrad", [Rand((5, 3, 4, 7))]),
    Case("BiasAddGrad", [Rand((7, 5))]),
    # --- Conv2D
    Case("Conv2D", [Rand((4, 9, 9, 3)), Rand((3, 3, 3, 5))],
         {"strides": [1, 1, 1, 1], "padding": "SAME"}),
    Case("Conv2D", [Rand((4, 11, 10, 3)), Rand((3, 3, 3, 5))],
         {"strides": [1, 2, 2, 1], "padding": "SAME"}, label="stride 2"),
    Case("Conv2D", [Rand((3, 9, 9, 4)), Rand((3, 2, 4, 5))],
         {"strides": [1, 2, 1, 1], "padding": "VALID"}),
    Case("Conv2D", [Rand((2, 8, 8, 3)), Rand((1, 1, 3, 6))],
         {"strides": [1, 2, 2, 1], "padding": "VALID"}, label="1x1 stride 2"),
    Case("Conv2D", [Rand((2, 9, 10, 3)), Rand((3, 3, 3, 4))], conv_attrs((1, 1), "SAME", d=(2, 2)),
         label="dilation 2"),
    Case("Conv2D", [Rand((2, 11, 9, 2)), Rand((3, 2, 2, 3))],
         conv_attrs((2, 1), "VALID", d=(2, 3)), label="dilation and stride"),
    Case("Conv2D", [Rand((2, 4, 5, 2)), Rand((3, 3, 2, 3))], conv_attrs((1, 1), "SAME", d=(2, 2)),
         label="dilated taps reading only padding"),
    Case("Conv2D", [Rand((3, 1, 2, 3)), Rand((3, 3, 3, 4))], conv_attrs((1, 1), "SAME"),
         label="1x2 image, taps reading only padding"),
    Case("Conv2D", [Rand((3, 7, 9, 3)), Rand((3, 3, 3, 4))],
         conv_attrs((1, 1), "EXPLICIT", ((1, 2), (0, 1))), label="EXPLICIT"),
    Case("Conv2D", [Rand((2, 10, 9, 3)), Rand((3, 3, 3, 4))],
         conv_attrs((2, 2), "EXPLICIT", ((2, 1), (1, 1))), label="EXPLICIT stride 2"),
    Case("Conv2D", [Rand((2, 12, 11, 3)), Rand((7, 7, 3, 4))], conv_attrs((2, 2), "SAME"),
         label="7x7 stride 2 stem"),
    # --- Conv2DBackpropInput / Conv2DBackpropFilter (the gradients of the Conv2D cases)
    *conv_grad_cases((4, 9, 9, 3), (3, 3, 3, 5), (1, 1), "SAME", label="stride 1 odd"),
    *conv_grad_cases((3, 8, 8, 3), (3, 3, 3, 4), (1, 1), "SAME", label="stride 1 even"),
    *conv_grad_cases((4, 11, 10, 3), (3, 3, 3, 5), (2, 2), "SAME", label="stride 2 odd/even"),
    *conv_grad_cases((3, 8, 8, 2), (3, 3, 2, 4), (2, 2), "SAME", label="stride 2 even"),
    *conv_grad_cases((3, 9, 8, 4), (3, 2, 4, 5), (1, 1), "VALID", label="VALID stride 1"),
    *conv_grad_cases((3, 9, 11, 3), (3, 3, 3, 4), (2, 2), "VALID", label="VALID stride 2 odd"),
    *conv_grad_cases((2, 10, 8, 3), (3, 3, 3, 4), (2, 2), "VALID", label="VALID stride 2 even"),
    *conv_grad_cases((2, 8, 9, 3), (1, 1, 3, 6), (2, 2), "VALID", label="1x1 stride 2"),
    *conv_grad_cases((2, 7, 9, 3), (2, 2, 3, 4), (2, 2), "VALID", label="2x2 stride 2, tail row"),
    *conv_grad_cases((2, 11, 10, 2), (3, 3, 2, 3), (3, 3), "VALID",
                     label="3x3 stride 3: a block of rows no window reaches"),
    *conv_grad_cases((3, 7, 9, 3), (3, 3, 3, 4), (1, 1), "EXPLICIT", ((1, 2), (0, 1)),
                     label="EXPLICIT"),
    *conv_grad_cases((2, 10, 9, 3), (3, 3, 3, 4), (2, 2), "EXPLICIT", ((2, 1), (1, 1)),
                     label="EXPLICIT stride 2"),
    *conv_grad_cases((2, 12, 11, 3), (7, 7, 3, 4), (2, 2), "SAME", label="7x7 stride 2 stem"),
    *conv_grad_cases((3, 1, 2, 3), (3, 3, 3, 4), (1, 1), "SAME", label="1x2 image"),
    # --- DepthwiseConv2dNative and its gradients
    Case("DepthwiseConv2dNative", [Rand((2, 9, 9, 3)), Rand((3, 3, 3, 1))],
         conv_attrs((1, 1), "SAME"), label="multiplier 1"),
    Case("DepthwiseConv2dNative", [Rand((3, 10, 9, 3)), Rand((3, 3, 3, 2))],
         conv_attrs((2, 2), "SAME"), label="multiplier 2"),
    Case("DepthwiseConv2dNative", [Rand((2, 7, 8, 4)), Rand((3, 2, 4, 2))],
         conv_attrs((2, 2), "EXPLICIT", ((1, 1), (0, 1))), label="EXPLICIT"),
    Case("DepthwiseConv2dNative", [Rand((2, 9, 8, 5)), Rand((3, 3, 5, 1))],
         conv_attrs((2, 2), "VALID")),
    *conv_grad_cases((2, 9, 9, 3), (3, 3, 3, 1), (1, 1), "SAME", label="multiplier 1",
                     depthwise=True),
    *conv_grad_cases((3, 10, 9, 3), (3, 3, 3, 2), (2, 2), "SAME", label="multiplier 2",
                     depthwise=True),
    *conv_grad_cases((2, 7, 8, 4), (3, 2, 4, 2), (2, 2), "EXPLICIT", ((1, 1), (0, 1)),
                     label="EXPLICIT", depthwise=True),
    *conv_grad_cases((2, 9, 8, 5), (3, 3, 5, 1), (2, 2), "VALID", depthwise=True),
    # --- FusedBatchNormGradV3
    bn_grad_case((3, 4, 5, 7), True, label="training"),
    bn_grad_case((2, 3, 4, 3, 5), True, fmt="NDHWC", label="training 5-D"),
    bn_grad_case((3, 5, 6, 7), False, label="inference"),
    bn_grad_case((5, 3, 2, 6), False, label="inference"),
    # --- MaxPool / MaxPoolGrad
    pool_case("MaxPool", (3, 11, 10, 5), (3, 3), (2, 2), "SAME", "ResNet 3x3 stride 2"),
    pool_case("MaxPool", (3, 9, 8, 4), (2, 2), (2, 2), "VALID", "2x2 stride 2"),
    pool_case("MaxPool", (2, 9, 7, 3), (3, 3), (1, 1), "SAME", "stride 1"),
    pool_case("MaxPool", (3, 11, 9, 3), (3, 2), (2, 2), "VALID", "odd"),
    pool_case("MaxPool", (2, 8, 9, 3), (3, 3), (2, 2), "EXPLICIT", "EXPLICIT", ((1, 2), (0, 1))),
    pool_case("MaxPoolGrad", (3, 11, 10, 5), (3, 3), (2, 2), "SAME"),
    pool_case("MaxPoolGrad", (3, 9, 8, 4), (2, 2), (2, 2), "VALID"),
    pool_case("MaxPoolGrad", (2, 8, 9, 3), (3, 3), (2, 2), "EXPLICIT", "EXPLICIT",
              ((1, 2), (0, 1))),
    # --- Softmax family
    Case("Softmax", [Rand((5, 7))]),
    Case("Softmax", [Rand((3, 4, 6))]),
    Case("LogSoftmax", [Rand((7, 5))]),
    Case("LogSoftmax", [Rand((2, 5, 3))]),
    Case("SparseSoftmaxCrossEntropyWithLogits", [Rand((7, 5)), Rand((7,), "int32", 0, 5)]),
    Case("SparseSoftmaxCrossEntropyWithLogits", [Rand((9, 4)), Rand((9,), "int64", 0, 4)]),
    Case("SoftmaxCrossEntropyWithLogits", [Rand((7, 5)), Rand((7, 5), lo=0.0, hi=1.0)]),
    Case("SoftmaxCrossEntropyWithLogits", [Rand((6, 5)), Rand((1, 5), lo=0.0, hi=1.0)],
         label="labels broadcast over the batch"),
    Case("SoftmaxCrossEntropyWithLogits", [Rand((1, 4)), Rand((5, 4), lo=0.0, hi=1.0)],
         label="features broadcast over the batch"),
    # --- FusedBatchNormV3
    bn_case((3, 4, 5, 7), True, label="training"),
    bn_case((3, 4, 5, 6), True, 0.3, label="training, moving average"),
    bn_case((2, 5, 3, 5), True, empty_stats=True, label="training, empty mean/variance"),
    bn_case((2, 3, 4, 3, 5), True, 0.1, fmt="NDHWC", label="training 5-D"),
    bn_case((3, 4, 5, 7), False, label="inference"),
    bn_case((5, 3, 3, 6), False, 0.3, label="inference, avg factor ignored"),
]
