"""``tofu bench``: the benchmark harness; with ``--write``, updates docs/benchmarks.md.

    tofu bench --only=memory --sizes=tiny   # prints the figures
    tofu bench --write                      # search time, bytes per planner, memory per device

Runs, from the checkout this package is installed from (``pip install -e .``),
``tools/bench_search.py`` (search time against k; bytes per step for tofu
against every baseline) and ``tools/bench_memory.py`` (rewrite time; peak
memory per device against the ideal), each in its own process, passing
``--sizes`` and ``--write``/``--nowrite`` on.  Each tool prints its figures;
with ``--write`` it also writes its sections of the checkout's
``docs/benchmarks.md`` with the command that produced them.
"""

from __future__ import annotations

import os
import subprocess
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("only", ["search", "memory"], "Which benchmarks: search, memory.")
flags.DEFINE_enum("sizes", "paper", ["paper", "tiny"], "Paper-sized or tiny models.")
flags.DEFINE_bool("write", False, "Also write the figures into the checkout's "
                  "docs/benchmarks.md.")

TOOLS = {"search": "bench_search.py", "memory": "bench_memory.py"}


def main(argv) -> int:
  if len(argv) > 1:
    print(f"tofu: error: unexpected arguments {argv[1:]}", file=sys.stderr)
    return 2
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  unknown = sorted(set(FLAGS.only) - set(TOOLS))
  if unknown:
    print(f"tofu: error: --only={unknown}: choose from {sorted(TOOLS)}", file=sys.stderr)
    return 2
  for name in FLAGS.only:
    tool = os.path.join(root, "tools", TOOLS[name])
    if not os.path.exists(tool):
      print(f"tofu: error: {tool} not found; tofu bench runs from a checkout of tf_tofu "
            "(pip install -e .)", file=sys.stderr)
      return 2
    args = [sys.executable, tool, f"--sizes={FLAGS.sizes}",
            "--write" if FLAGS.write else "--nowrite"]
    print("$ " + " ".join(["python", os.path.join("tools", TOOLS[name])] + args[2:]), flush=True)
    code = subprocess.call(args, cwd=root)
    if code:
      return code
  return 0


if __name__ == "__main__":
  app.run(main)
