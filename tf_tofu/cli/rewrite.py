"""``tofu rewrite``: partition a GraphDef or SavedModel and write the result.

    tofu rewrite --saved_model=DIR --signature=train --devices=8 --output=OUT_DIR
    tofu rewrite --graph=step.pb --feeds=x=32x784,y=32 --fetches=loss --targets=train \\
        --devices=/GPU:0,/GPU:1 --comm=collective --output=step.tofu.pb
    tofu rewrite ... --plan_in=plan.json      # apply a saved (maybe hand-edited) plan

Output by the ``--output`` path:

* ``*.pb`` / ``*.pbtxt``: the partitioned GraphDef, every node placed and
  with ``_output_shapes``, plus ``<output>.partition.json``: which
  placeholder feeds which box of which input, which tensors hold which box of
  each fetch, and which resource placeholder is which shard of which variable
  (a runner binds those to variables on the devices);
* anything else: a SavedModel directory (``tf_tofu.rewrite.export``) holding
  the shards as variables, whose ``serving_default`` signature takes the
  feeds whole, runs one partitioned step on the plan's devices and returns
  the fetches.  It needs the variables' values: a SavedModel input has them;
  a GraphDef input only when it has no variables.

The input is never overwritten and every output is written atomically.
``--tensorboard=DIR`` writes the partitioned graph for TensorBoard's graph
view (colour by device); ``--dot`` and ``--plan_out`` are as for ``tofu plan``.
"""

from __future__ import annotations

import json

from absl import app, flags

from tf_tofu.cli import inputs as cli_inputs, plan as plan_command, shared_flags  # noqa: F401

FLAGS = flags.FLAGS
flags.DEFINE_string("output", None, "Where to write: a .pb/.pbtxt GraphDef, or a SavedModel "
                    "directory.")
flags.DEFINE_string("plan_in", None, "Apply this Plan JSON instead of searching.")
flags.DEFINE_string("tensorboard", None, "Write the partitioned graph here for TensorBoard (view it with `tensorboard --logdir DIR`; `pip install tf_tofu[tensorboard]`).")


def partition_map(p) -> dict:
  """The sidecar of a GraphDef output: feeds, fetches and variable shards by box."""
  def box(b):
    return [[iv.lo, iv.hi] for iv in b.intervals]
  return {
      "devices": list(p.devices), "comm": p.comm, "targets": list(p.targets),
      "feeds": {t: [{"device": s.device, "box": box(s.box), "placeholder": s.placeholder}
                    for s in shards] for t, shards in p.feeds.items()},
      "fetches": {t: [{"device": s.device, "box": box(s.box), "tensor": s.tensor}
                      for s in shards] for t, shards in p.fetches.items()},
      "variables": {h: {"name": v.name, "shape": list(v.shape), "dtype": v.dtype,
                        "shards": [{"device": s.device, "box": box(s.box),
                                    "placeholder": s.placeholder} for s in v.shards]}
                    for h, v in p.variables.items()},
  }


def _plan_json():
  """The text of --plan_in, or None."""
  if not FLAGS.plan_in:
    return None
  try:
    return open(FLAGS.plan_in).read()
  except OSError as e:
    raise cli_inputs.UsageError(f"--plan_in={FLAGS.plan_in!r}: {e}") from None


def main(argv) -> int:
  if len(argv) > 1:
    return cli_inputs.fail(cli_inputs.UsageError(f"unexpected arguments {argv[1:]}"))
  import tensorflow as tf
  from tf_tofu.rewrite import memory
  from tf_tofu.cli import pictures
  from tf_tofu.opdefs.registry import Describer
  from tf_tofu.ops import counting, shapes
  from tf_tofu.core.plan import PlanError
  from tf_tofu import api
  from tf_tofu.rewrite import export
  try:
    if not FLAGS.output:
      raise cli_inputs.UsageError("--output is required (a .pb/.pbtxt file or a SavedModel "
                                  "directory)")
    graph_out = FLAGS.output.endswith((".pb", ".pbtxt"))
    out = cli_inputs.check_output(FLAGS.output, "--output", directory=not graph_out)
    if graph_out:
      cli_inputs.check_output(FLAGS.output + ".partition.json", "--output's sidecar")
    if FLAGS.tensorboard:
      cli_inputs.check_output(FLAGS.tensorboard, "--tensorboard", directory=True, log_dir=True)
    paths = plan_command.check_outputs()
    plan_json = _plan_json()
    planner = plan_command.planner_flag() if plan_json is None else FLAGS.planner
    graph = cli_inputs.load_graph()
    describer = Describer()
    devices = (plan_command.devices_flag()
               if plan_json is None or FLAGS["devices"].present or FLAGS.cluster_spec else None)
    job = api.partition(graph, devices=devices, planner=planner, comm=FLAGS.comm,
                        describer=describer, plan_json=plan_json, never_worse=FLAGS.never_worse,
                        needs_once=FLAGS.needs_once, memory_budget=FLAGS.memory_budget,
                        topology=plan_command.topology_flag())
    sgraph, plan, p = job.view, job.plan, job.partitioned
    print(plan.report(memory=memory.plan_memory(graph, p)))
    gd = shapes.with_output_shapes(p.graph_def)
    count = counting.transfer_count(gd)
    print(counting.pair_table(count, p.devices))
    print("bytes per link class (counted in the partitioned graph): " + (", ".join(
        f"{c} {b} B" for c, b in counting.link_bytes(count, plan_command.topology_flag())
        .items()) or "none"))
    if graph_out:
      text = out.endswith(".pbtxt")
      cli_inputs.write_atomically(out, lambda tmp: tf.io.write_graph(
          gd, *_split(tmp), as_text=text))
      side = out + ".partition.json"
      cli_inputs.write_text_atomically(side, json.dumps(partition_map(p), indent=1,
                                                        sort_keys=True))
      print(f"wrote {out} ({len(gd.node)} nodes on {len(p.devices)} devices) and {side}")
    else:
      missing = [v.name for v in graph.variables if v.handle not in graph.live_handles]
      if missing:
        raise cli_inputs.UsageError(
            f"a SavedModel output needs the variables' values, and this GraphDef input has "
            f"none (for {missing[:3]}); write a .pb/.pbtxt GraphDef instead, or rewrite a "
            "SavedModel")
      values = graph.variable_values(list(p.variables))
      key = graph.signature_key or "serving_default"
      cli_inputs.write_atomically(out, lambda tmp: export.save(
          p, values, tmp, list(graph.fetches), signature_key=key,
          output_names=graph.output_names), directory=True)
      print(f"wrote SavedModel {out}: signature {key!r} runs on {', '.join(p.devices)} (load "
            "it with tf_tofu.rewrite.export.LOAD_OPTIONS to keep the shards there)")
    if FLAGS.tensorboard:
      print(f"wrote {pictures.write_tensorboard(FLAGS.tensorboard, gd)} (TensorBoard: "
            "graph view, colour by device)")
    plan_command.write_outputs(paths, sgraph, plan, describer)
  except cli_inputs.ERRORS + (PlanError, ValueError) as e:
    return cli_inputs.fail(e)
  return 0


def _split(path: str) -> tuple[str, str]:
  import os
  return os.path.dirname(path) or ".", os.path.basename(path)


if __name__ == "__main__":
  app.run(main)
