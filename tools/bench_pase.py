"""Planning time against PaSE's, on PaSE's five models and device counts.

    python tools/bench_pase.py                          # writes docs/benchmarks.md
    python tools/bench_pase.py --models=alexnet --ps=4,8 --nowrite

PaSE (a DP over a layer graph of about 200 vertices) is the one peer planner
that runs on CPU.  Its seconds below are the ones measured when the issue
"The partitioner, finished" was filed, on this kind of machine (2 cores);
they are constants of this tool, not re-measured.  Ours: the view of the traced
step and ``api.plan_view`` on it, cold for every p (a new Describer: describing
the ops and deriving their strategies are counted, no cache from another p);
tracing excluded, as PaSE's time excludes building its graph; no memory
estimate; tofu planner.  Each cell is the fastest of ``--repeats`` cold runs
(three runs of one cell differed by up to 1.4x on a 2-core machine), each
started after ``gc.collect()``, so that the garbage of the run before is not
billed to it.  Each model is planned in a process of its own, as a user plans
one model: planned one after another in one process, later models ran slower
(AlexNet at p=8: 0.76-0.81 s alone, 1.27 s after the other four).  Our graph
is TensorFlow's op graph of the training step (forward, gradients, optimizer
update), several times finer than PaSE's layer graph.  The *reading* column is
the part of every cell spent reading the graph into the view
(``zoo_graphs.cold_run``: every op described, before any level is searched; the
fastest of all the model's runs); it grows with the op count whatever the search
does.

The models, at PaSE's batch sizes:

* ``transformer``: PaSE's Transformer has 6 encoder and 6 decoder layers,
  d = 512; ours is the zoo's 12-layer decoder-only GPT at d = 512, 8 heads,
  seq 256, vocab 32,000, batch 64 (plain TF, Adam): the same depth and width.
* ``resnet101``, ``inceptionv3``: ``keras.applications`` ResNet101 (224 x 224)
  and InceptionV3 (299 x 299), batch 128, Keras Adam.
* ``alexnet``: AlexNet as Keras layers (224 x 224), batch 128, Keras Adam.
* ``rnnlm``: the zoo's 2-layer LSTM language model, hidden 2048, 256 steps,
  vocab 100,000, batch 64 (``zoo_graphs.RNNLM256``).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402
from zoo_graphs import cold_run, pase_step  # noqa: E402

PS = (4, 8, 16, 32, 64)
# PaSE's planning seconds per p (None: PaSE ran out of memory), from the issue.
PASE = {
    "transformer": (2.2, 6.4, 37.0, 227.0, None),
    "resnet101": (5.7, 6.2, 12.2, 33.4, 99.1),
    "inceptionv3": (2.7, 3.1, 4.9, 13.5, 32.6),
    "alexnet": (0.2, 0.2, 0.2, 0.2, 0.2),   # "< 0.2 s": an upper bound
    "rnnlm": (0.1, 0.1, 0.1, 0.1, 0.1),     # "< 0.1 s": an upper bound
}
UPPER_BOUNDS = ("alexnet", "rnnlm")

FLAGS = flags.FLAGS
flags.DEFINE_list("models", list(PASE), "Models to plan.")
flags.DEFINE_list("ps", [str(p) for p in PS], "Device counts.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")
flags.DEFINE_integer("repeats", 3, "Cold runs per cell; the fastest is reported.",
                     lower_bound=1)
flags.DEFINE_string("row_to", None, "Plan the one model of --models in this process and "
                    "write its table row to this file (how the tool runs each model).")


def _cell(ours: float, pase) -> str:
  if pase is None:
    return f"{ours:.1f} vs out of memory"
  return f"{ours:.1f} vs {pase:g} ({ours / pase:.3g}x)"


def _row(name: str, ps) -> str:
  """Plans ``name`` at every p of ``ps`` in this process; its table row."""
  import tf_tofu
  step = pase_step(name)
  with step.context():
    graph = tf_tofu.trace(step.fn, *step.input_signature)
  cells = []
  readings = []
  for p in ps:
    runs = []
    for _ in range(FLAGS.repeats):
      run = cold_run(graph, p)
      plan = run.plan
      runs.append(run.seconds)
      readings.append(run.reading)
    secs = min(runs)
    pase = PASE[name][PS.index(p)] if p in PS else None
    print(f"{name} ({len(graph.ops):,} ops) p={p}: {secs:.2f} s (runs "
          f"{', '.join(f'{r:.2f}' for r in runs)}; PaSE {pase}), "
          f"{plan.total_bytes:,} B, proven optimal per level: {plan.proven_optimal}",
          flush=True)
    cells.append(_cell(secs, pase))
  reading = min(readings)
  print(f"{name} ({len(graph.ops):,} ops): reading the graph {reading:.2f} s", flush=True)
  bound = " (PaSE: an upper bound)" if name in UPPER_BOUNDS else ""
  return (f"| {name}{bound} | {len(graph.ops):,} | {reading:.2f} | " + " | ".join(cells)
          + " |")


def main(argv):
  del argv
  ps = [int(p) for p in FLAGS.ps]
  if FLAGS.row_to:
    (name,) = FLAGS.models
    with open(FLAGS.row_to, "w") as f:
      f.write(_row(name, ps))
    return 0
  # Each model in a process of its own (module docstring).
  rows = [benchdoc.run_in_own_process(__file__, [f"--models={name}", f"--ps={','.join(FLAGS.ps)}",
                                                 f"--repeats={FLAGS.repeats}"], "row_to")
          for name in FLAGS.models]
  if FLAGS.write:
    body = (f"Planning seconds (tofu, each p cold, the fastest of {FLAGS.repeats} runs, tracing "
            "excluded) vs PaSE's, with the ratio "
            "ours / PaSE's (below 1: faster).  PaSE's seconds are the issue's measurements "
            "on a 2-core machine, not re-measured; ours are measured on the machine named "
            "above, so a ratio also carries the two machines' difference.  See the tool's "
            "docstring for the models.  *Reading* is the part of our every cell spent "
            "reading the traced graph into the search's view (every op described, no "
            "search; the fastest of the runs): a floor of planning at op granularity.  "
            "Where it alone exceeds PaSE's whole time, no search at op granularity "
            "reaches PaSE's.\n\n"
            "| model | ops (ours) | reading (s) | " + " | ".join(f"p={p}" for p in ps)
            + " |\n|---|---|---|" + "---|" * len(ps) + "\n" + "\n".join(rows))
    benchdoc.write_section("planning time against PaSE",
                           " ".join(["python tools/bench_pase.py", *sys.argv[1:]]), body)
  return 0


if __name__ == "__main__":
  app.run(main)
