"""Does the partitioned step compute what the original computes?  Checked in float64.

The check runs a training step ``steps`` times unpartitioned and ``steps``
times partitioned (a :class:`tf_tofu.Function`), from the same initial
variable values on the same batches, and compares every loss and every
variable the step captures (weights, optimizer slots, counters) at the end.

Tolerance (fixed, never estimated at run time).  For each compared tensor
``got`` against the reference ``want``::

    max |got - want|  <=  RTOL * max |want|  +  ATOL,      RTOL = ATOL = 1e-9

In float64 a correct partition differs from the original only by the order
of its sums (about 1e-16 relative per operation).  Measured on the tiny zoo
models after three steps, the largest error is 4e-11 absolute (a batch-norm
offset trained by Adam, whose step ``lr * m / sqrt(v)`` turns a relative
error e of a small gradient into an absolute error ``lr * e``); a wrong
partition (a missing sum, a wrong slice, a halo off by one) differs by the
size of an update (>= 1e-5).  ATOL covers tensors whose reference is near
zero: an attention key bias has a mathematically zero gradient and Adam
moves it by rounding noise alone (1e-15 here).

float32 steps are compared with a caller-stated, generous bound (see
``FLOAT32_RTOL``): float32 reordering noise (1e-7 relative) is amplified by
tiny-batch batch norm and by Adam until no fixed bound separates a bug from
noise after several steps, so float32 runs are smoke tests of one step.

Kernels without a float64 CPU kernel: ``FusedBatchNormV3`` and its gradient
(the float64 plain-TF Wide ResNet normalises unfused; the fused pair is
checked by the float32 WResNet smoke test and by the per-op kernel check).
One failure showed only in float32: Grappler's shape inference of an
EXPLICIT-padded ``DepthwiseConv2dNative`` (tests/test_padding.py runs both).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf

RTOL = 1e-9
ATOL = 1e-9
# One SGD step in float32: rounding of sums (1e-7 relative) amplified by batch norm over
# two examples; the worst measured on the tiny zoo is 2e-4 relative (a batch-norm scale).
FLOAT32_RTOL = 1e-3
FLOAT32_ATOL = 1e-5


def excess(got: Any, want: Any, rtol: float = RTOL, atol: float = ATOL) -> float:
  """``max|got - want| - (rtol * max|want| + atol)``: <= 0 when within tolerance."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  if got.shape != want.shape:
    return float("inf")
  if not want.size:
    return 0.0
  diff = np.abs(got - want)
  if not np.all(np.isfinite(diff)):
    return float("inf")
  return float(np.max(diff) - (rtol * np.max(np.abs(want)) + atol))


@dataclasses.dataclass(frozen=True)
class Mismatch:
  """One compared quantity outside tolerance."""

  what: str
  max_abs_error: float
  bound: float

  def __str__(self) -> str:
    return f"{self.what}: max |error| {self.max_abs_error:.3g} > bound {self.bound:.3g}"


class Reference:
  """A traced step's live variables, their initial values, and the unpartitioned run.

  Args:
    fn: the training step (a ``tf.function`` returning the loss).
    inputs: one tuple of arrays per step to run.
  """

  def __init__(self, fn: Callable, inputs: Sequence[tuple]):
    from tf_tofu import graph as graph_lib
    self.fn = fn
    self.inputs = [tuple(xs) for xs in inputs]
    specs = [tf.TensorSpec(np.shape(x), tf.as_dtype(np.asarray(x).dtype))
             for x in self.inputs[0]]
    # Every variable the step captures, optimizer slots and counters included (a
    # FuncGraph's own variable list misses those used through raw ops).  Keyed by handle
    # tensor: Keras 3 variable names repeat across layers ("bias").
    self.graph = graph_lib.trace(fn, *specs)
    self.initial = self.values()
    self.losses = [self._loss(fn(*xs)) for xs in self.inputs]
    self.final = self.values()
    self.restore()

  @staticmethod
  def _loss(out: Any) -> np.ndarray:
    flat = tf.nest.flatten(out, expand_composites=True)
    return np.concatenate([np.ravel(np.asarray(t, np.float64)) for t in flat]) if flat else (
        np.zeros([0]))

  def values(self) -> dict[str, np.ndarray]:
    """The current value of every variable the step captures, by handle tensor."""
    return self.graph.variable_values()

  def restore(self) -> None:
    """Sets every variable back to its initial value."""
    self.graph.assign_variables(self.initial)

  def compare(self, partitioned_fn: Any, rtol: float = RTOL, atol: float = ATOL,
              steps: int | None = None) -> list[Mismatch]:
    """Runs ``partitioned_fn`` (a :class:`tf_tofu.Function` of the same step) from the
    initial values on the same batches and lists what differs beyond tolerance.

    With ``steps`` (<= the reference's), only the first ``steps`` batches run
    and the variables are compared with a reference run of as many steps.
    """
    n = len(self.inputs) if steps is None else steps
    if n == len(self.inputs):
      want_losses, want_vars = self.losses, self.final
    else:
      self.restore()
      want_losses = [self._loss(self.fn(*xs)) for xs in self.inputs[:n]]
      want_vars = self.values()
    self.restore()
    try:
      got_losses = [self._loss(partitioned_fn(*xs)) for xs in self.inputs[:n]]
      partitioned_fn.sync_variables()
      got_vars = self.values()
    finally:
      self.restore()
    out = []

    def check(what, got, want):
      e = excess(got, want, rtol, atol)
      if e > 0:
        want = np.asarray(want, np.float64)
        bound = rtol * float(np.max(np.abs(want))) + atol if want.size else atol
        out.append(Mismatch(what, e + bound, bound))

    for i, (g, w) in enumerate(zip(got_losses, want_losses)):
      check(f"outputs of step {i + 1}", g, w)
    for name, want in want_vars.items():
      check(f"variable {name} after {n} steps", got_vars[name], want)
    return out
