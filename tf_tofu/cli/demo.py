"""``tofu demo``: one zoo training step partitioned across logical devices, end to end.

    tofu demo                                   # GPT-style decoder, Adam, 8 logical CPU devices
    tofu demo --model=wresnet --size=tiny --k=4 --steps=2
    tofu demo --cluster=local:2x2               # across 2 local server processes, 2 CPUs each
    TF_CONFIG=... tofu demo --cluster=TF_CONFIG --k=8   # a running cluster (docs/cluster.md)

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
7. ends with a summary: bytes, memory, the memory-budget trade-off (bytes per
   step at three per-device budgets: the fully partitioned peak, between it
   and a whole copy, unlimited; ``memory_budget``), and whether the losses match.
"""

from __future__ import annotations

import os
import time

from absl import app, flags

from tf_tofu.cli import shared_flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "gpt", ["mlp", "wresnet", "lstm", "gpt"], "Zoo model family.")
flags.DEFINE_enum("size", "demo", ["demo", "tiny"], "'demo': sized to be interesting on a "
                  "laptop; 'tiny': the test sizes.")
flags.DEFINE_integer("k", 8, "Number of (logical) devices.", lower_bound=1)
flags.DEFINE_integer("steps", 3, "Training steps to compare.", lower_bound=1)
flags.DEFINE_enum("optimizer", "adam", ["sgd", "adam"], "Optimizer.")
flags.DEFINE_enum("flavor", "tf", ["tf", "keras"], "Plain TF variables and ops, or Keras 3.")
flags.DEFINE_string("cluster", "", "Run across a TensorFlow cluster: 'local:TxD' starts T "
                    "server processes on this machine with D CPU devices each; 'TF_CONFIG' (the "
                    "environment variable) or a TF_CONFIG JSON file names running servers, "
                    "--k devices spread evenly over their tasks (--cluster_device_type).")
flags.DEFINE_string("cluster_device_type", "CPU", "With --cluster=TF_CONFIG or a file: the "
                    "device type of the servers (CPU, GPU).")
OUT_DIR = "tofu_demo"  # --out_dir's default here

# Big enough that partitioning matters, small enough to train in seconds on a laptop CPU.
DEMO_SIZES = {
    "mlp": dict(depth=4, width=512, batch=64, in_dim=256, classes=10),
    "wresnet": dict(depth=50, blocks=(1, 1, 1, 1), width=2, batch=8, image=32, classes=10),
    "lstm": dict(layers=2, hidden=256, steps=8, batch=16, vocab=1000),
    "gpt": dict(layers=2, d_model=256, heads=8, seq=64, vocab=2000, batch=8, tied=True),
}
LOSS_RTOL = 1e-4


def main(argv) -> int:
  if FLAGS.cluster.startswith("local:"):
    from tf_tofu.core import local_cluster
    tasks, per_task = _local_shape(FLAGS.cluster)
    FLAGS.k = tasks * per_task
    print(f"starting {tasks} TensorFlow servers on this machine, {per_task} CPU devices each")
    with local_cluster.LocalCluster(tasks, per_task) as servers:
      print(f"servers up at {', '.join(servers.addresses)}")
      return _demo(argv, servers.cluster_spec, per_task, "CPU")
  if FLAGS.cluster:
    from tf_tofu.core import cluster
    text = None if FLAGS.cluster == "TF_CONFIG" else open(FLAGS.cluster).read()
    spec = cluster.cluster_spec_of(text)
    tasks = sum(spec.num_tasks(j) for j in cluster.compute_jobs(spec))
    if FLAGS.k % tasks:
      raise app.UsageError(f"--k={FLAGS.k} devices do not spread evenly over the cluster's "
                           f"{tasks} tasks; pass a multiple of {tasks}")
    return _demo(argv, spec, FLAGS.k // tasks, FLAGS.cluster_device_type.upper())
  return _demo(argv)


def _local_shape(value: str) -> tuple[int, int]:
  """``"local:2x2"`` -> ``(2, 2)``: tasks x devices per task."""
  tasks, sep, per_task = value[len("local:"):].partition("x")
  if not (sep and tasks.isdigit() and per_task.isdigit() and int(tasks) and int(per_task)):
    raise app.UsageError(f"--cluster={value!r}: write local:TxD, e.g. local:2x2 (T server "
                         "processes with D CPU devices each)")
  return int(tasks), int(per_task)


def _demo(argv, spec=None, per_task: int = 0, device_type: str = "CPU") -> int:
  """The demo (module docstring); with ``spec``, on that cluster's devices (this process
  connects to it first, before any variable exists)."""
  del argv
  from tf_tofu.core import devices
  target = FLAGS.k
  if spec is None:
    devices.split_cpu(FLAGS.k)
  else:
    from tf_tofu.core import cluster
    cluster.connect(spec, timeout_s=60)
    target = cluster.ClusterDevices(spec, per_task, device_type).names()
    print(f"connected: {len(target)} devices, {', '.join(target)}")
  import tf_tofu
  from tf_tofu import models
  from tf_tofu.cli import pictures
  from tf_tofu.core.plan import human_bytes
  from tf_tofu.search import planners

  sizes = DEMO_SIZES[FLAGS.model] if FLAGS.size == "demo" else models.TINY[FLAGS.model]
  step = models.build(FLAGS.model, flavor=FLAGS.flavor, optimizer=FLAGS.optimizer, **sizes)
  print(f"model: {step.name}, {step.weight_bytes() / 2**20:.1f} MiB of weights")
  inputs = [step.example_inputs(seed=i) for i in range(FLAGS.steps)]
  fn = tf_tofu.function(step.fn, devices=target, comm=FLAGS.comm)
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
      others[planner] = tf_tofu.plan(graph, devices=target, planner=planner,
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

  out_dir = shared_flags.out_dir(OUT_DIR)
  if out_dir:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "plan.json"), "w") as f:
      f.write(plan.to_json())
    drawing = pictures.write_dot(os.path.join(out_dir, "plan.dot"), sgraph, plan,
                                 fn.describer)
    print(f"\nwrote {os.path.join(out_dir, 'plan.json')}, {', '.join(drawing.written)}")
    for note in drawing.notes:
      print(note)

  trade = _trade_off(sgraph, fn.describer, plan)

  print(f"\ntraining {FLAGS.steps} steps, partitioned and unpartitioned, from the same values:")
  loss_err, var_err, worst_var = _train_both(fn, step.fn, graph, inputs)
  match = loss_err <= LOSS_RTOL
  best = min(others.items(), key=lambda kv: kv[1]) if others else ("-", 0)
  print("\ndemo summary:")
  print(f"  {step.name} on {FLAGS.k} devices: tofu moves {human_bytes(plan.total_bytes)} per step; "
        f"the best baseline ({best[0]}) {human_bytes(best[1])}"
        + (f" ({best[1] / plan.total_bytes:.2f}x)" if plan.total_bytes else ""))
  print(f"  worst device peak {human_bytes(mem['worst'])} = {mem['ratio']:.2f}x the ideal "
        f"{human_bytes(mem['ideal'])}")
  print(_link_line(fn, plan, inputs[0], counted=spec is not None))
  for line in trade:
    print(line)
  print(f"  losses {'match' if match else 'DIFFER'}: largest relative difference {loss_err:.1e} "
        f"over {FLAGS.steps} steps (variables {var_err:.1e}, the largest in {worst_var})")
  return 0 if match else 1


