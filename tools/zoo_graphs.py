"""The benchmarks' models: zoo keys (paper or tiny sizes) to traced training steps."""

from __future__ import annotations

import time
import typing

GPT24 = dict(layers=24, d_model=2048, heads=16, seq=1024, vocab=50257, batch=8, tied=True)
# A stacked LSTM language model unrolled for 256 steps (PaSE's RNNLM configuration):
# ops with hundreds of inputs (the unstack's gradient, the logits' concat, the AddN of
# 256 per-step weight gradients).
RNNLM256 = dict(layers=2, hidden=2048, steps=256, batch=64, vocab=100000)
# A 12-layer pre-norm Keras 3 Transformer (MultiHeadAttention, gelu MLP, Adam): the
# zoo's GPT in its Keras flavour at PaSE's Transformer width; about 11,600 ops traced.
KERAS_GPT12 = dict(layers=12, d_model=512, heads=8, seq=256, vocab=32000, batch=64, tied=True)


# Keys that are not Tofu's paper models: key -> (zoo family, build style, paper size).
OTHERS = {
    "gpt24": ("gpt", {}, GPT24),
    "rnnlm256": ("lstm", {}, RNNLM256),
    "keras_gpt12": ("gpt", dict(flavor="keras", optimizer="adam"), KERAS_GPT12),
}


# keras.applications models at PaSE's configuration (batch 128, Keras Adam; pase_step):
# they have no tiny size.
APPLICATIONS = ("resnet101", "inceptionv3")


def build_graph(key: str, sizes: str):
  """``(step, traced graph, trace seconds)`` of a paper key ("wresnet152"), one of
  ``OTHERS`` or of ``APPLICATIONS``, at its own size or (``sizes="tiny"``) its family's
  tiny size, same style."""
  import tf_tofu
  from tf_tofu import models
  if key in APPLICATIONS:
    if sizes == "tiny":
      raise ValueError(f"{key!r} (keras.applications) has no tiny size; use --sizes=paper")
    step = pase_step(key)
  elif key in OTHERS:
    family, style, size = OTHERS[key]
    step = (models.tiny(family, materialize=False, **style) if sizes == "tiny" else
            models.build(family, materialize=False, **style, **size))
  elif sizes == "tiny":  # "wresnet152" -> the tiny "wresnet"
    step = models.tiny(max((f for f in models.TINY if key.startswith(f)), key=len),
                       materialize=False)
  else:
    step = models.paper(key)
  start = time.perf_counter()
  with step.context():
    graph = tf_tofu.trace(step.fn, *step.input_signature)
  return step, graph, time.perf_counter() - start


def _alexnet():
  """AlexNet as a Keras 3 model (224 x 224 inputs)."""
  import keras
  from tf_tofu.models.keras_catalog import CLASSES
  L = keras.layers
  return keras.Sequential([
      keras.Input((224, 224, 3)),
      L.Conv2D(96, 11, strides=4, activation="relu"), L.MaxPooling2D(3, 2),
      L.Conv2D(256, 5, padding="same", activation="relu"), L.MaxPooling2D(3, 2),
      L.Conv2D(384, 3, padding="same", activation="relu"),
      L.Conv2D(384, 3, padding="same", activation="relu"),
      L.Conv2D(256, 3, padding="same", activation="relu"), L.MaxPooling2D(3, 2),
      L.Flatten(), L.Dense(4096, activation="relu"), L.Dense(4096, activation="relu"),
      L.Dense(CLASSES)])


