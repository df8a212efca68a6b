"""The Keras sweep: real Keras 3 models, partitioned end to end, one table row each.

    python tools/bench_keras.py                         # the keras.applications, k=4, Adam
    python tools/bench_keras.py --models=conv2d,lstm --optimizers=sgd,adamw --nowrite

For each catalogue model (``tf_tofu.models.keras_catalog``) and optimizer:
trace, plan, rewrite and run it on k logical CPU devices, compare with the
unpartitioned step, and price the baselines on the same graph
(``tf_tofu.verify.sweep.check_step``).  Prints one line per model and writes
the table to docs/benchmarks.md.  Targets (issue "Keras 3 users first"): no
op left whole, the busiest device receiving at most ``BUSIEST_MARGIN`` times
the even share, worst-device memory at most 1.3x the ideal, numerics equal.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchdoc  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["ResNet50", "MobileNetV2", "EfficientNetB0", "DenseNet121",
                             "InceptionV3", "ConvNeXtTiny"], "Catalogue models to sweep.")
flags.DEFINE_list("optimizers", ["momentum"], "Keras optimizers (each model runs each).")
flags.DEFINE_integer("steps", 1, "Training steps compared with the unpartitioned step.")
flags.DEFINE_integer("k", 4, "Device count (logical CPU devices).")
flags.DEFINE_enum("dtype", "float64", ["float32", "float64"],
                  "Float type of the models (float64: numerics at the fixed float64 bound).")
flags.DEFINE_list("baselines", ["datapar", "megatron", "spartan"], "Baselines to price.")
flags.DEFINE_bool("write", True, "Write docs/benchmarks.md.")

MEMORY_TARGET = 1.3


def _row(model, optimizer, r) -> str:
  whole = ", ".join(f"{t} x{c}" for t, c in r.whole.items()) or "none"
  base = f"{r.best_baseline[0]} {r.best_baseline[1]:,.0f}" if r.best_baseline else "-"
  ok = "equal" if not r.mismatches else f"{len(r.mismatches)} differ"
  return (f"| {model} | {optimizer} | {r.ops:,} | {whole} | {r.counted:,} | {base} | "
          f"{r.busiest:.2f} | {r.memory_ratio:.2f} | {ok} | {r.plan_seconds:.1f} | "
          f"{r.first_call_seconds:.1f} |")


def main(argv):
  del argv
  from tf_tofu.core import devices
  devices.split_cpu(max(FLAGS.k, 8))
  from tf_tofu.models import keras_catalog
  from tf_tofu.verify import sweep
  rows = []
  for model in FLAGS.models:
    for optimizer in FLAGS.optimizers:
      step = keras_catalog.build(model, optimizer, FLAGS.dtype)
      inputs = [step.example_inputs(seed) for seed in range(FLAGS.steps)]
      try:
        r = sweep.check_step(step.name, step.fn, inputs, FLAGS.k, baselines=FLAGS.baselines)
      except Exception as e:  # a model the pipeline refuses is a row too, with the reason
        print(f"{step.name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
        rows.append(f"| {model} | {optimizer} | - | refused: {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:120]}... | | | | | | | |")
        continue
      print(f"{step.name}: {r.ops} ops, whole {r.whole or 'none'}, bytes {r.counted:,} "
            f"(predicted {r.predicted:,.0f}), best baseline {r.best_baseline}, busiest "
            f"{r.busiest:.2f}x share, memory {r.memory_ratio:.2f}x ideal, "
            f"{'numerics equal' if not r.mismatches else r.mismatches[:2]}, plan "
            f"{r.plan_seconds:.1f} s, first call {r.first_call_seconds:.1f} s", flush=True)
      rows.append(_row(model, optimizer, r))
  if FLAGS.write:
    body = [f"k = {FLAGS.k} logical CPU devices, {FLAGS.dtype}, batch "
            f"{keras_catalog.BATCH}, {keras_catalog.CLASSES} classes, `weights=None`, the "
            "smallest input each model accepts.  Bytes per step counted in the rewritten graph; "
            "busiest = bytes the busiest device receives / (bytes / k); memory = worst device / "
            f"ideal (target <= {MEMORY_TARGET}); numerics: losses and every variable against "
            f"the unpartitioned step after {FLAGS.steps} step(s), max |err| <= 1e-9 max |ref| + "
            "1e-9; plan = trace + search + rewrite; first call = shards, function build and the "
            "first step.", "",
            "Why SGD with momentum and one step for the numerics: these deep batch-normalised "
            "nets at batch 4 amplify rounding.  Perturbing ResNet50's input by a relative 1e-15 "
            "(no partitioning at all) moves its Adam weights up to 9e-9 beyond that bound after "
            "one step and its loss by 1e-7 after two (Adam divides near-zero gradients by their "
            "own magnitude); with SGD after one step it stays within the bound.  So Adam on these "
            "models cannot be told apart from rounding at a fixed bound; the layer sweep "
            "(tests/models/test_keras_catalog.py) checks all four optimizers at it.  ConvNeXt's "
            "depthwise convolutions are grouped Conv2Ds that Keras compiles with XLA; ingestion "
            "inlines them and runs them as depthwise convolutions (tf_tofu/graph/grouped.py), "
            "and the unpartitioned reference runs them under XLA.", "",
            "| model | optimizer | ops | ops left whole | bytes tofu | best baseline | busiest | "
            "memory | numerics | plan s | first call s |",
            "|---|---|---|---|---|---|---|---|---|---|---|", *rows]
    benchdoc.write_section(f"Keras models at k={FLAGS.k}",
                           " ".join(["python tools/bench_keras.py", *sys.argv[1:]]),
                           "\n".join(body))
  return 0


if __name__ == "__main__":
  app.run(main)
