"""Descriptions of TensorFlow's stateless random ops (Keras' Dropout, noise layers).

A stateless sampler is a pure function of its shape, key, counter and
algorithm::

    StatelessRandomUniformV2(shape, key, counter, alg) = lambda *i: U(key, counter, alg)[lin(i)]

where ``U`` is the counter-based stream (Philox or ThreeFry) and ``lin(i)``
the row-major linear index of ``i``.  Which stream values an element takes
depends on the whole shape, not on ``i`` alone: a sub-op of a smaller shape
would draw the first values of the stream, not the worker's block of them.
So every output variable is opaque and no strategy cuts these ops; the
search runs them replicated (every device draws the whole tensor from the
same key and counter, so every device holds the values the unpartitioned
step draws) and a consumer that is cut takes its block locally, without
communication.  Their data inputs are a few scalars and two-element
vectors, needed whole by every device.

Stateful samplers (RandomUniform, RandomStandardNormal) are not described: a
copy per device would draw different numbers than the original step.
"""

from __future__ import annotations

import numpy as np

from tf_tofu.opdefs import tdl
from tf_tofu.opdefs.common import index_vars
from tf_tofu.opdefs.description import OpContext, Semantics
from tf_tofu.opdefs.registry import describe

# Samplers of (shape, key, counter, alg[, further scalar arguments]).
KEY_COUNTER_SAMPLERS = ("StatelessRandomUniformV2", "StatelessRandomNormalV2",
                        "StatelessTruncatedNormalV2", "StatelessRandomUniformFullIntV2",
                        "StatelessRandomUniformIntV2")
# Samplers of (shape, seed[, further scalar arguments]).
SEED_SAMPLERS = ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal",
                 "StatelessRandomUniformInt", "StatelessRandomUniformFullInt")

_WHY = "counter_based_random_stream_depends_on_the_whole_shape"


def _drawn(shape, prefix: str = "i") -> tdl.Output:
  """An output of ``shape`` whose every element is a stream value (never cut)."""
  i = index_vars(prefix, shape)
  return tdl.Output(i, tdl.Opaque(_WHY, (), over=i))


@describe(*KEY_COUNTER_SAMPLERS, *SEED_SAMPLERS)
def stateless_sampler(op: OpContext) -> Semantics:
  """``out[i...] = stream(seed or key, counter, alg)[lin(i)]``: all dims opaque.

  Input 0 (the shape) is a meta input; every other input (key, counter,
  alg, seed, minval, maxval) is replicated.
  """
  shape = [int(s) for s in np.asarray(op.const(0)).reshape(-1)]
  for k in range(1, len(op.inputs)):
    op.replicated(k)
  return Semantics(op, [_drawn(shape)])


@describe("StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounterAlg")
def stateless_key_counter(op: OpContext) -> Semantics:
  """``(key, counter[, alg]) = scramble(seed)``: tiny outputs, computed whole from the seed."""
  op.replicated(0)
  shapes = ([tuple(o.shape) for o in op.outputs] if op.outputs
            else [(1,), (2,)] + ([()] if op.op_type.endswith("Alg") else []))
  return Semantics(op, [_drawn(s, f"o{k}_") for k, s in enumerate(shapes)])
