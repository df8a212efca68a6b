"""Benchmarks graph ingestion (``tf_tofu.trace``) on paper-sized zoo models.

    python tools/bench_ingest.py                                  # WResNet-152 W=10 and LSTM-10
    python tools/bench_ingest.py --models=wresnet152 --flavors=tf,keras --optimizers=sgd,adam
    python tools/bench_ingest.py --models=mlp,gpt --sizes=tiny

Each (model, flavor, optimizer) runs in a fresh subprocess, so that its peak
resident memory (``resource.getrusage``) is its own.  Models are built in a
graph that is never run (``materialize=False``): the weights exist as
uninitialised variables, so peak memory stays far below the model's size,
which is printed beside it.  Prints one line per run: ops, tensors,
variables, unattached backward ops, unlinked trainable variables, build and
ingest seconds (with the ingest stages), peak RSS and the weight bytes the
model would need.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["wresnet152", "lstm10"], "Zoo keys (models.PAPER or models.TINY).")
flags.DEFINE_enum("sizes", "paper", ["paper", "tiny"], "Paper-sized or tiny models.")
flags.DEFINE_list("flavors", ["tf", "keras"], "Model flavours.")
flags.DEFINE_list("optimizers", ["adam"], "Optimizers.")
flags.DEFINE_string("one", "", "Internal: run one 'key,flavor,optimizer' and print JSON.")


def _gib(n: float) -> str:
  return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def run_one(key: str, flavor: str, optimizer: str, sizes: str) -> dict:
  """Builds (unmaterialised) and ingests one model; returns its numbers."""
  import resource

  import tf_tofu
  from tf_tofu import models
  t0 = time.perf_counter()
  if sizes == "paper":
    step = models.paper(key, flavor=flavor, optimizer=optimizer)
  else:
    step = models.tiny(key, flavor=flavor, optimizer=optimizer, materialize=False)
  build = time.perf_counter() - t0
  t0 = time.perf_counter()
  with step.context():
    g = tf_tofu.trace(step.fn, *step.input_signature)
  ingest = time.perf_counter() - t0
  trainable = [v for v in g.variables if v.trainable]
  return dict(
      name=step.name, ops=len(g.ops), tensors=len(g.tensors), variables=len(g.variables),
      trainable=len(trainable), unattached=len(g.unattached),
      unlinked=sum(1 for v in trainable if v.gradient is None), build_s=build, ingest_s=ingest,
      stages={k: round(v, 2) for k, v in sorted(g.timings.items())},
      peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
      weight_bytes=step.weight_bytes())


def main(argv):
  del argv
  if FLAGS.one:
    key, flavor, optimizer = FLAGS.one.split(",")
    print(json.dumps(run_one(key, flavor, optimizer, FLAGS.sizes)))
    return
  print(f"{'model':<26} {'ops':>7} {'tensors':>8} {'vars':>6} {'unatt':>6} {'unlink':>6} "
        f"{'build s':>8} {'ingest s':>9} {'peak RSS':>10} {'weights':>10}")
  failed = False
  for key in FLAGS.models:
    for flavor in FLAGS.flavors:
      for optimizer in FLAGS.optimizers:
        cmd = [sys.executable, os.path.abspath(__file__), f"--one={key},{flavor},{optimizer}",
               f"--sizes={FLAGS.sizes}"]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
        if proc.returncode or not lines:
          failed = True
          print(f"{key}/{flavor}/{optimizer}: FAILED\n{proc.stderr[-2000:]}")
          continue
        r = json.loads(lines[-1])
        label = f"{key}/{flavor}/{optimizer}"
        print(f"{label:<26} {r['ops']:>7} {r['tensors']:>8} {r['variables']:>6} "
              f"{r['unattached']:>6} {r['unlinked']:>6} {r['build_s']:>8.1f} "
              f"{r['ingest_s']:>9.1f} {_gib(r['peak_rss']):>10} {_gib(r['weight_bytes']):>10}")
        print(f"    {r['name']}; stages (s): {r['stages']}")
  if failed:
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
