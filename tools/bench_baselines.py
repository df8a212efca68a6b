"""Tofu against the baselines: every tiny zoo model, k = 2..8.

    python tools/bench_baselines.py                 # writes docs/benchmarks.md
    python tools/bench_baselines.py --ks=2,4 --nowrite

Each level of tofu's recursion is exact (docs/method.md section 7), but the
levels are solved one after the other, so a baseline that plans the same
levels differently can end up cheaper in total; tofu's never-worse pass
(``never_worse=True``, ``search.planners``) then takes that baseline's
plan, and its exact improvement pass (``search.improve``) moves tensor groups
while the exactly counted bytes fall.  This tool plans every tiny zoo model
(plain TF and Keras, Adam) with every planner at every k, tofu with the pass,
and with tofu's recursion alone (the default), lists the cases where a
baseline beats the recursion or the improvement pass beats them all, and
counts the cases where a cut-only baseline beats tofu's returned plan.
"""

from __future__ import annotations

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("ks", [str(k) for k in range(2, 9)], "Device counts.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")


def main(argv):
  del argv
  from tf_tofu import api, models
  from tf_tofu.graph import view
  from tf_tofu.opdefs.registry import Describer
  from tf_tofu.search import planners
  start = time.perf_counter()
  rows, cases, beaten, lost, below = [], 0, 0, 0, 0
  for key in sorted(models.TINY):
    for flavor in models.FLAVORS:
      step = models.tiny(key, flavor=flavor, optimizer="adam")
      with step.context():
        graph = api.as_graph(step.fn, step.input_signature)
      describer = Describer()
      sgraph = view.from_tofu_graph(graph, describer)
      for k in map(int, FLAGS.ks):
        cases += 1
        plans = {p: api.plan_view(sgraph, k, p, describer=describer, never_worse=True)
                 for p in planners.PLANNERS}
        recursion = api.plan_view(sgraph, k, describer=describer).total_bytes
        tofu = plans["tofu"].total_bytes
        rivals = {p: plans[p].total_bytes for p in planners.CUT_ONLY}
        lost += any(b < tofu for b in rivals.values())
        best = min(rivals, key=lambda p: (rivals[p], p))
        improved = any(n.startswith("exact improvement pass") for n in plans["tofu"].notes)
        beaten += rivals[best] < recursion
        below += tofu < min(recursion, rivals[best])
        if rivals[best] < recursion or tofu < min(recursion, rivals[best]):
          line = (f"| {key} | {flavor} | {k} | {recursion:,} | {best} {rivals[best]:,} | "
                  f"{recursion / rivals[best]:.3f} | {tofu:,} ({plans['tofu'].found_by}"
                  f"{', improved' if improved else ''}) |")
          rows.append(line)
          print(line, flush=True)
  seconds = time.perf_counter() - start
  print(f"{beaten} of {cases} cases where a cut-only baseline beats tofu's recursion; "
        f"{lost} where one beats tofu's plan; {below} where tofu's plan beats the recursion "
        f"and every baseline ({seconds:.0f} s)")
  if FLAGS.write:
    body = (f"Every tiny zoo model (plain TF and Keras, Adam), k in {', '.join(FLAGS.ks)}, every "
            f"planner; bytes per step counted exactly.  A cut-only baseline (allrow, spartan, "
            f"equalchop, megatron) moves fewer bytes than tofu's recursion (each level exact, "
            f"the levels solved in turn) in **{beaten} of {cases} cases**; tofu's plan (the "
            f"recursion's or a baseline's, whichever moves fewer bytes, then the exact "
            f"improvement pass: `never_worse=True`) moves more than some cut-only baseline in "
            f"**{lost} of {cases}** cases, and fewer than the recursion and every baseline in "
            f"**{below} of {cases}** (\"improved\"). Listed: the cases where a baseline beats "
            f"the recursion or tofu's plan beats them all:\n\n"
            "| model | flavor | k | recursion bytes | best cut-only baseline | recursion / "
            "baseline | tofu's plan (found by) |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    benchdoc.write_section("tofu against the baselines on the tiny zoo",
                           " ".join(["python tools/bench_baselines.py", *sys.argv[1:]]), body)
  return 0


if __name__ == "__main__":
  app.run(main)
