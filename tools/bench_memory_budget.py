"""Benchmarks the memory budget: bytes per step against the per-device budget.

    python tools/bench_memory_budget.py            # GPT-24 and WResNet-152 at k = 8, paper sizes
    python tools/bench_memory_budget.py --models=mlp,gpt --sizes=tiny --k=4 --nowrite

For each model (built without materialising any weight): the budget sweeps
``--points`` geometric steps from the fully partitioned peak (Tofu's cut-only
plan, the smallest the search finds) to the whole step on one device, then
unlimited; at each, the fewest-bytes plan within it
(``tf_tofu.plan(..., memory_budget=...)``; all budgets from one set of
candidates, ``search.planners.trade_off``, and one budget re-planned through
the API to check it gives the same bytes).  Datapar's and cut-only Tofu's
points are shown beside.  Writes a section of docs/benchmarks.md and the plot
docs/memory_vs_bytes.png (``pip install tf_tofu[plot]``; without matplotlib the
table is still written, and the tool says so).
"""

from __future__ import annotations

import math
import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402
from zoo_graphs import build_graph  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["gpt24", "wresnet152"], "Zoo keys to benchmark.")
flags.DEFINE_enum("sizes", "paper", ["paper", "tiny"], "Paper-sized or tiny models.")
flags.DEFINE_integer("k", 8, "Device count.")
flags.DEFINE_integer("points", 7, "Finite budgets in the sweep (then unlimited).", lower_bound=2)
flags.DEFINE_bool("check_api", True, "Re-plan the middle budget through tf_tofu's API.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md and docs/memory_vs_bytes.png.")

PLOT = os.path.join(benchdoc.ROOT, "docs", "memory_vs_bytes.png")


def sweep(key: str):
  """``(name, rows, points)``: per budget (budget, bytes, peak), and the baselines' points."""
  from tf_tofu import api
  from tf_tofu.graph import view
  from tf_tofu.layout import memory
  from tf_tofu.opdefs.registry import Describer
  from tf_tofu.search import planners
  step, graph, _ = build_graph(key, FLAGS.sizes)
  describer = Describer()
  sgraph = view.from_tofu_graph(graph, describer)
  points = {}
  for planner in ("tofu", "datapar"):
    plan = api.plan_view(sgraph, FLAGS.k, planner, describer=describer)
    points[planner] = (plan.total_bytes, plan.memory["worst"])
  low, high = points["tofu"][1], memory.single_device_peak(sgraph, describer)
  budgets = [int(low * (high / low) ** (i / (FLAGS.points - 1))) for i in range(FLAGS.points)]
  budgets.append(math.inf)
  start = time.perf_counter()
  found = planners.trade_off(sgraph, FLAGS.k, describer, budgets)
  seconds = time.perf_counter() - start
  rows = [(b, r.evaluation.total_bytes, peak) for b, (r, peak) in zip(budgets, found)]
  print(f"{key}: {step.name}: {len(budgets)} budgets in {seconds:.1f} s", flush=True)
  if FLAGS.check_api:
    middle = FLAGS.points // 2
    start = time.perf_counter()
    plan = api.plan_view(sgraph, FLAGS.k, describer=describer, memory_budget=budgets[middle])
    print(f"  API at {budgets[middle]} B: {plan.total_bytes} B, peak {plan.memory['worst']} B "
          f"in {time.perf_counter() - start:.1f} s", flush=True)
    if plan.total_bytes != rows[middle][1] or plan.memory["worst"] > budgets[middle]:
      raise AssertionError(f"{key}: the API's plan differs from the sweep's at "
                           f"{budgets[middle]} B: {plan.total_bytes} vs {rows[middle][1]}")
  return step.name, rows, points, seconds


def table(results) -> str:
  from tf_tofu.core.plan import human_bytes
  lines = ["| model | memory budget per device | bytes per step | worst-device peak | "
           "bytes / cut-only tofu's |", "|---|---|---|---|---|"]
  for key, (_, rows, points, _) in results.items():
    cut_bytes = max(points["tofu"][0], 1)
    named = [("unlimited" if math.isinf(b) else human_bytes(b), moved, peak)
             for b, moved, peak in rows]
    named += [(f"({label})", *points[planner]) for planner, label in
              (("tofu", "tofu, no replication"), ("datapar", "datapar"))]
    for name, moved, peak in named:
      lines.append(f"| {key} | {name} | {human_bytes(moved)} | {human_bytes(peak)} | "
                   f"{moved / cut_bytes:.3f} |")
  return "\n".join(lines)


def plot(results) -> bool:
  """docs/memory_vs_bytes.png; False when matplotlib is missing."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
  except ImportError:
    return False
  fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2), squeeze=False)
  for ax, (key, (name, rows, points, _)) in zip(axes[0], results.items()):
    finite = [(b, m, p) for b, m, p in rows if not math.isinf(b)]
    ax.step([b / 2**30 for b, _, _ in finite], [m / 2**30 for _, m, _ in finite], where="post",
            marker="o", label="tofu within the budget")
    for planner, style in (("tofu", "s"), ("datapar", "^")):
      moved, peak = points[planner]
      ax.plot([peak / 2**30], [moved / 2**30], style, markersize=9,
              label="tofu, no replication" if planner == "tofu" else "datapar")
    ax.set_xscale("log")
    ax.set_xlabel("memory budget per device (GiB, worst-device peak)")
    ax.set_ylabel("bytes per step (GiB)")
    ax.set_title(f"{key}, k = {FLAGS.k}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(PLOT, dpi=110)
  return True


def main(argv):
  del argv
  results = {key: sweep(key) for key in FLAGS.models}
  body = table(results)
  print(body)
  if not FLAGS.write:
    return
  plotted = plot(results)
  note = ("![bytes per step against the memory budget](memory_vs_bytes.png)" if plotted else
          "(no plot: matplotlib is not installed; `pip install tf_tofu[plot]`)")
  if not plotted:
    print("matplotlib is not installed (pip install tf_tofu[plot]): wrote the table only")
  timing = ", ".join(f"{key} {r[3]:.0f} s" for key, r in results.items())
  intro = (f"k = {FLAGS.k}, {FLAGS.sizes} sizes.  The budget sweeps geometrically from the fully "
           "partitioned peak (Tofu's cut-only plan) to the whole step on one device, then "
           "unlimited; each row is the fewest-bytes plan whose estimated worst-device peak "
           "(`tf_tofu.layout.memory`, exact) is within the budget (`memory_budget`, the "
           "Lagrangian search of `tf_tofu.search.budget`).  The last two rows per model are "
           f"the planners without a budget.  Search time for all budgets: {timing}.  Bytes "
           "are the cost; contractions (MatMul, Conv2D, their gradients) always split their "
           "work (`onecut`'s split work), so with memory to spare the plan stores "
           "replicated where that saves bytes but no device runs the whole step.")
  benchdoc.write_section("bytes per step against the memory budget",
                         "python tools/bench_memory_budget.py", f"{intro}\n\n{body}\n\n{note}\n")


if __name__ == "__main__":
  app.run(main)
