"""``tofu plan``: search a partition for a GraphDef or SavedModel, print and save the Plan.

    tofu plan --saved_model=DIR --signature=train --devices=8 --plan_out=plan.json
    tofu plan --graph=step.pb --feeds=x=32x784,y=32 --fetches=loss --devices=/GPU:0,/GPU:1
    tofu plan ... --planner=megatron --dot=plan.dot
    tofu plan ... --cluster_spec=cluster.json --devices_per_task=4 --device_type=GPU \
        --network_bandwidth=1.25      # GB/s between tasks; --local_bandwidth inside one

Prints the plan report (strategies per op group and level, bytes per level,
largest conversions); ``--plan_out`` writes the Plan JSON, which
``tofu rewrite --plan_in`` applies (after hand edits too).  ``--dot`` draws
the coarsened graph with every tensor group's layout and the bytes of every
conversion (``tf_tofu.cli.pictures``).
"""

from __future__ import annotations

from absl import app, flags

from tf_tofu.cli import inputs as cli_inputs

FLAGS = flags.FLAGS
flags.DEFINE_list("devices", ["8"], "A device count, or device names (/GPU:0,/GPU:1).")
flags.DEFINE_string("planner", "tofu", "tofu, or a baseline: datapar, allrow, spartan, "
                    "equalchop, megatron.")
flags.DEFINE_bool("never_worse", False, "Also run the cut-only baselines, keep the plan that "
                  "moves the fewest bytes and improve it move by move on its exact bytes "
                  "(about twice the search time).")
flags.DEFINE_bool("needs_once", False, "Price a conversion that several op groups need alike "
                  "once per level, as the rewrite sends it, so each level is solved on its "
                  "exact bytes (a level too wide for that is priced per op group; 1.5 to "
                  "4 times the search time on large models).")
flags.DEFINE_string("memory_budget", None, "Peak bytes per device the plan must fit in: 16GiB, "
                    "512MiB, 1.5GB, a byte count, or 'unlimited'; replicates storage where "
                    "that moves fewer bytes (about 10x the search time).")
flags.DEFINE_string("plan_out", None, "Write the Plan JSON here.")
flags.DEFINE_string("dot", None, "Write the coarsened graph (Graphviz) here; SVG/PNG too when "
                    "the dot program is installed.")
flags.DEFINE_enum("render", "auto", ["auto", "always", "never"],
                  "Render --dot as SVG/PNG: auto (small drawings only), always, never.")
flags.DEFINE_string("cluster_spec", None, "Plan for every device of a TensorFlow cluster: a "
                    "JSON file holding a TF_CONFIG ({\"cluster\": {\"worker\": [\"host:port\", "
                    "...]}, ...}) or a bare {job: [host:port, ...]}; 'TF_CONFIG' reads the "
                    "environment variable.  With --devices_per_task and --device_type; "
                    "overrides --devices.")
flags.DEFINE_integer("devices_per_task", 1, "With --cluster_spec: devices of each task.",
                     lower_bound=1)
flags.DEFINE_string("device_type", "CPU", "With --cluster_spec: the type of those devices "
                    "(CPU, GPU, TPU).")
flags.DEFINE_float("network_bandwidth", None, "GB/s between devices of different tasks "
                   "(default 1).", lower_bound=0.0)
flags.DEFINE_float("local_bandwidth", None, "GB/s between devices of one task (default 10).",
                   lower_bound=0.0)


def devices_flag():
  """``--devices``: an int when it is one number, else the list of names; with
  ``--cluster_spec``, every device of that cluster (``core.cluster.ClusterDevices``)."""
  if FLAGS.cluster_spec:
    return cluster_flag()
  if len(FLAGS.devices) == 1:
    try:
      k = int(FLAGS.devices[0])
    except ValueError:
      return list(FLAGS.devices)
    if k < 1:
      raise cli_inputs.UsageError(f"--devices={k}: give a device count >= 1 or device names")
    return k
  return list(FLAGS.devices)