def pase_step(name: str):
  """The training step of one of PaSE's five models at PaSE's configuration
  (``tools/bench_pase.py``): transformer, resnet101, inceptionv3, alexnet, rnnlm."""
  from tf_tofu import models
  from tf_tofu.models import keras_catalog
  if name == "transformer":
    return models.build("gpt", materialize=False, optimizer="adam", layers=12, d_model=512,
                        heads=8, seq=256, vocab=32000, batch=64)
  if name == "rnnlm":
    return models.build("lstm", materialize=False, **RNNLM256)
  if name == "alexnet":
    return keras_catalog.train_step(_alexnet, "AlexNet", batch=128)
  app_name, size = {"resnet101": ("ResNet101", 224), "inceptionv3": ("InceptionV3", 299)}[name]
  return keras_catalog.train_step(keras_catalog.application(app_name, size), app_name,
                                  batch=128)


def tiny_zoo_views(optimizer: str = "adam"):
  """Every tiny zoo model in both flavours (plain TF, Keras), traced:
  ``(key, flavor, graph view, its Describer)`` in key order."""
  from tf_tofu import api, models
  from tf_tofu.graph import view
  from tf_tofu.opdefs.registry import Describer
  for key in sorted(models.TINY):
    for flavor in models.FLAVORS:
      step = models.tiny(key, flavor=flavor, optimizer=optimizer)
      with step.context():
        graph = api.as_graph(step.fn, step.input_signature)
      describer = Describer()
      yield key, flavor, view.from_tofu_graph(graph, describer), describer


class ColdRun(typing.NamedTuple):
  """One :func:`cold_run`: the plan, the plan call's seconds (the view read included), the
  seconds of reading the graph into the view alone, and the memory estimate with its
  seconds (None when not asked for)."""

  plan: typing.Any
  seconds: float
  reading: float
  memory: typing.Optional[dict]
  memory_seconds: typing.Optional[float]


def cold_plan(graph, devices, **options):
  """``(plan, seconds)``: plans the traced ``graph`` cold, as a user's first
  ``tf_tofu.plan`` would (a new view and Describer, after ``gc.collect()`` so that
  earlier garbage is not billed to it; no memory estimate), timing the plan call
  alone (tracing excluded)."""
  run = cold_run(graph, devices, **options)
  return run.plan, run.seconds


def cold_plan_with_memory(graph, devices, **options):
  """``(plan, seconds, memory, memory seconds)``: :func:`cold_plan`, then the memory
  estimate a default ``tf_tofu.plan`` adds (``layout.memory.plan_memory`` with the plan's
  view and Describer), timed on its own."""
  run = cold_run(graph, devices, memory=True, **options)
  return run.plan, run.seconds, run.memory, run.memory_seconds


def cold_run(graph, devices, memory: bool = False, **options) -> ColdRun:
  """:func:`cold_plan` (and, with ``memory``, the estimate), also timing the part of the
  plan call spent reading the graph into the search's view (every op described, before
  any level is searched: what planning at op granularity pays whatever the search).

  The plan and the estimate run in one ``collector.bulk`` block, as in ``tf_tofu.plan``:
  in two blocks, the first block's exit lets a middle-generation collection of the
  plan's whole state (Describer and view, still held) fall at the end of the second,
  which ``tf_tofu.plan`` does not pay (its block ends after they are dropped); measured
  on InceptionV3 at k = 8, 0.5-0.6 s of a 1.5 s estimate."""
  import gc
  from tf_tofu import api
  from tf_tofu.core import collector
  from tf_tofu.graph import view
  from tf_tofu.layout import memory as memory_model
  from tf_tofu.opdefs.registry import Describer
  gc.collect()
  mem = mem_seconds = None
  with collector.bulk():  # as tf_tofu.plan runs them
    start = time.perf_counter()
    describer = Describer()
    sgraph = view.from_tofu_graph(graph, describer)
    reading = time.perf_counter() - start
    plan = api.plan_view(sgraph, devices, describer=describer, memory=False, **options)
    seconds = time.perf_counter() - start
    if memory:
      start = time.perf_counter()
      mem = memory_model.plan_memory(sgraph, plan, describer)
      mem_seconds = time.perf_counter() - start
  return ColdRun(plan, seconds, reading, mem, mem_seconds)
