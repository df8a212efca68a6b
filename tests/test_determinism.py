"""Same input, same output: byte-identical Plan JSON and partitioned GraphDef across runs.

Each run is a fresh process with another ``PYTHONHASHSEED``, so set and dict
iteration orders that depend on string hashes differ between the runs.
"""

import os
import subprocess
import sys

from absl.testing import absltest

_SCRIPT = r"""
import hashlib, sys
import tf_tofu
from tf_tofu import models
from tf_tofu.opdefs.registry import Describer
from tf_tofu.rewrite import partition_graph_def
from tf_tofu.graph import view

for key, k, planner in (("mlp", 4, "tofu"), ("gpt", 3, "tofu"), ("lstm", 2, "spartan")):
  step = models.tiny(key, optimizer="adam")
  graph = tf_tofu.trace(step.fn, *step.input_signature)
  describer = Describer()
  plan = tf_tofu.plan(graph, devices=k, planner=planner, describer=describer)
  sgraph = view.from_tofu_graph(graph, describer)
  p = partition_graph_def(sgraph, plan, describer, fetches=list(graph.fetches))
  print(key, hashlib.sha256(plan.to_json().encode()).hexdigest(),
        hashlib.sha256(p.graph_def.SerializeToString(deterministic=True)).hexdigest())
"""


def _run(seed: str) -> str:
  env = dict(os.environ, PYTHONHASHSEED=seed, TF_CPP_MIN_LOG_LEVEL="3")
  out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600)
  if out.returncode:
    raise AssertionError(out.stderr[-3000:])
  return out.stdout


class DeterminismTest(absltest.TestCase):

  def test_plan_json_and_graph_def_do_not_depend_on_hash_order(self):
    first, second = _run("1"), _run("2")
    self.assertLen(first.splitlines(), 3)
    self.assertEqual(first, second)


if __name__ == "__main__":
  absltest.main()
