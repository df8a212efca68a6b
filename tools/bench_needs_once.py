"""Shared needs priced once (``needs_once=True``) against the default, per op group.

    python tools/bench_needs_once.py                    # writes docs/benchmarks.md
    python tools/bench_needs_once.py --models=alexnet --random_steps=20 --nowrite

By default a level's objective pays a conversion that several op groups need
alike (the same boxes of one tensor on every worker) once per op group; the
rewrite sends it once.  ``needs_once`` gives each such need a variable of its
own, so that each level is solved on its exact bytes, unless that makes the
level too wide for the exact DP, when the level is priced per op group again
(docs/method.md section 7, "Shared needs").  This tool measures what that buys
and costs, planning tofu's recursion both ways:

* every tiny zoo model (plain TF and Keras, Adam) at every k of ``--ks``: the
  exactly counted bytes, and how many levels were priced once;
* the fuzzer's first ``--random_steps`` random float64 training steps
  (``tf_tofu.verify.random_steps``, hypothesis seed ``--seed``, each with its
  own k in 2..8), also against the best cut-only baseline;
* PaSE's five models at ``--ps`` (``tools/bench_pase.py``): bytes and planning
  seconds (one cold run each, each model in a process of its own, trace
  excluded).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402
from zoo_graphs import cold_plan, pase_step, tiny_zoo_views  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("ks", ["2", "3", "4", "5", "6", "8"], "Device counts for the tiny zoo.")
flags.DEFINE_integer("random_steps", 100, "Random training steps to plan (0: none).",
                     lower_bound=0)
flags.DEFINE_integer("seed", 0, "Hypothesis seed of the random steps.")
flags.DEFINE_list("models", ["transformer", "resnet101", "inceptionv3", "alexnet", "rnnlm"],
                  "PaSE's models to plan (none: an empty list).")
flags.DEFINE_list("ps", ["8"], "Device counts for PaSE's models.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")
flags.DEFINE_string("row_to", None, "Plan the one model of --models in this process and "
                    "write its table rows to this file (how the tool runs each model).")


def _once_levels(plan) -> str:
  """``"j/L"``: of the plan's L levels, j priced shared needs once."""
  return f"{sum(lvl['needs'] == 'once' for lvl in plan.level_search)}/{len(plan.level_search)}"


def _compare(pairs) -> str:
  """"fewer bytes in a, more in b, equal in c of n; from x% to y%" for (default, once)
  byte pairs."""
  lower = sum(o < d for d, o in pairs)
  higher = sum(o > d for d, o in pairs)
  change = [100.0 * (o - d) / d for d, o in pairs if d]
  spread = f"; from {min(change):+.1f}% to {max(change):+.1f}%" if change else ""
  return (f"fewer bytes in **{lower}**, more in **{higher}**, equal in "
          f"**{len(pairs) - lower - higher}** of {len(pairs)}{spread}")


def tiny_zoo() -> tuple[str, list]:
  """The tiny zoo part: its text and the (default, once) byte pairs."""
  from tf_tofu import api
  pairs, once_levels, all_levels, lines = [], 0, 0, []
  for key, flavor, sgraph, describer in tiny_zoo_views():
    row = []
    for k in map(int, FLAGS.ks):
      default = api.plan_view(sgraph, k, describer=describer, memory=False)
      once = api.plan_view(sgraph, k, describer=describer, memory=False, needs_once=True)
      pairs.append((default.total_bytes, once.total_bytes))
      once_levels += sum(lvl["needs"] == "once" for lvl in once.level_search)
      all_levels += len(once.level_search)
      row.append(f"{default.total_bytes:,} / {once.total_bytes:,} ({_once_levels(once)})")
    lines.append(f"| {key} | {flavor} | " + " | ".join(row) + " |")
    print(lines[-1], flush=True)
  head = ("| model | flavor | " + " | ".join(f"k={k}" for k in FLAGS.ks) + " |\n|---|---|"
          + "---|" * len(FLAGS.ks) + "\n")
  text = (f"Tiny zoo (Adam), tofu's recursion, bytes per step default / needs_once (levels "
          f"priced once / levels): {_compare(pairs)}; {once_levels} of {all_levels} levels "
          f"priced once, the others too wide for it.\n\n" + head + "\n".join(lines))
  return text, pairs


