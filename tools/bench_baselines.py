"""Where a baseline's plan moves fewer bytes than tofu's: every tiny zoo model, k = 2..8.

    python tools/bench_baselines.py                 # writes docs/benchmarks.md
    python tools/bench_baselines.py --ks=2,4 --nowrite

Each level of tofu's search is exact (docs/method.md section 7), but the
levels are solved one after the other, so a baseline that plans the same
levels differently can end up cheaper in total.  This tool plans every tiny
zoo model (plain TF and Keras, Adam) with every planner at every k and lists
the cases where some baseline's exactly counted bytes are below tofu's.
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
  rows, cases = [], 0
  for key in sorted(models.TINY):
    for flavor in models.FLAVORS:
      step = models.tiny(key, flavor=flavor, optimizer="adam")
      with step.context():
        graph = api.as_graph(step.fn, step.input_signature)
      describer = Describer()
      sgraph = view.from_tofu_graph(graph, describer)
      for k in map(int, FLAGS.ks):
        cases += 1
        total = {p: api.plan_view(sgraph, k, p, describer=describer).total_bytes
                 for p in planners.PLANNERS}
        better = {p: b for p, b in total.items() if p != "tofu" and b < total["tofu"]}
        if better:
          best = min(better, key=lambda p: (better[p], p))
          line = (f"| {key} | {flavor} | {k} | {total['tofu']:,} | {best} {better[best]:,} | "
                  f"{total['tofu'] / better[best]:.3f} |")
          rows.append(line)
          print(line, flush=True)
  seconds = time.perf_counter() - start
  print(f"{len(rows)} of {cases} cases where a baseline moves fewer bytes ({seconds:.0f} s)")
  if FLAGS.write:
    body = (f"Every tiny zoo model (plain TF and Keras, Adam), k in {', '.join(FLAGS.ks)}, every "
            f"planner; bytes per step counted exactly.  **{len(rows)} of {cases} cases** where "
            "a baseline's plan moves fewer bytes than tofu's (each level of tofu's search is "
            "exact, the levels are solved in turn):\n\n"
            "| model | flavor | k | tofu bytes | best baseline | tofu / baseline |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows))
    benchdoc.write_section("tofu against the baselines on the tiny zoo",
                           " ".join(["python tools/bench_baselines.py", *sys.argv[1:]]), body)
  return 0


if __name__ == "__main__":
  app.run(main)
