"""Checks every op description against the real TensorFlow kernel.

For each case (``cases/``), each strategy the analysis derives and each
n in {2, 3, 4}: run the op's kernel on every worker's input regions (with the
worker's sub-op attributes and shape inputs from the description's shard
hook), combine the worker outputs according to the output states (place the
blocks of a ``Cut``, add up a ``PARTIAL``, check every copy of a ``REP``) and
compare with the unpartitioned op on the same random inputs:

    max |combined - full| <= ATOL + RTOL * max |full|.

Run as ``tofu validate`` (or ``python -m tf_tofu.opdefs.validate``): prints
every mismatch and ends with ``validated N op types, C cases, S strategies: F
mismatches``; the exit status is non-zero on any mismatch.  Only when asked,
``--coverage_out=docs/op_coverage.md`` writes the coverage table there.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Optional, Sequence

import numpy as np

from absl import app, flags, logging

from tf_tofu.opdefs import analysis, registry
from tf_tofu.opdefs.cases import Case, Fixed, all_cases
from tf_tofu.opdefs.description import Semantics, TensorInfo
from tf_tofu.opdefs.kernels import call_raw_op, context_from_node_def, run_op
from tf_tofu.core.states import Cut, Partial
from tf_tofu.opdefs.strategy import Strategy

RTOL = 1e-4
ATOL = 1e-5
WORKER_COUNTS = (2, 3, 4)


@dataclasses.dataclass
class CaseResult:
  case: Case
  strategies: dict = dataclasses.field(default_factory=dict)  # n -> list of str
  checked: int = 0
  mismatches: list = dataclasses.field(default_factory=list)
  error: Optional[str] = None


def build_case(case: Case, seed: int = 0):
  """Builds the op in a graph (for its NodeDef and static shapes) and its input values."""
  import tensorflow as tf
  rng = np.random.default_rng(seed)
  flat_specs = case.flat_inputs()
  values = [spec.make(rng) for spec in flat_specs]
  graph = tf.Graph()
  with graph.as_default():
    tensors = []
    for spec, val in zip(flat_specs, values):
      if isinstance(spec, Fixed):
        tensors.append(tf.constant(val))
      else:
        tensors.append(tf.compat.v1.placeholder(tf.as_dtype(val.dtype), val.shape))
    grouped, pos = [], 0
    for x in case.inputs:
      k = len(x) if isinstance(x, (list, tuple)) else 1
      grouped.append(tensors[pos:pos + k] if isinstance(x, (list, tuple)) else tensors[pos])
      pos += k
    result = call_raw_op(case.op_type, grouped, case.attrs)
    op = (result[0] if isinstance(result, (list, tuple)) and not isinstance(result, tf.Tensor)
          else result)
    while isinstance(op, (list, tuple)):
      op = op[0]
    op = op.op
  ins = [TensorInfo(tuple(v.shape), v.dtype.name, v if isinstance(s, Fixed) else None)
         for s, v in zip(flat_specs, values)]
  shapes = [tuple(t.shape.as_list()) if t.shape.is_fully_defined() else None for t in op.outputs]
  if None in shapes:  # e.g. a reserve space: take the shape the kernel gives
    first = run_op(case.op_type, context_from_node_def(op.node_def, ins).attrs, values)
    shapes = [s if s is not None else tuple(r.shape) for s, r in zip(shapes, first)]
  outs = [TensorInfo(s, t.dtype.name) for s, t in zip(shapes, op.outputs)]
  ctx = context_from_node_def(op.node_def, ins, outs)
  return ctx, values


def run_strategy(sem: Semantics, strategy: Strategy, values: Sequence[np.ndarray],
                 reference: Sequence[np.ndarray]) -> Optional[str]:
  """Runs each worker's sub-op, combines, compares; returns a mismatch message or None."""
  op = sem.op
  results = []
  for worker in strategy.workers:
    spec = sem.shard_spec(worker)
    ins = []
    for i, v in enumerate(values):
      if i in spec.meta_inputs:
        ins.append(np.asarray(spec.meta_inputs[i], dtype=v.dtype))
      elif worker.input_regions[i] is None:
        ins.append(v)
      else:
        ins.append(v[worker.input_regions[i].slices()])
    attrs = dict(op.attrs)
    attrs.update(spec.attrs)
    outs = run_op(op.op_type, attrs, ins)
    if spec.output_scale is not None:
      outs = [o * np.asarray(s, dtype=o.dtype) for o, s in zip(outs, spec.output_scale)]
    results.append(outs)
  for k, (state, ref) in enumerate(zip(strategy.outputs, reference)):
    if k in sem.undefined_outputs:
      continue
    if isinstance(state, Cut):
      combined = np.zeros_like(ref)
      for worker, outs in zip(strategy.workers, results):
        region = worker.output_regions[k]
        if outs[k].shape != region.shape:
          return (f"output {k}: worker {worker.w} produced shape {outs[k].shape}, its block "
                  f"is {region.shape}")
        combined[region.slices()] = outs[k]
      msg = _compare(combined, ref)
    elif isinstance(state, Partial):
      if any(outs[k].shape != ref.shape for outs in results):
        return f"output {k}: a partial has the wrong shape"
      combined = sum(outs[k].astype(np.float64) if ref.dtype.kind == "f" else outs[k]
                     for outs in results)
      msg = _compare(np.asarray(combined), ref)
    else:
      msg = next((_compare(outs[k], ref) for outs in results if _compare(outs[k], ref)), None)
    if msg:
      return f"output {k} ({state}): {msg}"
  return None


