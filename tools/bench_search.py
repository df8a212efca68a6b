"""Benchmarks the planner: search time against k, and predicted bytes per planner.

    python tools/bench_search.py                 # the paper-sized models, a 12-layer Keras
                                                 # Transformer, Keras ResNet-101 and
                                                 # InceptionV3 (batch 128) and the 256-step
                                                 # RNNLM, writes docs/benchmarks.md
    python tools/bench_search.py --models=mlp --sizes=tiny --nowrite

Prints one line per (model, k, planner) and writes two sections of
docs/benchmarks.md: search time at k = 2, 4, 6, 8, 16, 64 for the tofu planner
(target: under 5 s at k = 8 on the large models), the time of the plan's
memory estimate that ``tf_tofu.plan`` adds (``tf_tofu.layout.memory``), the two
together (what a default ``tf_tofu.plan`` after tracing takes; target: under 5 s at
k = 8 and under 30 s at k = 64), the worst device against the ideal, and
bytes per step at k = 8 for tofu against every baseline, with the ratio, and
the never-worse pass (``never_worse=True``: Tofu and the cut-only baselines
through one shared memo, the fewest bytes kept, then the exact improvement
pass) with its time and who found the plan.  The optimality column gives,
per level of Tofu's recursion, whether the DP was exact, the widest DP and,
where a level is not exact, the gap bounds summed.
Models are built without materialising any weight.  Every timed call starts cold, as
one ``tf_tofu.plan`` after tracing does: a new view and Describer (describing the ops and
deriving their strategies are counted), no cache from an earlier k or planner; the
memory estimate reuses its plan's Describer, as ``tf_tofu.plan`` does.  Each timed plan
starts after ``gc.collect()``, so that the garbage of the call before is not billed to it.
Each model is benchmarked in a process of its own, as a user plans one model, so that no
model's figures depend on the ones planned before it.  (Planning k = 2..64 before k = 8
in one process changed InceptionV3's and ResNet-101's k = 8 times by no more than the
machine's drift: 4.1-4.8 s and 3.7-4.3 s.)  The machine's speed drifts by tens of per
cent within an hour: compare two versions with ``tools/ab_speed.py``, not with two
runs of this tool.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402
from zoo_graphs import build_graph, cold_plan, cold_plan_with_memory  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["wresnet152", "lstm10", "gpt24", "keras_gpt12", "resnet101",
                              "inceptionv3", "rnnlm256"],
                  "Zoo keys to benchmark.")
flags.DEFINE_enum("sizes", "paper", ["paper", "tiny"], "Paper-sized or tiny models.")
flags.DEFINE_list("ks", ["2", "4", "6", "8", "16", "64"], "Device counts for the timing table.")
flags.DEFINE_list("planners", ["tofu", "datapar", "allrow", "spartan", "equalchop", "megatron"],
                  "Planners for the bytes table (at k = --bytes_k).")
flags.DEFINE_integer("bytes_k", 8, "Device count of the bytes table.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")
flags.DEFINE_string("rows_to", None, "Benchmark the one model of --models in this process and "
                    "write its rows to this file (how the tool runs each model).")

def human_bytes(b: float) -> str:
  from tf_tofu.core.plan import human_bytes as h
  return h(b)


def proof(plan) -> str:
  """The table's word on optimality: per level of Tofu's recursion, exact or not, the
  widest DP (``Plan.level_search``) and, when a level is not exact, its gap bounds summed."""
  levels = plan.level_search
  width = max((lvl["width"] for lvl in levels), default=0)
  if plan.proven_optimal:
    return f"yes (DP width {width})"
  gap = sum(lvl["gap_bound"] for lvl in levels)
  inexact = sum(1 for lvl in levels if not lvl["exact"])
  return (f"no: {inexact} of {len(levels)} levels, within {human_bytes(gap)} of their optima "
          f"(DP width {width})")


def model_rows(key: str) -> tuple[list, list]:
  """``(time rows, byte rows)`` of one model: planned at every k, then by every planner."""
  time_rows = []
  step, graph, ingest_s = build_graph(key, FLAGS.sizes)
  n_ops = len(graph.ops)
  print(f"{key}: {step.name}: {n_ops} ops, ingested in {ingest_s:.1f} s", flush=True)
  for k in [int(x) for x in FLAGS.ks]:
    plan, secs, mem, mem_secs = cold_plan_with_memory(graph, k)
    print(f"  k={k:<3} tofu: {secs:6.2f} s  {human_bytes(plan.total_bytes)}  "
          f"proven optimal per level: {proof(plan)}; memory {mem_secs:.2f} s, worst "
          f"{human_bytes(mem['worst'])} = {mem['ratio']:.3f}x the ideal", flush=True)
    time_rows.append((key, n_ops, k, secs, plan.total_bytes, proof(plan), mem_secs,
                      dict(worst=mem["worst"], ratio=mem["ratio"])))
  results = {}
  for planner in FLAGS.planners:
    plan, secs = cold_plan(graph, FLAGS.bytes_k, planner=planner)
    results[planner] = plan.total_bytes
    print(f"  k={FLAGS.bytes_k} {planner:<10} {human_bytes(plan.total_bytes):>12} "
          f"({secs:.1f} s)", flush=True)
  plan, secs = cold_plan(graph, FLAGS.bytes_k, never_worse=True)
  found_by = plan.found_by or "tofu"
  if plan.total_bytes < results.get(found_by, plan.total_bytes):  # the pass moved it
    found_by += f" ({human_bytes(results[found_by])}), then the exact improvement pass"
  print(f"  k={FLAGS.bytes_k} tofu, never_worse=True {human_bytes(plan.total_bytes):>12} "
        f"({secs:.1f} s; found by {found_by})", flush=True)
  return time_rows, [(key, results, (secs, plan.total_bytes, found_by))]


def main(argv):
  del argv
  if FLAGS.rows_to:
    (key,) = FLAGS.models
    with open(FLAGS.rows_to, "w") as f:
      json.dump(model_rows(key), f)
    return 0
  time_rows, byte_rows = [], []
  for key in FLAGS.models:  # each model in a process of its own (module docstring)
    got_time, got_bytes = json.loads(benchdoc.run_in_own_process(
        __file__, [f"--models={key}", f"--sizes={FLAGS.sizes}", f"--ks={','.join(FLAGS.ks)}",
                   f"--planners={','.join(FLAGS.planners)}", f"--bytes_k={FLAGS.bytes_k}"],
        "rows_to"))
    time_rows += got_time
    byte_rows += got_bytes
  if FLAGS.write:
    lines = ["| model | ops | k | search s | predicted bytes/step | proven optimal per level | "
             "memory estimate s | search + memory s | worst device | worst / ideal |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key, n_ops, k, secs, b, proven, mem_secs, mem in time_rows:
      lines.append(f"| {key} | {n_ops} | {k} | {secs:.2f} | {human_bytes(b)} | "
                   f"{proven} | {mem_secs:.2f} | {secs + mem_secs:.2f} | "
                   f"{human_bytes(mem['worst'])} | {mem['ratio']:.3f} |")
    benchdoc.write_section("search time", " ".join(["python tools/bench_search.py", *sys.argv[1:]]),
                           "\n".join(lines))
    planners = FLAGS.planners
    lines = ["| model | " + " | ".join(planners) + " | best baseline / tofu | "
             "never_worse=True: bytes, s, plan found by |",
             "|---|" + "---|" * (len(planners) + 2)]
    for key, res, (nw_secs, nw_bytes, nw_by) in byte_rows:
      base = min(v for p, v in res.items() if p != "tofu")
      ratio = f"{base / res['tofu']:.3f}x" if res.get("tofu") else "-"
      lines.append(f"| {key} | " + " | ".join(human_bytes(res[p]) for p in planners) +
                   f" | {ratio} | {human_bytes(nw_bytes)}, {nw_secs:.2f} s, {nw_by} |")
    benchdoc.write_section(f"bytes per step at k={FLAGS.bytes_k}",
                           " ".join(["python tools/bench_search.py", *sys.argv[1:]]), "\n".join(lines))
  return 0


if __name__ == "__main__":
  app.run(main)
