"""Times the README's test command on a fresh clone and records it in docs/benchmarks.md.

    python tools/time_suite.py            # clone HEAD into a temp dir, run .ci/run there

Clones the committed HEAD of this checkout (uncommitted changes are not
measured), runs ``bash .ci/run`` in the clone (the README's test command:
a new venv, ``pip install -e .[test,cpu]``, pytest), and writes the section
"test suite time" with the wall-clock time of the whole command, of pytest
alone (its own summary), the pytest summary line and the machine's load
average when it started; the whole output is kept in the temp dir
(``suite.log``, its path printed last).  The suite must stay under 10 minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")

LIMIT_S = 600


def main(argv):
  del argv
  root = benchdoc.ROOT
  head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                        text=True, check=True).stdout.strip()
  work = tempfile.mkdtemp(prefix="tofu_suite_")
  clone = os.path.join(work, "tf_tofu")
  subprocess.run(["git", "clone", "-q", root, clone], check=True)
  load = os.getloadavg()[0]
  t0 = time.perf_counter()
  env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
  run = subprocess.run(["bash", ".ci/run"], cwd=clone, capture_output=True, text=True, env=env)
  total = time.perf_counter() - t0
  tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
  match = re.search(r"in ([\d.]+)s", tail)
  pytest_s = float(match.group(1)) if match else float("nan")
  log = os.path.join(work, "suite.log")  # the whole output: a failure's traceback is early
  with open(log, "w") as f:
    f.write(run.stdout + "\n" + run.stderr)
  print(run.stdout[-3000:])
  print(run.stderr[-2000:], file=sys.stderr)
  print(f"whole output: {log}")
  verdict = "passed" if run.returncode == 0 else f"FAILED (exit {run.returncode})"
  body = (f"The README's test command (`bash .ci/run`: new venv, `pip install -e .[test,cpu]`, "
          f"pytest) on a fresh clone of commit {head}; load average {load:.2f} when it "
          f"started.  Target: under {LIMIT_S // 60} minutes.\n\n"
          f"| commit | result | whole command s | pytest s | pytest summary |\n"
          f"|---|---|---|---|---|\n"
          f"| {head} | {verdict} | {total:.0f} | {pytest_s:.0f} | {tail.strip('= ')} |\n")
  print(body)
  if FLAGS.write:
    benchdoc.write_section("test suite time", "python tools/time_suite.py", body)
  return run.returncode


if __name__ == "__main__":
  app.run(main)
