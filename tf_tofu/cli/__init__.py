"""The ``tofu`` command.

    tofu demo [--model=gpt --k=8 --steps=3]          # the main job: see tf_tofu.cli.demo
    tofu plan --saved_model=DIR --devices=8 --plan_out=plan.json
    tofu rewrite --saved_model=DIR --devices=8 --output=OUT_DIR
    tofu validate [--only=MatMul,Conv2D] [--coverage_out=docs/op_coverage.md]
    tofu bench [--only=search,memory] [--sizes=tiny] [--write]
    tofu fuzz [--examples=2000 --seed=0 --out_dir=tofu_fuzz]

``demo`` partitions a zoo model across logical devices end to end
(``tf_tofu.cli.demo``); ``plan`` searches a partition of a GraphDef or SavedModel
(``tf_tofu.cli.plan``); ``rewrite`` writes the partitioned GraphDef or
SavedModel (``tf_tofu.cli.rewrite``); ``validate`` checks every op
description against its TensorFlow kernel (``tf_tofu.opdefs.validate``);
``bench`` runs the benchmarks of ``tools/`` (``tf_tofu.cli.bench``);
``fuzz`` runs random training steps through the whole pipeline
(``tf_tofu.cli.fuzz``).
Each takes absl flags: ``tofu SUBCOMMAND --help`` lists its own,
``--helpfull`` every flag of the process.  Every subcommand shows the phases
of long work on stderr (``tf_tofu.core.progress``; ``--noprogress`` hides
them) and writes stdout line by line, also into a pipe.
"""

from __future__ import annotations

import sys

from absl import app, flags

flags.DEFINE_bool("progress", True, "Show the phases of long work (over 2 s) on stderr.")

SUBCOMMANDS = {
    "bench": "tf_tofu.cli.bench",
    "demo": "tf_tofu.cli.demo",
    "fuzz": "tf_tofu.cli.fuzz",
    "plan": "tf_tofu.cli.plan",
    "rewrite": "tf_tofu.cli.rewrite",
    "validate": "tf_tofu.opdefs.validate",
}


def _usage() -> str:
  return ("usage: tofu SUBCOMMAND [flags]\n  subcommands: " + ", ".join(sorted(SUBCOMMANDS))
          + "\n  tofu SUBCOMMAND --help lists a subcommand's flags")


def run(argv=None) -> None:
  """Console-script entry point: dispatches to the subcommand's absl main."""
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(_usage())
    sys.exit(0 if len(argv) >= 2 else 2)
  name = argv[1]
  if name not in SUBCOMMANDS:
    print(f"tofu: unknown subcommand {name!r}\n{_usage()}", file=sys.stderr)
    sys.exit(2)
  import importlib
  if hasattr(sys.stdout, "reconfigure"):
    sys.stdout.reconfigure(line_buffering=True)  # a pipe sees each line when it is printed
  module = importlib.import_module(SUBCOMMANDS[name])
  # absl's --help lists the key flags of the module named by sys.argv[0]: make the flags
  # of the subcommand and of the tf_tofu modules it imports (shared inputs) that module's.
  imported = sorted(m.__name__ for m in vars(module).values()
                    if isinstance(m, type(sys)) and m.__name__.startswith("tf_tofu."))
  own = [__name__, module.__name__, *imported]
  for source in own:
    for flag in flags.FLAGS.get_flags_for_module(source):
      flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  main_module = sys.modules.get("__main__")
  if main_module is not None and module.__doc__:
    main_module.__doc__ = module.__doc__  # absl's --help prints the main module's docstring

  def main(args):
    from tf_tofu.core import progress
    progress.set_verbose(flags.FLAGS.progress)
    return module.main(args)

  app.run(main, argv=[f"tofu {name}", *argv[2:]])
