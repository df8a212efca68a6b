"""A partitioned step as a SavedModel: shards as variables, one signature over whole tensors.

``save(partitioned, values, path, fetches, signature_key, output_names)``
writes a SavedModel whose module holds one ``tf.Variable`` per variable shard
(on its device, from ``values``) and one signature, under the original
step's key (``"train"`` stays ``"train"``; default ``serving_default``),
taking the original feeds whole (named after them) and returning the
original fetches whole, under the original output names (``{"loss": ...}``
stays ``{"loss": ...}``; default: named after the tensors).  The shards are
``module.shards[variable name]``, a list in device order, each named
``<variable>/tofu_shard_<device>``.  Inside the signature each feed is
sliced into the per-device boxes on its device, the partitioned graph runs
(its updates write the shards), and each fetch is concatenated from its
shards (``layout.guillotine``) on the device of its first shard.

The shards' devices are recorded (``SAVE_VARIABLE_DEVICES``).  TensorFlow
puts them back only when asked: load with :data:`LOAD_OPTIONS`, with soft
device placement on (TensorFlow's default), and the devices the plan names
must exist there.  A plain ``tf.saved_model.load(path)`` gives the same
values with every shard on the default device.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_tofu.core.errors import TofuError
from tf_tofu.layout import guillotine
from tf_tofu.rewrite import execute
from tf_tofu.rewrite.partition import Partitioned

_DEVICES = tf.saved_model.experimental.VariablePolicy.SAVE_VARIABLE_DEVICES
SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_variable_policy=_DEVICES)
LOAD_OPTIONS = tf.saved_model.LoadOptions(experimental_variable_policy=_DEVICES)


def signature_name(tensor: str) -> str:
  """A tensor name as a signature key: ``"x:0"`` -> ``"x"``, ``"dense/out:1"`` ->
  ``"dense_out_1"``."""
  if tensor.endswith(":0"):
    tensor = tensor[:-2]
  return re.sub(r"[^A-Za-z0-9_]", "_", tensor).strip("_") or "t"


def _assembled(p: Partitioned, t: str, shards: Sequence[tf.Tensor]) -> tf.Tensor:
  parts = p.fetches[t]
  if len(parts) == 1:
    return shards[0]
  from tf_tofu.core.regions import Region
  whole = Region.whole(p.shapes[t])
  tree = guillotine.tree(whole, [s.box for s in parts])
  with tf.device(p.devices[parts[0].device]):
    return guillotine.fold(tree, whole, lambda i: shards[i],
                           lambda dim, xs, _: tf.concat(xs, axis=dim))


class PartitionedModule(tf.Module):
  """The shards and the step that trains them; see the module docstring."""

  def __init__(self, p: Partitioned, values: Mapping[str, np.ndarray],
               fetches: Sequence[str], output_names: Optional[Sequence[str]] = None):
    super().__init__(name="tofu_partitioned")
    by_placeholder = execute.create_shards(p, values, name_prefix=None)
    self.shards = {v.name: [by_placeholder[f"{s.placeholder}:0"] for s in v.shards]
                   for v in p.variables.values()}
    names = list(output_names) if output_names is not None else [signature_name(t)
                                                                 for t in fetches]
    if len(names) != len(fetches) or len(set(names)) != len(names):
      raise TofuError(f"output names {names} must be {len(fetches)} distinct names, one per "
                      f"fetch {list(fetches)}")
    run = execute.wrap(p, list(fetches), by_placeholder)
    fn, placeholders, shard_names = run.function, run.placeholders, run.shard_names
    feeds = list(p.feeds)
    specs = [tf.TensorSpec(p.shapes[t], tf.as_dtype(p.dtypes[t]), name=signature_name(t))
             for t in feeds]

    def step(*whole):
      by_feed = dict(zip(feeds, whole))
      args = []
      for s, t in placeholders:
        with tf.device(p.devices[s.device]):
          args.append(tf.slice(by_feed[t], [iv.lo for iv in s.box.intervals],
                               list(s.box.shape)))
      got = dict(zip(shard_names, fn(*args)))
      return {name: _assembled(
          p, t, [got[f.tensor if ":" in f.tensor else f.tensor + ":0"] for f in p.fetches[t]])
          for name, t in zip(names, fetches)}

    # The step's loops and the assembly are over static Python structures (the
    # shards, the guillotine tree): traced as written, not converted by autograph.
    self.step = tf.function(step, input_signature=specs, autograph=False)


def save(p: Partitioned, values: Mapping[str, np.ndarray], path: str,
         fetches: Sequence[str], signature_key: str = "serving_default",
         output_names: Optional[Sequence[str]] = None) -> None:
  """Writes the SavedModel of ``p`` with shards from ``values`` (handle -> whole value),
  one signature ``signature_key`` returning ``fetches`` under ``output_names``."""
  module = PartitionedModule(p, values, fetches, output_names)
  tf.saved_model.save(module, path, signatures={signature_key: module.step},
                      options=SAVE_OPTIONS)
  _record_devices(path, {f"{v.name}/tofu_shard_{s.device}": p.devices[s.device]
                         for v in p.variables.values() for s in v.shards})


def _record_devices(path: str, devices: Mapping[str, str]) -> None:
  """Writes each shard's plan device into the SavedModel's object graph.

  TensorFlow records where a variable was when saved; where the plan's devices
  do not exist (planning for another machine) a shard is created on the
  default device, so the plan's device is written here instead.
  """
  import os
  from tensorflow.core.protobuf import saved_model_pb2
  pb = os.path.join(path, "saved_model.pb")
  saved = saved_model_pb2.SavedModel()
  with open(pb, "rb") as f:
    saved.ParseFromString(f.read())
  found = set()
  for node in saved.meta_graphs[0].object_graph_def.nodes:
    if node.WhichOneof("kind") == "variable" and node.variable.name in devices:
      node.variable.device = devices[node.variable.name]
      found.add(node.variable.name)
  missing = sorted(set(devices) - found)
  if missing:
    raise AssertionError(f"shards {missing[:3]} are not in the SavedModel written to {path}")
  with open(pb, "wb") as f:
    f.write(saved.SerializeToString())
