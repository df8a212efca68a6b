"""``tofu demo``: one zoo training step partitioned across logical devices, end to end.

    tofu demo                                   # GPT-style decoder, Adam, 8 logical CPU devices
    tofu demo --model=wresnet --size=tiny --k=4 --steps=2

What it does, in order, printing as it goes:

1. splits the CPU into ``--k`` logical devices (before TensorFlow starts);
2. builds the model (``tf_tofu.models``), traces its training step;
3. plans it with ``tofu`` and with every baseline: predicted bytes per step,
   and each baseline's bytes against tofu's;
4. rewrites the tofu plan (``tf_tofu.function``): the plan report, and the
   estimated peak memory of every device against the ideal (single device / k);
5. writes the coarsened graph with its layouts and bytes (``--out_dir``:
   ``plan.dot``, plus SVG/PNG when Graphviz is installed) and the plan JSON;
6. trains ``--steps`` steps partitioned and the same steps unpartitioned from
   the same initial values, and prints both losses;
7. ends with a summary: bytes, memory, and whether the losses match.
"""

from __future__ import annotations

import os
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "gpt", ["mlp", "wresnet", "lstm", "gpt"], "Zoo model family.")
flags.DEFINE_enum("size", "demo", ["demo", "tiny"], "'demo': sized to be interesting on a "
                  "laptop; 'tiny': the test sizes.")
flags.DEFINE_integer("k", 8, "Number of (logical) devices.", lower_bound=1)
flags.DEFINE_integer("steps", 3, "Training steps to compare.", lower_bound=1)
flags.DEFINE_enum("optimizer", "adam", ["sgd", "adam"], "Optimizer.")
flags.DEFINE_enum("flavor", "tf", ["tf", "keras"], "Plain TF variables and ops, or Keras 3.")
flags.DEFINE_enum("comm", "plain", ["plain", "collective"], "Communication form.")
flags.DEFINE_string("out_dir", "tofu_demo", "Where the plan JSON and pictures go ('' for none).")

# Big enough that partitioning matters, small enough to train in seconds on a laptop CPU.
DEMO_SIZES = {
    "mlp": dict(depth=4, width=512, batch=64, in_dim=256, classes=10),
    "wresnet": dict(depth=50, blocks=(1, 1, 1, 1), width=2, batch=8, image=32, classes=10),
    "lstm": dict(layers=2, hidden=256, steps=8, batch=16, vocab=1000),
    "gpt": dict(layers=2, d_model=256, heads=8, seq=64, vocab=2000, batch=8, tied=True),
}
LOSS_RTOL = 1e-4


