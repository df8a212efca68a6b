"""Planning and memory-estimate time of two checkouts, measured in turns in one window.

    python tools/ab_speed.py --base=38a4923                       # against the working tree
    python tools/ab_speed.py --base=HEAD~3 --head=HEAD --model=rnnlm256 --ks=8,64 --rounds=6

A 2-core machine's speed drifts by tens of per cent within an hour, so two
versions timed one after the other compare the hours, not the code.  Here each
version runs in a process of its own (``PYTHONPATH`` set to its checkout: a
``git worktree`` of the revision, or this working tree; the timing code,
``zoo_graphs.cold_plan_with_memory``, is this tree's for both), traces the model and
plans it once, and then the two processes take turns through a token file:
version A times a round, then version B, and so on.  A round is, per k, a cold
plan (a new view and Describer, as one ``tf_tofu.plan`` after tracing; no
memory estimate) and then the memory estimate with that plan's Describer
(``layout.memory.plan_memory``: the single-device peak and the plan's), in one
``collector.bulk`` block as in ``tf_tofu.plan``.  Each round starts after
``gc.collect()``.  Medians of 3 rounds have differed by 15 % between two versions
with the same memory-estimate code on a 2-core machine: take 8 rounds or more.
Printed: every round, and per version and k the median seconds; the predicted
bytes and the worst device's peak must be equal in every round of both versions
(a speed change must not change a plan), else the tool says so and exits 1.
Nothing is written to the docs: the figures are for a change's note or commit
message.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)

FLAGS = flags.FLAGS
flags.DEFINE_string("base", None, "Revision A (any git revision of this repository).")
flags.DEFINE_string("head", None, "Revision B; default: this working tree as it is.")
flags.DEFINE_string("model", "resnet101", "A zoo_graphs.build_graph key (paper size).")
flags.DEFINE_string("sizes", "paper", "paper or tiny (zoo_graphs.build_graph).")
flags.DEFINE_list("ks", ["8"], "Device counts.")
flags.DEFINE_integer("rounds", 4, "Rounds per version.", lower_bound=1)
flags.DEFINE_string("worker", None, "(internal) run as the worker of this name.")
flags.DEFINE_string("token", None, "(internal) the token file.")
flags.DEFINE_string("other", None, "(internal) the other worker's name.")


def _wait_for(path: str, content: str) -> None:
  while True:
    try:
      with open(path) as f:
        if f.read() == content:
          return
    except FileNotFoundError:
      pass
    time.sleep(0.1)


def _write(path: str, content: str) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.write(content)
  os.replace(tmp, path)  # the reader never sees a half-written token


def worker() -> int:
  """Traces, then times ``--rounds`` rounds when the token names this worker."""
  sys.path.insert(0, TOOLS)
  from zoo_graphs import build_graph, cold_plan_with_memory  # noqa: E402
  _, graph, _ = build_graph(FLAGS.model, FLAGS.sizes)
  _write(f"{FLAGS.token}.ready.{FLAGS.worker}", "")
  for r in range(FLAGS.rounds):
    _wait_for(FLAGS.token, FLAGS.worker)
    for k in (int(x) for x in FLAGS.ks):
      plan, plan_s, mem, mem_s = cold_plan_with_memory(graph, k)
      print(json.dumps(dict(round=r, k=k, plan_s=plan_s, memory_s=mem_s,
                            bytes=plan.total_bytes, worst=mem["worst"])), flush=True)
    _write(FLAGS.token, FLAGS.other)
  return 0


def _checkout(rev: str, where: str) -> str:
  path = os.path.join(where, rev.replace("/", "_").replace("~", "_"))
  got = subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", path, rev],
                       capture_output=True, text=True)
  if got.returncode:
    raise app.UsageError(f"cannot check out revision {rev!r}: {got.stderr.strip()}")
  return path


def main(argv) -> int:
  del argv
  if FLAGS.worker:
    return worker()
  if not FLAGS.base:
    raise app.UsageError("--base is required: the revision to compare against")
  tmp = tempfile.mkdtemp(prefix="ab_speed_")
  token = os.path.join(tmp, "token")
  made = []
  try:
    trees = {"A": _checkout(FLAGS.base, tmp)}
    made.append(trees["A"])
    if FLAGS.head:
      trees["B"] = _checkout(FLAGS.head, tmp)
      made.append(trees["B"])
    else:
      trees["B"] = ROOT
    names = {"A": FLAGS.base, "B": FLAGS.head or "working tree"}
    procs = {}
    for me, other in (("A", "B"), ("B", "A")):
      env = dict(os.environ, PYTHONPATH=trees[me])
      cmd = [sys.executable, os.path.abspath(__file__), f"--worker={me}", f"--other={other}",
             f"--token={token}", f"--model={FLAGS.model}", f"--sizes={FLAGS.sizes}",
             f"--ks={','.join(FLAGS.ks)}", f"--rounds={FLAGS.rounds}"]
      procs[me] = subprocess.Popen(cmd, cwd=trees[me], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
    for me, p in procs.items():  # both traced before the first round is timed
      while not os.path.exists(f"{token}.ready.{me}"):
        if p.poll() is not None:
          raise RuntimeError(f"version {me} ({names[me]}) exited with {p.returncode} "
                             "before its first round")
        time.sleep(0.5)
    _write(token, "A")
    rows = {}
    for me, p in procs.items():
      out, _ = p.communicate()
      if p.returncode:
        raise RuntimeError(f"version {me} ({names[me]}) exited with {p.returncode}")
      rows[me] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
  finally:
    for path in made:
      subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path],
                     capture_output=True)
    shutil.rmtree(tmp, ignore_errors=True)
  print(f"{FLAGS.model}: A = {names['A']}, B = {names['B']}; {FLAGS.rounds} rounds each, "
        "taken in turns")
  same = True
  for k in (int(x) for x in FLAGS.ks):
    got = {me: [r for r in rows[me] if r["k"] == k] for me in rows}
    for me in ("A", "B"):
      print(f"  k={k} {me}: plan " + " ".join(f"{r['plan_s']:.2f}" for r in got[me]) +
            " s; memory " + " ".join(f"{r['memory_s']:.2f}" for r in got[me]) + " s")
    med = {me: (statistics.median(r["plan_s"] for r in got[me]),
                statistics.median(r["memory_s"] for r in got[me])) for me in got}
    results = {(r["bytes"], r["worst"]) for me in got for r in got[me]}
    same = same and len(results) == 1
    print(f"  k={k} medians: plan {med['A'][0]:.2f} -> {med['B'][0]:.2f} s, memory estimate "
          f"{med['A'][1]:.2f} -> {med['B'][1]:.2f} s, together {sum(med['A']):.2f} -> "
          f"{sum(med['B']):.2f} s; " +
          ("the same plan and peak" if len(results) == 1 else
           f"DIFFERENT (bytes, worst peak): {sorted(results)}"))
  return 0 if same else 1


if __name__ == "__main__":
  app.run(main)