def _compare(got: np.ndarray, want: np.ndarray) -> Optional[str]:
  if got.shape != want.shape:
    return f"shape {got.shape} != {want.shape}"
  if want.size == 0:
    return None
  if want.dtype.kind in "biu":
    bad = int(np.sum(got != want))
    return f"{bad} elements differ" if bad else None
  g, w = got.astype(np.float64), want.astype(np.float64)
  finite = np.isfinite(w)
  if not np.array_equal(np.isfinite(g), finite):
    return "non-finite values differ"
  err = float(np.max(np.abs(g[finite] - w[finite]), initial=0.0))
  scale = float(np.max(np.abs(w[finite]), initial=0.0))
  return None if err <= ATOL + RTOL * scale else f"max error {err:.3g} (scale {scale:.3g})"


def check_case(case: Case, worker_counts=WORKER_COUNTS, describer=None) -> CaseResult:
  """Checks one case: every strategy for every n against the unpartitioned kernel."""
  res = CaseResult(case)
  try:
    ctx, values = build_case(case)
    describe = describer or registry.lookup(case.op_type)
    if describe is None:
      res.error = "no description"
      return res
    sem = describe(ctx)
    reference = run_op(ctx.op_type, ctx.attrs, values)
    for n in worker_counts:
      strats = analysis.strategies(sem, n)
      res.strategies[n] = [str(s) for s in strats]
      for s in strats:
        res.checked += 1
        try:
          msg = run_strategy(sem, s, values, reference)
        except Exception as e:  # the kernel rejected a worker's sub-op: a wrong description
          msg = f"worker sub-op failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
        if msg:
          res.mismatches.append(f"n={n} {s}: {msg}")
  except Exception as e:  # a crash is a failure of the description, reported as such
    res.error = f"{type(e).__name__}: {e}"
  return res


def validate(cases: Sequence[Case]) -> list[CaseResult]:
  out = []
  for i, case in enumerate(cases):
    out.append(check_case(case))
    if (i + 1) % 25 == 0:
      logging.info("checked %d/%d cases", i + 1, len(cases))
  return out


def failures(results: Sequence[CaseResult]) -> int:
  return sum(len(r.mismatches) + (1 if r.error else 0) for r in results)


def summary_line(results: Sequence[CaseResult]) -> str:
  ops = {r.case.op_type for r in results}
  strategies = sum(r.checked for r in results)
  return (f"validated {len(ops)} op types, {len(results)} cases, {strategies} strategies: "
          f"{failures(results)} mismatches")


def coverage_markdown(results: Sequence[CaseResult]) -> str:
  by_op = collections.OrderedDict()
  for r in sorted(results, key=lambda r: r.case.op_type):
    by_op.setdefault(r.case.op_type, []).append(r)
  lines = [
      "# Op coverage",
      "",
      "Generated by `python -m tf_tofu.opdefs.validate`. Every strategy the analysis derives",
      "from each description is run on the real TensorFlow kernel, per worker, for n = 2, 3, 4,",
      "and the combined result is compared with the unpartitioned op.",
      "",
      summary_line(results),
      "",
      "| op | case | strategies (n=2) | checked (n=2,3,4) | result |",
      "|---|---|---|---|---|",
  ]
  for op_type, rs in by_op.items():
    for r in rs:
      strats = "; ".join(r.strategies.get(2, [])) or "none"
      result = "ok" if not r.mismatches and not r.error else (
          r.error or f"{len(r.mismatches)} mismatches: {r.mismatches[0]}")
      case = str(r.case).replace("|", "\\|")
      lines.append(f"| {op_type} | `{case}` | {strats} | {r.checked} | {result} |")
  return "\n".join(lines) + "\n"


FLAGS = flags.FLAGS
flags.DEFINE_string("coverage_out", "",
                    "Write the coverage table to this file (e.g. docs/op_coverage.md); by "
                    "default it is written nowhere.")
flags.DEFINE_string("only", "", "Comma-separated op types to check (default: all).")


def main(argv):
  del argv
  cases = all_cases()
  if FLAGS.only:
    keep = set(FLAGS.only.split(","))
    cases = [c for c in cases if c.op_type in keep]
  results = validate(cases)
  for r in results:
    if r.error:
      print(f"ERROR {r.case}: {r.error}")
    for m in r.mismatches:
      print(f"MISMATCH {r.case}: {m}")
  if FLAGS.coverage_out:
    os.makedirs(os.path.dirname(FLAGS.coverage_out) or ".", exist_ok=True)
    with open(FLAGS.coverage_out, "w") as f:
      f.write(coverage_markdown(results))
  print(summary_line(results))
  return 1 if failures(results) else 0


if __name__ == "__main__":
  app.run(main)
