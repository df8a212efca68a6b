"""``tofu fuzz``: a fuzz campaign over random training steps, on 8 logical CPU devices.

    tofu fuzz --examples=2000 --seed=0 --out_dir=tofu_fuzz

Draws random float64 training steps (``tf_tofu.verify.random_steps``: dense,
convolutional and attention blocks, odd sizes, SGD / momentum / Adam, k in
2..8, every planner, ``never_worse`` on and off, both comm forms), and for
each one traces, plans, rewrites and runs two steps partitioned; the losses
and variables must equal the unpartitioned run, the counted bytes the plan's,
and every node must sit on a plan device.  Prints progress, then ``N tried,
F failed``; writes a shrunk standalone reproduction script per failure (up to
--max_reproductions) into --out_dir and exits 1 when anything failed.  Needs
hypothesis (``pip install tf_tofu[test]``).
"""

from __future__ import annotations

import sys

from absl import app, flags

from tf_tofu.cli import shared_flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("examples", 200, "Random steps to try.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the example stream (same seed, same examples).")
flags.DEFINE_integer("max_k", 8, "Largest device count drawn (2..8).", lower_bound=2,
                     upper_bound=8)
flags.DEFINE_integer("max_reproductions", 10, "Failures to shrink and write.", lower_bound=0)
OUT_DIR = "tofu_fuzz"  # --out_dir's default here


def main(argv) -> int:
  if len(argv) > 1:
    print(f"tofu: error: unexpected arguments {argv[1:]}", file=sys.stderr)
    return 2
  try:
    import hypothesis  # noqa: F401
  except ImportError:
    print("tofu: error: tofu fuzz needs hypothesis: pip install 'tf_tofu[test]'",
          file=sys.stderr)
    return 2
  from absl import logging
  from tf_tofu.core import devices
  logging.set_verbosity(logging.WARNING)  # per-example ingest/search lines drown the progress
  devices.split_cpu(8)
  import tensorflow as tf
  tf.config.set_soft_device_placement(False)
  from tf_tofu.verify import campaign
  result = campaign.run(FLAGS.examples, FLAGS.seed, shared_flags.out_dir(OUT_DIR),
                        max_k=FLAGS.max_k,
                        max_reproductions=FLAGS.max_reproductions,
                        progress=lambda line: print(line, flush=True))
  for kind, n in result.by_kind:
    print(f"  {n} x {kind}")
  print(f"{result.summary()} ({result.seconds:.0f} s, seed {result.seed})", flush=True)
  return 1 if result.failed else 0


if __name__ == "__main__":
  app.run(main)
