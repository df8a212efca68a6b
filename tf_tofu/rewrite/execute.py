"""Running a partitioned GraphDef: feed slices in, shards out, concatenated on the host.

``wrap(partitioned)`` imports the GraphDef inside ``tf.compat.v1.wrap_function``
with every per-device placeholder mapped to a function argument (docs/design.md
section 3) and returns a callable from whole feed values to whole fetch
values.  The host slices each feed into the per-device boxes and places each
slice on its device before the call, and concatenates the fetched shards
after it; neither crosses a device inside the graph.  ``Partitioned.targets``
(the updates and collectives) run with every call.

Variables live as shards: ``create_shards`` makes one ``tf.Variable`` per
device holding its box of the whole value (on that device), ``wrap`` binds
each resource placeholder of the graph to its shard's handle, and
``assemble_variables`` reads the shards back into whole values (the host
concatenates one shard per distinct box).

Grappler optimises the imported function on its first call, with the
options of the caller's context except four defaults (``grappler_config``):
one meta-optimizer iteration instead of two; no constant folding (ingestion
already folded the step's constants, ``tf_tofu.graph.ingest``, and the
rewrite adds none to fold: its constants are pooled, its slices and concats
read runtime values); when every device is a CPU, no memory optimizer (its
swapping and recomputation target accelerator memory); and when every device
is a CPU and no node asks for a channels-first layout, no layout optimizer
(it only converts layouts for GPUs, or NCHW ops for CPUs).  On a partitioned
graph of tens of thousands of nodes these cost nearly half of the first call
and did not change the time of a step (MobileNetV2, ResNet50 and GPT-12,
docs/benchmarks.md; constant folding alone 1.4-2.6 s of their first calls).
An option the user set explicitly is kept.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.eager import context

from tf_tofu.rewrite.partition import Partitioned

ShardVariables = Mapping[str, tf.Variable]  # resource placeholder tensor -> its shard


def _tensor_name(ref: str) -> str:
  return ref if ":" in ref else ref + ":0"


def feed_slices(p: Partitioned, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Per-device placeholder tensor name -> the slice of its feed it must receive."""
  missing = sorted(set(p.feeds) - set(values))
  if missing:
    raise ValueError(f"no value for feeds {missing}")
  out = {}
  for t, shards in p.feeds.items():
    v = np.asarray(values[t])
    if tuple(v.shape) != tuple(p.shapes[t]):
      raise ValueError(f"feed {t!r} has shape {tuple(p.shapes[t])}, got a value of {v.shape}")
    for s in shards:
      out[_tensor_name(s.placeholder)] = v[s.box.slices()]
  return out


def assemble_fetches(p: Partitioned, shard_values: Mapping[str, np.ndarray],
                     fetches: Optional[Sequence[str]] = None) -> dict[str, np.ndarray]:
  """Whole fetch values from their shards (keyed by shard tensor name)."""
  out = {}
  for t in fetches if fetches is not None else p.fetches:
    whole = np.zeros(p.shapes[t], dtype=tf.as_dtype(p.dtypes[t]).as_numpy_dtype)
    for s in p.fetches[t]:
      whole[s.box.slices()] = shard_values[_tensor_name(s.tensor)]
    out[t] = whole
  return out


def create_shards(p: Partitioned, values: Mapping[str, np.ndarray],
                  name_prefix: Optional[str] = "tofu_shard") -> dict[str, tf.Variable]:
  """One variable per device and variable, holding the device's box of ``values[handle]``,
  keyed by its placeholder tensor; named ``<prefix>/<variable>/d<device>``, or
  ``<variable>/tofu_shard_<device>`` with no prefix."""
  missing = sorted(set(p.variables) - set(values))
  if missing:
    raise ValueError(f"no value for variables {[p.variables[h].name for h in missing]}")
  out = {}
  for h, v in p.variables.items():
    whole = np.asarray(values[h])
    if tuple(whole.shape) != tuple(v.shape):
      raise ValueError(f"variable {v.name!r} has shape {v.shape}, got a value of {whole.shape}")
    for s in v.shards:
      with tf.device(p.devices[s.device]):
        out[_tensor_name(s.placeholder)] = tf.Variable(
            whole[s.box.slices()].astype(tf.as_dtype(v.dtype).as_numpy_dtype),
            name=(f"{name_prefix}/{v.name}/d{s.device}" if name_prefix
                  else f"{v.name}/tofu_shard_{s.device}"), trainable=False)
  return out


def assemble_variables(p: Partitioned, shards: ShardVariables) -> dict[str, np.ndarray]:
  """Whole value of every variable (by handle tensor), from its shards."""
  out = {}
  for h, v in p.variables.items():
    whole = np.zeros(v.shape, dtype=tf.as_dtype(v.dtype).as_numpy_dtype)
    for s in v.distinct():
      whole[s.box.slices()] = shards[_tensor_name(s.placeholder)].numpy()
    out[h] = whole
  return out


