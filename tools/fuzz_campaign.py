"""Runs a fuzz campaign (``tf_tofu.verify.campaign``) and records it in docs/benchmarks.md.

    python tools/fuzz_campaign.py --examples=2000 --seed=0

The same campaign as ``tofu fuzz``; this script also writes the section
"fuzz campaign" of docs/benchmarks.md: the command, a table of every campaign
recorded there (date, commit, seed, examples, failures, seconds; the new one
first, the earlier rows read back from the section it replaces) and the
newest campaign's failures by kind.  Reproduction scripts of failures go to
--out_dir.
"""

from __future__ import annotations

import datetime
import os
import re
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("examples", 2000, "Random steps to try.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the example stream.")
flags.DEFINE_string("out_dir", "tofu_fuzz", "Where reproduction scripts of failures go.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")

SECTION = "fuzz campaign"
ROW = re.compile(r"^\| (\d{4}-\d{2}-\d{2}) \| (\S+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", re.M)


def campaign_table(new_row: str, old_section: str) -> str:
  """The campaigns table: ``new_row`` first, then the rows of ``old_section``'s table."""
  earlier = ["| " + " | ".join(m) + " |" for m in ROW.findall(old_section)]
  return ("| date | commit | seed | examples tried | failed | seconds |\n"
          "|---|---|---|---|---|---|\n" + "\n".join([new_row, *earlier]) + "\n")


def main(argv):
  del argv
  from tf_tofu.core import devices
  logging.set_verbosity(logging.WARNING)
  devices.split_cpu(8)
  import tensorflow as tf
  tf.config.set_soft_device_placement(False)
  from tf_tofu.verify import campaign
  import subprocess
  head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=benchdoc.ROOT,
                        capture_output=True, text=True).stdout.strip() or "?"  # what is run
  result = campaign.run(FLAGS.examples, FLAGS.seed, FLAGS.out_dir,
                        progress=lambda line: print(line, flush=True))
  kinds = "".join(f"| {kind} | {n} |\n" for kind, n in result.by_kind) or "| (none) | 0 |\n"
  row = (f"| {datetime.date.today().isoformat()} | {head} | {result.seed} | {result.tried} | "
         f"{result.failed} | {result.seconds:.0f} |")
  body = (f"Random float64 training steps (`tf_tofu.verify.random_steps`), each traced, planned, "
          f"rewritten and run for two steps on 8 logical CPU devices; checked: losses and "
          f"variables equal the unpartitioned run (max |err| <= 1e-9 max |ref| + 1e-9), counted "
          f"bytes == predicted, every node on a plan device, and (from a22cfaa on) a single level "
          f"priced once (`needs_once`) has objective == predicted bytes.  From commit 4f4c364 on, `tofu` "
          f"examples also draw `never_worse`, and from d150000 on `needs_once`.  Every campaign recorded here, newest first (the "
          f"commit each started from):\n\n"
          f"{campaign_table(row, benchdoc.read_section(SECTION))}\n"
          f"Failures of the newest, by kind:\n\n"
          f"| failure kind | examples |\n|---|---|\n{kinds}")
  print(body)
  print(f"{result.summary()} ({result.seconds:.0f} s, seed {result.seed})")
  if FLAGS.write:
    command = f"python tools/fuzz_campaign.py --examples={FLAGS.examples} --seed={FLAGS.seed}"
    benchdoc.write_section(SECTION, command, body)
  return 1 if result.failed else 0


if __name__ == "__main__":
  app.run(main)
