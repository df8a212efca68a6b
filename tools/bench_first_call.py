"""Where the time to the first partitioned step goes, phase by phase.

    python tools/bench_first_call.py                     # the three cases below
    python tools/bench_first_call.py --cases=mobilenetv2 --nowrite

Each case builds a training step, wraps it in ``tf_tofu.function`` on k
logical CPU devices and times the first call (what a user waits for) by the
phases the library reports (``tf_tofu.core.progress.record``): tracing,
describing the ops, planning, rewriting, creating the shards and importing
the partitioned graph, and the first run (TensorFlow's Grappler optimises the
imported function, then the step runs).  The memory estimate is not part of a
call (``Function.memory`` makes it on request) and is timed after it.  The
step time is the median of later calls.  Target (issue "Keras 3 users
first"): MobileNetV2's first call at k = 4 under 20 s.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402

CASES = {
    # name: (what it is, builder arguments, k)
    "mobilenetv2": ("Keras MobileNetV2 (alpha 0.35, 32x32), batch 8, Adam, float32",
                    ("keras", "MobileNetV2", 8, "adam"), 4),
    "resnet50": ("Keras ResNet50 (32x32), batch 8, Adam, float32",
                 ("keras", "ResNet50", 8, "adam"), 4),
    "gpt12": ("GPT, 12 layers, d=128, 4 heads, seq 32, vocab 512, batch 8, Keras layers, Adam, "
              "float32", ("gpt", 12, 128, 4, 32, 512, 8), 8),
}
PHASES = (("trace", "tracing the step"), ("describe", "describing"), ("plan", "planning"),
          ("rewrite", "rewriting"), ("shards + import", "creating shards and importing"),
          ("first run", "first run"))
TARGET_S = 20.0

FLAGS = flags.FLAGS
flags.DEFINE_list("cases", list(CASES), f"Cases to time: {', '.join(CASES)}.")
flags.DEFINE_integer("steps", 5, "Later calls timed for the step time.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")


def _build(args):
  if args[0] == "keras":
    from tf_tofu.models import keras_catalog
    _, name, batch, optimizer = args
    return keras_catalog.build(name, optimizer, "float32", batch=batch)
  from tf_tofu.models import gpt
  _, layers, d_model, heads, seq, vocab, batch = args
  return gpt.build(layers, d_model, heads, seq, vocab, batch, flavor="keras", optimizer="adam")


def _seconds(timings, prefix: str) -> float:
  return sum(t.seconds for t in timings if t.depth == 0 and t.name.startswith(prefix))


def time_case(name: str) -> dict:
  """The phases of the first call of case ``name``, the memory estimate and the step time."""
  import tf_tofu
  from tf_tofu.core import progress
  what, args, k = CASES[name]
  step = _build(args)
  inputs = step.example_inputs(0)
  f = tf_tofu.function(step.fn, devices=k)
  with progress.record() as timings:
    start = time.perf_counter()
    f(*inputs)
    total = time.perf_counter() - start
  row = {"case": name, "what": what, "k": k, "total": total,
         "ops": len(f.traced(*inputs)[0].ops),
         "nodes": len(f.partitioned(*inputs).graph_def.node)}
  row.update({col: _seconds(timings, prefix) for col, prefix in PHASES})
  row["other"] = total - sum(row[col] for col, _ in PHASES)
  start = time.perf_counter()
  f.memory(*inputs)
  row["memory"] = time.perf_counter() - start
  steps = []
  for _ in range(FLAGS.steps):
    start = time.perf_counter()
    f(*inputs)
    steps.append(time.perf_counter() - start)
  row["step"] = statistics.median(steps)
  return row


def _line(r: dict) -> str:
  phases = " | ".join(f"{r[col]:.1f}" for col, _ in PHASES)
  return (f"| {r['case']} | {r['k']} | {r['ops']:,} | {r['nodes']:,} | {phases} | "
          f"{r['other']:.1f} | **{r['total']:.1f}** | {r['memory']:.1f} | "
          f"{r['step'] * 1e3:.0f} |")


def main(argv):
  del argv
  from tf_tofu.core import devices
  devices.split_cpu(8)
  rows = []
  for name in FLAGS.cases:
    r = time_case(name)
    print(f"{name}: first call {r['total']:.1f} s (" + ", ".join(
        f"{col} {r[col]:.1f}" for col, _ in PHASES) + f", other {r['other']:.1f}); memory "
          f"estimate {r['memory']:.1f} s; step {r['step'] * 1e3:.0f} ms", flush=True)
    rows.append(r)
  if FLAGS.write:
    cases = "".join(f"\n- {r['case']}: {r['what']}, k = {r['k']}." for r in rows)
    body = ("The first call of `tf_tofu.function(step, devices=k)` on logical CPU devices, by "
            "phase (seconds, from the phases the library reports): trace = the step traced "
            "and ingested; describe = every op's description and the search's view; plan = "
            "the search; rewrite = the partitioned GraphDef; shards + import = the shard "
            "variables made and the GraphDef imported as a function; first run = TensorFlow's "
            "Grappler optimising the imported function, then the step; other = the rest of the "
            "call.  The memory estimate (`Function.memory`) is made on request, not by a call; "
            "step = the median of later calls.  Ops = ops of the traced step; nodes = nodes of "
            f"the partitioned graph.  Target: MobileNetV2 under {TARGET_S:.0f} s.\n"
            f"{cases}\n\n"
            "| case | k | ops | nodes | " + " | ".join(col for col, _ in PHASES) +
            " | other | first call | memory estimate | step ms |\n"
            "|---|---|---|---|" + "---|" * len(PHASES) + "---|---|---|---|\n" +
            "\n".join(_line(r) for r in rows))
    benchdoc.write_section("time to the first step",
                           " ".join(["python tools/bench_first_call.py", *sys.argv[1:]]), body)
  return 0


if __name__ == "__main__":
  app.run(main)