def _trade_off(sgraph, describer, plan) -> list[str]:
  """The summary's lines of bytes per step against a per-device memory budget: Tofu's
  peak (every tensor cut), the geometric middle up to the single-device peak, unlimited
  (``tf_tofu.plan(..., memory_budget=...)``, from one set of candidates)."""
  import math
  from tf_tofu.core.plan import human_bytes
  from tf_tofu.layout import memory
  from tf_tofu.search import planners
  start = time.perf_counter()
  low = memory.plan_peak(sgraph, plan, describer).worst
  budgets = [low, math.isqrt(low * memory.single_device_peak(sgraph, describer)), math.inf]
  found = planners.trade_off(sgraph, FLAGS.k, describer, budgets)
  lines = [f"  memory budget per device -> bytes per step ({time.perf_counter() - start:.1f} s):"]
  for b, got in zip(budgets, found):
    name = "unlimited" if math.isinf(b) else human_bytes(b)
    lines.append(f"    {name:>12}: " + (str(got) if isinstance(got, Exception) else
                 f"{human_bytes(got[0].evaluation.total_bytes)} (peak {human_bytes(got[1])})"))
  return lines


def _link_line(fn, plan, args, counted: bool) -> str:
  """The summary's bytes per link class: the plan's, and (``counted``) those counted in
  the partitioned graph (``tf_tofu.ops.counting.link_bytes``)."""
  from tf_tofu.core.plan import human_bytes
  from tf_tofu.ops import counting

  def spell(by_class):
    return ", ".join(f"{c} {b} B" if b < 1024 else f"{c} {human_bytes(b)} ({b} B)"
                     for c, b in by_class.items()) or "none"

  line = f"  bytes per link class: planned {spell(plan.link_bytes)}"
  if plan.comm_time is not None:
    line += f", {plan.comm_time * 1e3:.3f} ms predicted"
  if counted:
    got = counting.link_bytes(counting.transfer_count(fn.partitioned_graph_def(*args)))
    line += (f"; counted in the partitioned graph {spell(got)} "
             f"({'equal' if got == dict(plan.link_bytes) else 'DIFFERENT'})")
  return line


def _train_both(fn, original, graph, inputs) -> tuple[float, float, str]:
  """Trains ``inputs`` partitioned (``fn``) and unpartitioned (``original``) from the same
  values; prints both losses per step; returns the largest relative difference of the
  losses, that of the variables (per variable ``max |trained - reference| / max
  |reference|``) and the name of the variable where it is."""
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
  name_of = {v.handle: v.name for v in graph.variables}
  var_err, worst = max(((float(np.max(np.abs(trained[h] - reference[h])) /
                         max(float(np.max(np.abs(reference[h]))), 1e-30)), name_of[h])
                        for h in reference if reference[h].size), default=(0.0, "-"))
  return loss_err, var_err, worst


if __name__ == "__main__":
  app.run(main)