def grappler_config(base: config_pb2.ConfigProto, devices: Sequence[str],
                    channels_first: bool = False) -> config_pb2.ConfigProto:
  """``base`` with the partitioned graph's Grappler defaults (module docstring);
  ``channels_first``: some node of the graph has an ``NC...`` data format."""
  config = config_pb2.ConfigProto()
  config.CopyFrom(base)
  rewrite = config.graph_options.rewrite_options
  if rewrite.meta_optimizer_iterations == rewriter_config_pb2.RewriterConfig.DEFAULT_NUM_ITERS:
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
  if rewrite.constant_folding == rewriter_config_pb2.RewriterConfig.DEFAULT:
    rewrite.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
  all_cpu = all((tf.DeviceSpec.from_string(d).device_type or "").upper() == "CPU"
                for d in devices)
  if all_cpu and rewrite.memory_optimization == rewriter_config_pb2.RewriterConfig.DEFAULT_MEM_OPT:
    rewrite.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
  if (all_cpu and not channels_first
      and rewrite.layout_optimizer == rewriter_config_pb2.RewriterConfig.DEFAULT):
    rewrite.layout_optimizer = rewriter_config_pb2.RewriterConfig.OFF
  return config


def channels_first(graph_def) -> bool:
  """Whether some node of ``graph_def`` has a channels-first ``data_format`` (``NC...``)."""
  return any(n.attr["data_format"].s.startswith(b"NC") for n in graph_def.node
             if "data_format" in n.attr)


@contextlib.contextmanager
def _call_options(devices: Sequence[str], nchw: bool = False):
  """Calls in this thread use ``grappler_config`` of the context's own config."""
  ctx = context.context()
  saved = ctx.function_call_options
  base = config_pb2.ConfigProto()
  base.ParseFromString(saved.config_proto_serialized)
  ctx.function_call_options = context.FunctionCallOptions(
      executor_type=saved.executor_type, config_proto=grappler_config(base, devices, nchw))
  try:
    yield
  finally:
    ctx.function_call_options = saved


_SCOPE = "import"  # the prefix of the imported nodes (TensorFlow's default)


def _without_devices(graph_def) -> tuple:
  """``graph_def`` with no device fields, and each node's device by name.

  The import places the nodes with one device function instead: TensorFlow's
  importer enters a ``tf.device`` scope per node that names a device, which
  costs more than the rest of the import on graphs of tens of thousands of
  nodes.
  """
  bare = type(graph_def)()
  bare.CopyFrom(graph_def)
  device_of = {}
  for node in bare.node:
    device_of[node.name] = node.device
    node.device = ""
  return bare, device_of


def wrap(p: Partitioned, fetches: Optional[Sequence[str]] = None,
         variables: Optional[ShardVariables] = None
         ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
  """A callable ``feeds -> fetches`` (whole numpy values) running the partitioned graph.

  ``variables`` (from :func:`create_shards`) binds every shard placeholder;
  the graph's updates write to those variables.
  """
  fetches = list(fetches if fetches is not None else p.fetches)
  variables = dict(variables or {})
  missing = sorted({_tensor_name(s.placeholder) for v in p.variables.values()
                    for s in v.shards} - set(variables))
  if missing:
    raise ValueError(f"no shard variable for {missing[:3]}; make them with create_shards")
  placeholders = [(s, t) for t, shards in p.feeds.items() for s in shards]
  shard_names = sorted({_tensor_name(s.tensor) for t in fetches for s in p.fetches[t]})
  specs = [tf.TensorSpec(s.box.shape, tf.as_dtype(p.dtypes[t])) for s, t in placeholders]
  gd, device_of = _without_devices(p.graph_def)
  nchw = channels_first(p.graph_def)

  shard_device = {_tensor_name(s.tensor): p.devices[s.device] for t in fetches
                  for s in p.fetches[t]}

  def place(op) -> str:  # an imported node's device, by its name in the GraphDef
    return device_of.get(op.name.partition("/")[2], "")

  def body(*args):
    input_map = {_tensor_name(s.placeholder): a for (s, _), a in zip(placeholders, args)}
    graph = tf.compat.v1.get_default_graph()
    for name, var in variables.items():
      input_map[name] = graph.capture(var.handle)
    with tf.compat.v1.device(place):
      got = tf.graph_util.import_graph_def(gd, input_map=input_map, name=_SCOPE,
                                           return_elements=shard_names + list(p.targets))
    outs, targets = got[:len(shard_names)], got[len(shard_names):]
    if not targets:
      return outs
    # The targets (updates, collectives) run with each call, whatever is fetched.
    with tf.control_dependencies(targets):
      result = []
      for name, t in zip(shard_names, outs):
        with tf.device(shard_device[name]):
          result.append(tf.identity(t))
      return result

  fn = tf.compat.v1.wrap_function(body, specs)

  def call(values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    slices = feed_slices(p, values)
    args = []
    for s, t in placeholders:
      with tf.device(p.devices[s.device]):
        args.append(tf.constant(slices[_tensor_name(s.placeholder)],
                                dtype=tf.as_dtype(p.dtypes[t])))
    with _call_options(p.devices, nchw):
      got = fn(*args)
    return assemble_fetches(p, {n: v.numpy() for n, v in zip(shard_names, got)}, fetches)

  call.function = fn                  # per-device feed slices -> fetched shards
  call.placeholders = placeholders    # its arguments: (FeedShard, feed tensor), in order
  call.shard_names = shard_names      # its results, in order
  return call
