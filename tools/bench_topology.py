"""Benchmarks topology-aware planning: bytes per link class and predicted communication time.

    python tools/bench_topology.py                  # WResNet-152 and GPT-24, paper sizes,
                                                    # writes docs/benchmarks.md
    python tools/bench_topology.py --models=mlp --sizes=tiny --nowrite

The cluster: ``--tasks`` tasks of ``--per_task`` devices each (default 2 x 4 GPUs,
named ``/job:worker/replica:0/task:T/device:GPU:D``; planning needs no
connection), the network ``--slowdown`` times slower than the link inside a task
(default 10 GB/s inside, 1 GB/s between).  Per model, three plans:

* tofu, topology-aware: ``tf_tofu.plan(..., topology=...)``: the factor order and
  device order of least predicted time (``tf_tofu.search.topology_search``);
* tofu, topology-blind: the same recursion with the bytes objective and the
  devices in the order given (task-major: level 1 crosses the network);
* datapar: data parallelism (weights replicated, gradients all-reduced) in the
  order given.

Each row: bytes per link class (exact, from every piece's two devices), bytes
per level, and the predicted communication time ``sum_c bytes_c / bandwidth_c``.
"""

from __future__ import annotations

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402
from zoo_graphs import build_graph  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["wresnet152", "gpt24"], "Zoo keys to benchmark.")
flags.DEFINE_enum("sizes", "paper", ["paper", "tiny"], "Paper-sized or tiny models.")
flags.DEFINE_integer("tasks", 2, "Tasks (machines) of the cluster.", lower_bound=2)
flags.DEFINE_integer("per_task", 4, "Devices per task.", lower_bound=1)
flags.DEFINE_float("local_bandwidth", 10.0, "GB/s between the devices of one task.")
flags.DEFINE_float("slowdown", 10.0, "How many times slower the network is.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")


def human_bytes(b: float) -> str:
  from tf_tofu.core.plan import human_bytes as h
  return h(b)


def _row(name, result, order, topo):
  """Figures of one (search result, device order) under ``topo``."""
  from tf_tofu.search import topology_search
  links = topology_search.link_bytes(result.evaluation.pair_bytes, order.names, topo)
  crossing = ", ".join(str(l + 1) for l in order.network_levels) if order.network_levels else "-"
  return dict(name=name, factors="x".join(map(str, result.factors)), crossing=crossing,
              local=links.get("local", 0), network=links.get("network", 0),
              total=result.evaluation.total_bytes, levels=result.evaluation.level_bytes,
              seconds=topo.seconds(links))


def main(argv):
  del argv
  from tf_tofu.core import cluster
  from tf_tofu.core.topology import Topology
  from tf_tofu.graph import view
  from tf_tofu.opdefs.registry import Describer
  from tf_tofu.search import planners, topology_search
  local = FLAGS.local_bandwidth * 1e9
  topo = Topology({"local": local, "network": local / FLAGS.slowdown})
  blind = Topology({"local": local, "network": local})  # the bytes objective
  names = cluster.ClusterDevices({"worker": [f"host{t}:2222" for t in range(FLAGS.tasks)]},
                                 FLAGS.per_task, "GPU").names()
  k = len(names)
  rows = []
  for key in FLAGS.models:
    step, graph, ingest_s = build_graph(key, FLAGS.sizes)
    print(f"{key}: {step.name}: {len(graph.ops)} ops, ingested in {ingest_s:.1f} s", flush=True)
    describer = Describer()
    sgraph = view.from_tofu_graph(graph, describer)
    start = time.perf_counter()
    tofu = planners.run("tofu", sgraph, k, describer)
    search_s = time.perf_counter() - start
    start = time.perf_counter()
    aware, aware_order = topology_search.place(tofu, names, topo)
    place_s = time.perf_counter() - start
    blind_result, blind_order = topology_search.place(tofu, names, blind)
    datapar = planners.run("datapar", sgraph, k, describer)
    given = topology_search.device_orders(names, datapar.factors, topo)[0]
    # The network bytes of every device order the topology-aware choice weighed.
    options = "; ".join(
        f"{', '.join(str(l + 1) for l in o.network_levels)}: " + human_bytes(
            topology_search.link_bytes(aware.evaluation.pair_bytes, o.names, topo)
            .get("network", 0))
        for o in topology_search.device_orders(names, aware.factors, topo) if o.network_levels)
    model_rows = [_row("tofu, topology-aware", aware, aware_order, topo),
                  _row("tofu, topology-blind", blind_result, blind_order, topo),
                  _row("datapar", datapar, given, topo)]
    model_rows[0]["options"] = options
    for r in model_rows:
      r["model"] = key
      print(f"  {r['name']:<22} {r['factors']:<6} local {human_bytes(r['local']):>10}  network "
            f"{human_bytes(r['network']):>10}  {r['seconds'] * 1e3:9.2f} ms  (levels across "
            f"tasks: {r['crossing']})", flush=True)
    print(f"  network bytes by the level(s) across tasks: {options}", flush=True)
    print(f"  search {search_s:.1f} s, topology choice {place_s:.2f} s")
    rows.extend(model_rows)
  if not FLAGS.write:
    return 0
  lines = [
      f"{FLAGS.tasks} tasks x {FLAGS.per_task} devices; {FLAGS.local_bandwidth:g} GB/s inside a "
      f"task, {FLAGS.local_bandwidth / FLAGS.slowdown:g} GB/s between tasks.  Bytes per step "
      "per link class (exact, from every transfer's two devices) and the predicted "
      "communication time sum_c bytes_c / bandwidth_c.  Topology-aware: "
      "`tf_tofu.plan(..., topology=...)` chooses the factor order and the device order of "
      "least predicted time; topology-blind: the same recursion, fewest bytes, devices in "
      "the order given (task-major, so level 1 crosses tasks); datapar in the order given.  "
      "\"Across tasks\": the level(s) whose cut separates the tasks; \"network bytes by "
      "choice\": the network bytes of the tofu plan for each choice the topology-aware "
      "search weighed (a transfer whose devices differ at several levels crosses the "
      "network if any of them does, so these are not the bytes per level).",
      "",
      "| model | plan | levels | across tasks | local | network | total | bytes per level "
      "| network bytes by choice | predicted comm | vs aware |",
      "|---|---|---|---|---:|---:|---:|---|---|---:|---:|"]
  for i, r in enumerate(rows):
    aware_s = rows[i - i % 3]["seconds"]
    ratio = f"{r['seconds'] / aware_s:.2f}x" if aware_s else "-"
    lines.append(f"| {r['model']} | {r['name']} | {r['factors']} | {r['crossing']} | "
                 f"{human_bytes(r['local'])} | {human_bytes(r['network'])} | "
                 f"{human_bytes(r['total'])} | "
                 f"{', '.join(human_bytes(b) for b in r['levels'])} | {r.get('options', '')} | "
                 f"{r['seconds'] * 1e3:.1f} ms | {ratio} |")
  command = "python tools/bench_topology.py " + " ".join(sys.argv[1:])
  benchdoc.write_section("Topology-aware planning (bench_topology)", command.strip(),
                         "\n".join(lines))
  print(f"wrote {benchdoc.DOC}")
  return 0


if __name__ == "__main__":
  app.run(main)
