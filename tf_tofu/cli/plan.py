"""``tofu plan``: search a partition for a GraphDef or SavedModel, print and save the Plan.

    tofu plan --saved_model=DIR --signature=train --devices=8 --plan_out=plan.json
    tofu plan --graph=step.pb --feeds=x=32x784,y=32 --fetches=loss --devices=/GPU:0,/GPU:1
    tofu plan ... --planner=megatron --dot=plan.dot

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
flags.DEFINE_bool("never_worse", False, "Also run the cut-only baselines and keep the plan that "
                  "moves the fewest bytes (about 5x the search time).")
flags.DEFINE_string("plan_out", None, "Write the Plan JSON here.")
flags.DEFINE_string("dot", None, "Write the coarsened graph (Graphviz) here; SVG/PNG too when "
                    "the dot program is installed.")
flags.DEFINE_enum("render", "auto", ["auto", "always", "never"],
                  "Render --dot as SVG/PNG: auto (small drawings only), always, never.")


def devices_flag():
  """``--devices``: an int when it is one number, else the list of names."""
  if len(FLAGS.devices) == 1:
    try:
      k = int(FLAGS.devices[0])
    except ValueError:
      return list(FLAGS.devices)
    if k < 1:
      raise cli_inputs.UsageError(f"--devices={k}: give a device count >= 1 or device names")
    return k
  return list(FLAGS.devices)


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
                                   describer=describer, never_worse=FLAGS.never_worse)


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
