"""The ``tofu`` command.

    tofu validate [--only=MatMul,Conv2D] [--coverage_out=docs/op_coverage.md]

``validate`` checks every op description against its TensorFlow kernel (see
``tf_tofu.opdefs.validate``).  Further subcommands (plan, rewrite, demo, bench)
are added as the pipeline behind them lands.
"""

from __future__ import annotations

import sys

from absl import app

SUBCOMMANDS = {
    "validate": "tf_tofu.opdefs.validate",
}


def _usage() -> str:
  return ("usage: tofu SUBCOMMAND [flags]\n  subcommands: " + ", ".join(sorted(SUBCOMMANDS))
          + "\n  tofu SUBCOMMAND --helpfull lists a subcommand's flags")


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
  module = importlib.import_module(SUBCOMMANDS[name])
  app.run(module.main, argv=[f"tofu {name}", *argv[2:]])


if __name__ == "__main__":
  run()
