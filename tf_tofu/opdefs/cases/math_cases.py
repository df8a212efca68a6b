"""Kernel-check cases for ``math_ops`` descriptions."""

from tf_tofu.opdefs.cases import Case, Fixed, Rand

CASES = [
    Case("MatMul", [Rand((6, 5)), Rand((5, 7))]),
    Case("MatMul", [Rand((5, 6)), Rand((7, 5))], {"transpose_a": True, "transpose_b": True}),
    Case("AddV2", [Rand((4, 6)), Rand((6,))], label="broadcast"),
    Case("Mul", [Rand((4, 1, 5)), Rand((3, 1))], label="broadcast both"),
    Case("Exp", [Rand((5, 6))]),
]