def main(argv) -> int:
  del argv
  from tf_tofu.core import devices
  devices.split_cpu(FLAGS.k)
  import tf_tofu
  from tf_tofu import models
  from tf_tofu.cli import pictures
  from tf_tofu.core.plan import human_bytes
  from tf_tofu.search import planners

  sizes = DEMO_SIZES[FLAGS.model] if FLAGS.size == "demo" else models.TINY[FLAGS.model]
  step = models.build(FLAGS.model, flavor=FLAGS.flavor, optimizer=FLAGS.optimizer, **sizes)
  print(f"model: {step.name}, {step.weight_bytes() / 2**20:.1f} MiB of weights")
  inputs = [step.example_inputs(seed=i) for i in range(FLAGS.steps)]
  fn = tf_tofu.function(step.fn, devices=FLAGS.k, comm=FLAGS.comm)
  start = time.perf_counter()
  graph, sgraph = fn.traced(*inputs[0])
  plan = fn.plan(*inputs[0])
  mem = fn.memory(*inputs[0])
  print(f"traced, planned, rewritten and sized in {time.perf_counter() - start:.1f} s: "
        f"{len(graph.ops)} ops -> {len(fn.partitioned(*inputs[0]).graph_def.node)} nodes on "
        f"{FLAGS.k} devices\n")
  print(plan.report(top=8, memory=mem))

  print(f"\nbytes per step across {FLAGS.k} devices:")
  others = {}
  for planner in sorted(planners.PLANNERS):
    if planner != "tofu":
      others[planner] = tf_tofu.plan(graph, devices=FLAGS.k, planner=planner,
                                     describer=fn.describer).total_bytes
  print(f"  {'tofu':<10} {human_bytes(plan.total_bytes):>12}")
  for planner, b in others.items():
    ratio = b / plan.total_bytes if plan.total_bytes else float("inf")
    print(f"  {planner:<10} {human_bytes(b):>12}   {ratio:6.2f}x tofu's")

  print(f"\nestimated peak memory per device (single device {human_bytes(mem['single_device'])}, "
        f"ideal {human_bytes(mem['ideal'])}):")
  for dev, b in mem["per_device"].items():
    print(f"  {dev:<40} {human_bytes(b):>12}  (of it shards and constants "
          f"{human_bytes(mem['persistent'][dev])})")

  if FLAGS.out_dir:
    os.makedirs(FLAGS.out_dir, exist_ok=True)
    with open(os.path.join(FLAGS.out_dir, "plan.json"), "w") as f:
      f.write(plan.to_json())
    drawing = pictures.write_dot(os.path.join(FLAGS.out_dir, "plan.dot"), sgraph, plan,
                                 fn.describer)
    print(f"\nwrote {os.path.join(FLAGS.out_dir, 'plan.json')}, {', '.join(drawing.written)}")
    for note in drawing.notes:
      print(note)

  print(f"\ntraining {FLAGS.steps} steps, partitioned and unpartitioned, from the same values:")
  loss_err, var_err = _train_both(fn, step.fn, graph, inputs)
  match = loss_err <= LOSS_RTOL
  best = min(others.items(), key=lambda kv: kv[1]) if others else ("-", 0)
  print("\ndemo summary:")
  print(f"  {step.name} on {FLAGS.k} devices: tofu moves {human_bytes(plan.total_bytes)} per step; "
        f"the best baseline ({best[0]}) {human_bytes(best[1])}"
        + (f" ({best[1] / plan.total_bytes:.2f}x)" if plan.total_bytes else ""))
  print(f"  worst device peak {human_bytes(mem['worst'])} = {mem['ratio']:.2f}x the ideal "
        f"{human_bytes(mem['ideal'])}")
  print(f"  losses {'match' if match else 'DIFFER'}: largest relative difference {loss_err:.1e} "
        f"over {FLAGS.steps} steps (variables {var_err:.1e})")
  return 0 if match else 1


def _train_both(fn, original, graph, inputs) -> tuple[float, float]:
  """Trains ``inputs`` partitioned (``fn``) and unpartitioned (``original``) from the same
  values; prints both losses per step; returns the largest relative difference of the
  losses and of the variables."""
  import numpy as np
  initial = graph.variable_values()
  start = time.perf_counter()
  part = [float(fn(*xs)) for xs in inputs]
  part_s = time.perf_counter() - start
  fn.sync_variables()
  trained = graph.variable_values()
  graph.assign_variables(initial)
  start = time.perf_counter()
  ref = [float(original(*xs)) for xs in inputs]
  ref_s = time.perf_counter() - start
  reference = graph.variable_values()
  for i, (a, b) in enumerate(zip(part, ref)):
    print(f"  step {i + 1}: partitioned {a:.6f}   unpartitioned {b:.6f}")
  print(f"  ({part_s:.1f} s partitioned including the first call's setup, {ref_s:.1f} s "
        "unpartitioned)")
  loss_err = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(part, ref))
  var_err = max((float(np.max(np.abs(trained[h] - reference[h])) /
                 max(float(np.max(np.abs(reference[h]))), 1e-30))
                 for h in reference if reference[h].size), default=0.0)
  return loss_err, var_err


if __name__ == "__main__":
  app.run(main)