def cluster_flag():
  """``--cluster_spec`` (a file, or 'TF_CONFIG') with ``--devices_per_task`` and
  ``--device_type`` as ``core.cluster.ClusterDevices`` (checked; no connection)."""
  from tf_tofu.core import cluster
  text = None
  if FLAGS.cluster_spec != "TF_CONFIG":
    try:
      with open(FLAGS.cluster_spec) as f:
        text = f.read()
    except OSError as e:
      raise cli_inputs.UsageError(f"--cluster_spec={FLAGS.cluster_spec!r}: {e}; give a JSON "
                                  "file or 'TF_CONFIG'") from None
  devices = cluster.ClusterDevices(text, FLAGS.devices_per_task, FLAGS.device_type.upper())
  try:
    devices.names()
  except cluster.ClusterError as e:
    raise cli_inputs.UsageError(f"--cluster_spec={FLAGS.cluster_spec!r}: {e}") from None
  return devices


def topology_flag():
  """``--network_bandwidth`` / ``--local_bandwidth`` (GB/s) as a ``Topology``."""
  from tf_tofu.core.topology import LOCAL, NETWORK, Topology
  given = {cls: FLAGS[flag].value * 1e9 for cls, flag in ((NETWORK, "network_bandwidth"),
                                                          (LOCAL, "local_bandwidth"))
           if FLAGS[flag].value is not None}
  for cls, bw in given.items():
    if bw <= 0:
      raise cli_inputs.UsageError(f"--{cls}_bandwidth must be a positive number of GB/s")
  return Topology(given)


def check_outputs() -> dict[str, str]:
  """``--plan_out`` and ``--dot`` checked before any work: flag -> absolute path."""
  out = {}
  for flag in ("plan_out", "dot"):
    if FLAGS[flag].value:
      out[flag] = cli_inputs.check_output(FLAGS[flag].value, f"--{flag}")
  return out


def planner_flag() -> str:
  """``--planner``, checked (a usage error names the planners)."""
  from tf_tofu.search import planners
  try:
    return planners.check(FLAGS.planner)
  except ValueError as e:
    raise cli_inputs.UsageError(f"--planner: {e}") from None


def make_plan(graph, describer):
  """``(graph view, Plan)`` for the flags' devices and planner."""
  from tf_tofu import api
  from tf_tofu.graph import view
  graph_view = view.from_tofu_graph(graph, describer)
  return graph_view, api.plan_view(graph_view, devices_flag(), planner_flag(),
                                   describer=describer, never_worse=FLAGS.never_worse,
                                   needs_once=FLAGS.needs_once,
                                   memory_budget=FLAGS.memory_budget,
                                   topology=topology_flag())


def write_outputs(paths: dict[str, str], sgraph, plan, describer) -> None:
  """``--plan_out`` and ``--dot`` (``paths`` from :func:`check_outputs`), atomically."""
  from tf_tofu.cli import pictures
  if "plan_out" in paths:
    path = paths["plan_out"]
    cli_inputs.write_text_atomically(path, plan.to_json())
    print(f"wrote {path}")
  if "dot" in paths:
    drawing = pictures.write_dot(paths["dot"], sgraph, plan, describer, render=FLAGS.render)
    for written in drawing.written:
      print(f"wrote {written}")
    for note in drawing.notes:
      print(note)


def main(argv) -> int:
  if len(argv) > 1:
    return cli_inputs.fail(cli_inputs.UsageError(f"unexpected arguments {argv[1:]}"))
  from tf_tofu.opdefs.registry import Describer
  try:
    paths = check_outputs()
    planner_flag()
    graph = cli_inputs.load_graph()
    describer = Describer()
    sgraph, plan = make_plan(graph, describer)
    print(plan.report())
    write_outputs(paths, sgraph, plan, describer)
  except cli_inputs.ERRORS + (ValueError,) as e:
    return cli_inputs.fail(e)
  return 0


if __name__ == "__main__":
  app.run(main)