def random_steps(examples: int, seed: int) -> str:
  """The random steps part: planned both ways and by every cut-only baseline."""
  import dataclasses
  from hypothesis import HealthCheck, Phase, given, settings
  from hypothesis import seed as hypothesis_seed
  import tf_tofu
  from tf_tofu.search import planners
  from tf_tofu.verify import random_steps as steps
  pairs, beaten, beaten_once, one_level = [], [0], [0], [0]

  @hypothesis_seed(seed)
  @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
            suppress_health_check=list(HealthCheck))
  @given(steps.step_specs())
  def one(spec):
    spec = dataclasses.replace(spec, planner="tofu")
    fn, inputs, _ = steps.build_step(spec)
    graph = tf_tofu.trace(fn, *inputs[0])
    default = tf_tofu.plan(graph, devices=spec.k, memory=False)
    once = tf_tofu.plan(graph, devices=spec.k, memory=False, needs_once=True)
    best = min(tf_tofu.plan(graph, devices=spec.k, planner=p, memory=False).total_bytes
               for p in planners.CUT_ONLY)
    pairs.append((default.total_bytes, once.total_bytes))
    beaten[0] += best < default.total_bytes
    beaten_once[0] += best < once.total_bytes
    one_level[0] += (len(once.factors) == 1 and once.level_search[0]["needs"] == "once"
                     and best < once.total_bytes)

  one()
  return (f"The first {len(pairs)} random training steps of the fuzzer (seed {seed}, k in "
          f"2..8), needs_once against the default: {_compare(pairs)}. The best cut-only "
          f"baseline moves fewer bytes than the recursion in **{beaten[0]}** of them by "
          f"default and in **{beaten_once[0]}** with needs_once, **{one_level[0]}** of those "
          f"at a single level priced once.")


def model_rows(name: str) -> str:
  """One of PaSE's models at every p of ``--ps``, planned both ways: its table rows."""
  import tf_tofu
  step = pase_step(name)
  with step.context():
    graph = tf_tofu.trace(step.fn, *step.input_signature)
  lines = []
  for p in map(int, FLAGS.ps):
    default, t_default = cold_plan(graph, p)
    once, t_once = cold_plan(graph, p, needs_once=True)
    change = 100.0 * (once.total_bytes - default.total_bytes) / default.total_bytes
    lines.append(f"| {name} | {len(graph.ops):,} | {p} | {default.total_bytes:,} | "
                 f"{once.total_bytes:,} ({change:+.3f}%) | {_once_levels(once)} | "
                 f"{t_default:.2f} | {t_once:.2f} |")
    print(lines[-1], flush=True)
  return "\n".join(lines)


def pase_models() -> str:
  """PaSE's models at ``--ps``, each planned in a process of its own (as
  ``tools/bench_pase.py`` does: later models ran slower in a shared one)."""
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name in FLAGS.models:
      row_file = os.path.join(tmp, name)
      subprocess.run([sys.executable, os.path.abspath(__file__), f"--models={name}",
                      f"--ps={','.join(FLAGS.ps)}", "--nowrite", f"--row_to={row_file}"],
                     check=True)
      with open(row_file) as f:
        rows.append(f.read())
  return ("PaSE's models (one cold run each, each model in a process of its own, trace "
          "excluded):\n\n"
          "| model | ops | p | bytes, default | bytes, needs_once | levels priced once | "
          "seconds, default | seconds, needs_once |\n|---|---|---|---|---|---|---|---|\n"
          + "\n".join(rows))


def main(argv):
  del argv
  if FLAGS.row_to:
    (name,) = FLAGS.models
    with open(FLAGS.row_to, "w") as f:
      f.write(model_rows(name))
    return 0
  from tf_tofu.core import devices
  devices.split_cpu(8)  # the random steps ask for up to 8 devices
  parts = [tiny_zoo()[0]]
  if FLAGS.random_steps:
    parts.append(random_steps(FLAGS.random_steps, FLAGS.seed))
    print(parts[-1], flush=True)
  if FLAGS.models:
    parts.append(pase_models())
  if FLAGS.write:
    benchdoc.write_section("shared needs priced once (needs_once)",
                           " ".join(["python tools/bench_needs_once.py", *sys.argv[1:]]),
                           "\n\n".join(parts))
  return 0


if __name__ == "__main__":
  app.run(main)
