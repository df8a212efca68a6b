"""Kernel-check cases for ``nn_ops`` descriptions."""

from tf_tofu.opdefs.cases import Case, Fixed, Rand

CASES = [
    Case("Conv2D", [Rand((4, 9, 9, 3)), Rand((3, 3, 3, 5))],
         {"strides": [1, 1, 1, 1], "padding": "SAME"}),
    Case("Conv2D", [Rand((4, 11, 10, 3)), Rand((3, 3, 3, 5))],
         {"strides": [1, 2, 2, 1], "padding": "SAME"}, label="stride 2"),
    Case("Conv2D", [Rand((3, 9, 9, 4)), Rand((3, 2, 4, 5))],
         {"strides": [1, 2, 1, 1], "padding": "VALID"}),
    Case("Conv2D", [Rand((2, 8, 8, 3)), Rand((1, 1, 3, 6))],
         {"strides": [1, 2, 2, 1], "padding": "VALID"}, label="1x1 stride 2"),
]
