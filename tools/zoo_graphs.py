"""The benchmarks' models: zoo keys (paper or tiny sizes) to traced training steps."""

from __future__ import annotations

import time

GPT24 = dict(layers=24, d_model=2048, heads=16, seq=1024, vocab=50257, batch=8, tied=True)


def build_graph(key: str, sizes: str):
  import tf_tofu
  from tf_tofu import models
  if sizes == "tiny":  # "wresnet152" -> the tiny "wresnet"
    family = max((f for f in models.TINY if key.startswith(f)), key=len)
    step = models.tiny(family, materialize=False)
  elif key == "gpt24":
    step = models.build("gpt", materialize=False, **GPT24)
  else:
    step = models.paper(key)
  start = time.perf_counter()
  with step.context():
    graph = tf_tofu.trace(step.fn, *step.input_signature)
  return step, graph, time.perf_counter() - start
