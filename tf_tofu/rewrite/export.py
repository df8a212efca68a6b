"""A partitioned step as a SavedModel: shards as variables, one signature over whole tensors.

``save(partitioned, values, path)`` writes a SavedModel whose module holds
one ``tf.Variable`` per variable shard (on its device, from ``values``) and
one signature, ``serving_default``, taking the original feeds whole (named
after them) and returning the original fetches whole.  Inside, each feed is
sliced into the per-device boxes on its device, the partitioned graph runs
(its updates write the shards), and each fetch is concatenated from its
shards (``assemble.guillotine``) on the device of its first shard.
``tf.saved_model.load(path).signatures["serving_default"](**feeds)`` runs it
on the devices the plan names (they must exist where it is loaded).
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from tf_tofu.rewrite import assemble, execute
from tf_tofu.rewrite.partition import Partitioned


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
  tree = assemble.guillotine(Region.whole(p.shapes[t]), [s.box for s in parts])

  def emit(node):
    if isinstance(node, int):
      return shards[node]
    dim, subs = node
    return tf.concat([emit(n) for n in subs], axis=dim)

  with tf.device(p.devices[parts[0].device]):
    return emit(tree)


class PartitionedModule(tf.Module):
  """The shards and the step that trains them; see the module docstring."""

  def __init__(self, p: Partitioned, values: Mapping[str, np.ndarray],
               fetches: Sequence[str]):
    super().__init__(name="tofu_partitioned")
    self.shards = execute.create_shards(p, values)
    run = execute.wrap(p, list(fetches), self.shards)
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
      return {signature_name(t): _assembled(
          p, t, [got[f.tensor if ":" in f.tensor else f.tensor + ":0"] for f in p.fetches[t]])
          for t in fetches}

    self.step = tf.function(step, input_signature=specs)


def save(p: Partitioned, values: Mapping[str, np.ndarray], path: str,
         fetches: Sequence[str]) -> None:
  """Writes the SavedModel of ``p`` with shards from ``values`` (handle -> whole value)."""
  module = PartitionedModule(p, values, fetches)
  tf.saved_model.save(module, path, signatures={"serving_default": module.step})
