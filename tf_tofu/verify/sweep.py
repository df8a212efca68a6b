"""One training step checked end to end, the way the Keras sweep reports it.

For a step, its example batches and k devices, :func:`check_step` runs the
whole pipeline through ``tf_tofu.function`` and measures:

* ``whole``: the ops left whole (type -> count), each with its reason in the
  view; a complete description of the step leaves none;
* ``predicted`` and ``counted`` bytes per step: the plan's total and the bytes
  the rewritten GraphDef moves (``tf_tofu.ops.counting``); equal for a
  correct rewrite;
* ``busiest``: the bytes the busiest device receives over the even share
  ``counted / k``; 1 when every device receives the same (an op left whole
  on device 0 drives it towards k);
* ``memory_ratio``: the worst device's estimated peak over the ideal
  ``single-device peak / k`` (``tf_tofu.rewrite.memory``);
* ``mismatches``: what differs from the unpartitioned step after running
  every batch of ``inputs`` from the same initial values
  (``equivalence.Reference``), at the fixed float64 bound, or the float32
  bound for a float32 step;
* ``plan_seconds`` (trace, search and rewrite) and ``first_call_seconds``
  (shards, function build and the first step).

With ``baselines``, each named planner is priced on the same view
(``tf_tofu.api.plan_view``) and the best is reported beside Tofu's bytes.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Optional, Sequence

import numpy as np

from tf_tofu.verify import equivalence


@dataclasses.dataclass(frozen=True)
class SweepRow:
  """What :func:`check_step` measured for one step (module docstring)."""

  name: str
  k: int
  ops: int
  whole: dict
  predicted: float
  counted: int
  busiest: float
  memory_ratio: float
  mismatches: tuple[str, ...]
  plan_seconds: float
  first_call_seconds: float
  best_baseline: Optional[tuple[str, float]] = None

  @property
  def whole_count(self) -> int:
    return sum(self.whole.values())


def check_step(name: str, fn, inputs: Sequence[tuple], k: int, planner: str = "tofu",
               baselines: Sequence[str] = (), **plan_options) -> SweepRow:
  """Partitions ``fn`` over k devices, runs it on ``inputs`` and measures it (module
  docstring); ``plan_options`` go to ``tf_tofu.function`` (``never_worse=True``, ...)."""
  import tf_tofu
  from tf_tofu import api
  from tf_tofu.ops import counting

  dtypes = {np.asarray(x).dtype for xs in inputs for x in xs}
  bound = ({} if np.dtype("float32") not in dtypes else
           dict(rtol=equivalence.FLOAT32_RTOL, atol=equivalence.FLOAT32_ATOL))
  reference = equivalence.Reference(fn, inputs)
  f = tf_tofu.function(fn, devices=k, planner=planner, **plan_options)
  start = time.perf_counter()
  partitioned = f.partitioned(*inputs[0])
  plan_seconds = time.perf_counter() - start
  start = time.perf_counter()
  f(*inputs[0])
  first_call_seconds = time.perf_counter() - start
  f.load_variables()  # the timed call trained the shards: start again from the initial values
  mismatches = tuple(str(m) for m in reference.compare(f, **bound))
  graph, view = f.traced(*inputs[0])
  whole = collections.Counter(op.op_type for op in view.ops if op.kind == "single")
  count = counting.transfer_count(partitioned.graph_def)
  share = count.total / k
  busiest = max(count.received.values(), default=0) / share if share else 1.0
  best = None
  if baselines:
    priced = {b: api.plan_view(view, f.devices, planner=b).total_bytes for b in baselines}
    best = min(priced.items(), key=lambda kv: (kv[1], kv[0]))
  return SweepRow(name=name, k=k, ops=len(graph.ops), whole=dict(sorted(whole.items())),
                  predicted=f.plan(*inputs[0]).total_bytes, counted=count.total,
                  busiest=busiest, memory_ratio=float(f.memory(*inputs[0])["ratio"]),
                  mismatches=mismatches, plan_seconds=plan_seconds,
                  first_call_seconds=first_call_seconds, best_baseline=best)


__all__ = ["SweepRow", "check_step"]
