"""Kernel-check cases for ``array_ops`` descriptions."""

from tf_tofu.opdefs.cases import Case, Fixed, Rand

CASES = []
