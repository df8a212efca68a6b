"""``tf_tofu.function``: a training step that runs partitioned across devices.

    step = tf_tofu.function(train_step, devices=8)   # or a list of device names
    loss = step(x, y)             # traces, plans and rewrites once per input signature
    step.plan(x, y)               # the Plan for that signature
    step.partitioned_graph_def(x, y)   # every node placed, with _output_shapes
    step.sync_variables()         # copy the shards back into the user's variables

Per input signature (the shapes and dtypes of the arguments) the step is
traced (:func:`tf_tofu.trace`), planned (:func:`tf_tofu.plan`'s search with
the given planner and constraints) and rewritten
(:func:`tf_tofu.rewrite.partition_graph_def`), once.

Variables: on the first call the shards of every variable the step captures
(weights, optimizer slots, counters) are created on their devices from the
variables' current values, and every later call trains the shards; the
user's variables are not touched until :meth:`Function.sync_variables`
writes the shards back into them.  Calling with another signature (another
plan, other shards) first writes the current shards back and then loads the
new ones from the user's variables, so the two never diverge.

Clusters: ``devices`` may name remote devices
(``/job:worker/replica:0/task:1/device:GPU:0``) or be a cluster (a
``tf.train.ClusterSpec``, a resolver, ``TF_CONFIG``,
``tf_tofu.core.cluster.ClusterDevices``).  Planning needs only the names; the
first call connects this process to the cluster when it is not connected yet
(bounded waits, ``core.cluster.ensure_connected``) and checks that every
device exists there.  The shards then live on the remote devices.
``topology`` (``tf_tofu.core.topology.Topology``, None: from the device names)
prices the links, and the plan's device order follows it (``tf_tofu.plan``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from tf_tofu import api, graph as graph_lib
from tf_tofu.core.errors import TofuError
from tf_tofu.core import cluster as cluster_lib
from tf_tofu.core import devices as devices_lib
from tf_tofu.core import collector, progress
from tf_tofu.core.topology import Topology
from tf_tofu.core.plan import Plan
from tf_tofu.graph import ingest as ingest_tf, view
from tf_tofu.opdefs.registry import Describer
from tf_tofu.ops import shapes as shapes_lib
from tf_tofu.rewrite import execute, memory
from tf_tofu.rewrite.convert import PLAIN
from tf_tofu.rewrite.partition import Partitioned
from tf_tofu.search import planners


@dataclasses.dataclass
class _Entry:
  """Everything made for one input signature."""

  graph: graph_lib.TofuGraph
  search_graph: view.SearchGraph
  structured_outputs: Any
  plan: Plan
  partitioned: Partitioned
  run: Optional[Callable] = None
  shards: Optional[dict] = None
  memory: Optional[dict] = None
  ran: bool = False  # the partitioned function has run once (TensorFlow prepared it)


def _spec_of(arg: Any) -> tf.TensorSpec:
  if isinstance(arg, tf.TensorSpec):
    return arg
  t = tf.convert_to_tensor(arg)
  return tf.TensorSpec(t.shape, t.dtype)


class Function:
  """A training step partitioned across ``devices``; see the module docstring."""

  def __init__(self, fn: Callable, devices: devices_lib.Devices, planner: str = "tofu",
               comm: str = PLAIN, constraints: Optional[api.Constraints] = None,
               describer: Optional[Describer] = None, topology: Optional[Topology] = None,
               connect_timeout_s: float = 30.0, **options):
    planners.check(planner)
    api.check_options(options)
    self.options = options
    self.fn = fn
    self.topology = topology
    self.cluster = cluster_lib.spec_of_devices(devices)
    self.connect_timeout_s = connect_timeout_s
    self._connected = False
    self._late_connect = False  # this Function connected the process (module docstring)
    self._devices: Optional[tuple[str, ...]] = None
    self._devices_arg = devices
    if not (cluster_lib.is_cluster(devices)
            and not isinstance(devices, cluster_lib.ClusterDevices)):
      self._devices = devices_lib.resolve(devices, must_exist=True)
    self.planner = planner
    self.comm = comm
    self.constraints = dict(constraints or {})
    self.describer = describer or Describer()
    self._entries: dict[tuple, _Entry] = {}
    self._active: Optional[_Entry] = None

  @property
  def devices(self) -> tuple[str, ...]:
    """The device names the step runs on.  A cluster given without the number of
    devices per task (a ClusterSpec, resolver or TF_CONFIG) is connected to first
    (bounded), to list its devices."""
    if self._devices is None:
      if not cluster_lib.connected_devices(self.cluster):
        cluster_lib.connect(self.cluster, timeout_s=self.connect_timeout_s)
      self._devices = devices_lib.resolve(self._devices_arg)
    return self._devices

  # ---------------------------------------------------------------- per signature

  @collector.bulk()
  def _entry(self, args: Sequence[Any]) -> _Entry:
    specs = [_spec_of(a) for a in args]
    key = tuple((tuple(s.shape.as_list()), s.dtype.name) for s in specs)
    if key not in self._entries:
      with progress.phase("tracing the step"):
        cf = ingest_tf.concrete_function(self.fn, specs)
        g = graph_lib.trace(cf)
      missing = [v.name for v in g.variables if v.handle not in g.live_handles]
      if missing:
        raise TofuError(f"variables {missing[:3]} of the step have no live value to shard")
      outputs = cf.structured_outputs
      n_out = 0 if outputs is None else len(tf.nest.flatten(outputs, expand_composites=True))
      if n_out != len(g.fetches):  # checked before planning, so before any shard is updated
        raise TofuError(f"the step returns {n_out} tensors but {len(g.fetches)} were fetched "
                         "from its graph; return tensors (or nothing), not Python values")
      job = api.partition(g, devices=self.devices, planner=self.planner, comm=self.comm,
                          constraints=self.constraints, describer=self.describer,
                          topology=self.topology, **self.options)
      self._entries[key] = _Entry(g, job.view, outputs, job.plan, job.partitioned)
    return self._entries[key]

  def plan(self, *args: Any) -> Plan:
    """The Plan for the signature of ``args`` (tensors, arrays or tf.TensorSpecs)."""
    return self._entry(args).plan

  @collector.bulk()
  def memory(self, *args: Any) -> dict:
    """The per-device peak-memory estimate of the rewrite for the signature of ``args``
    (``tf_tofu.rewrite.memory.plan_memory``; made on first request: it sizes every node
    of the partitioned graph).  ``plan(...).report(memory=...)`` shows it."""
    e = self._entry(args)
    if e.memory is None:
      with progress.phase("estimating the memory per device"):
        e.memory = memory.plan_memory(e.graph, e.partitioned)
    return e.memory

  def partitioned(self, *args: Any) -> Partitioned:
    """The rewrite for the signature of ``args``, with its feed, fetch and variable maps."""
    return self._entry(args).partitioned

  def traced(self, *args: Any) -> tuple[graph_lib.TofuGraph, view.SearchGraph]:
    """The ingested step for the signature of ``args``, and the search's view of it."""
    e = self._entry(args)
    return e.graph, e.search_graph

  def partitioned_graph_def(self, *args: Any):
    """The partitioned GraphDef, every node with a device and ``_output_shapes``."""
    return shapes_lib.with_output_shapes(self._entry(args).partitioned.graph_def)

  # ---------------------------------------------------------------- variables

  def _connect(self) -> None:
    """Before the first shard is made: connects to the cluster of remote devices (when
    this process is not connected yet; bounded) and checks that they exist there."""
    if not self._connected:
      from tensorflow.python.eager import context
      before = context.context().get_server_def() is None
      cluster_lib.ensure_connected(self.devices, self.cluster, self.connect_timeout_s)
      self._late_connect = before and context.context().get_server_def() is not None
      self._connected = True

  def _assign_user(self, graph: graph_lib.TofuGraph, values) -> None:
    """Writes ``values`` into the user's variables.  After this Function connected the
    process to a cluster, an AssignVariableOp on a variable created before the
    connection is silently lost (TensorFlow 2.21, measured; AssignAdd/AssignSub
    work), so it then writes ``v -= v; v += value``: exact for finite values."""
    if not self._late_connect:
      graph.assign_variables(values)
      return
    by_handle = {v.handle: v for v in graph.variables}
    for h, value in values.items():
      live = graph.live_handles[h]
      handle = live.handle if hasattr(live, "handle") else live
      dtype = tf.as_dtype(by_handle[h].dtype)
      value = np.asarray(value)
      old = tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)
      if not (dtype.is_floating or dtype.is_integer) or not (
          np.all(np.isfinite(value)) and np.all(np.isfinite(old.numpy()))):
        raise TofuError(f"variable {by_handle[h].name!r} ({dtype.name}) cannot be written "
                        "after this process connected to the cluster under it (TensorFlow "
                        "drops such assignments); connect first (tf_tofu.core.cluster."
                        "connect), then create the model")
      tf.raw_ops.AssignSubVariableOp(resource=handle, value=old)
      tf.raw_ops.AssignAddVariableOp(resource=handle, value=tf.constant(value, dtype))

  @collector.bulk()
  def _activate(self, e: _Entry) -> None:
    if self._active is e:
      return
    self._connect()
    self.sync_variables()
    values = e.graph.variable_values(list(e.partitioned.variables))
    if e.shards is None:
      with progress.phase(f"creating shards and importing {len(e.partitioned.graph_def.node):,} "
                          "nodes"):
        e.shards = execute.create_shards(e.partitioned, values)
        e.run = execute.wrap(e.partitioned, list(e.graph.fetches), e.shards)
    else:
      self._load(e, values)
    self._active = e

  @staticmethod
  def _load(e: _Entry, values) -> None:
    for h, v in e.partitioned.variables.items():
      for s in v.shards:
        e.shards[f"{s.placeholder}:0"].assign(values[h][s.box.slices()])

  def load_variables(self) -> None:
    """Reads the user's variables into the shards (after they changed outside the
    partitioned step: a checkpoint restored, weights set by hand)."""
    e = self._active
    if e is not None:
      self._load(e, e.graph.variable_values(list(e.partitioned.variables)))

  def sync_variables(self) -> None:
    """Writes the current shards back into the user's variables (training goes on with
    the shards)."""
    e = self._active
    if e is None:
      return
    self._assign_user(e.graph, execute.assemble_variables(e.partitioned, e.shards))

  @property
  def shard_variables(self) -> dict[str, tf.Variable]:
    """The shards the current signature trains: resource placeholder -> tf.Variable."""
    return dict(self._active.shards) if self._active is not None else {}

  # ---------------------------------------------------------------- call

  def __call__(self, *args: Any):
    e = self._entry(args)
    self._activate(e)
    values = [np.asarray(a) for a in args]
    first = progress.phase("first run (TensorFlow optimises the partitioned graph)")
    with first if not e.ran else contextlib.nullcontext():
      got = e.run(dict(zip(e.graph.feeds, values)))
    e.ran = True
    if e.structured_outputs is None:
      return None  # a step that returns nothing (its updates ran)
    flat = [tf.constant(got[t]) for t in e.graph.fetches]
    return tf.nest.pack_sequence_as(e.structured_outputs, flat, expand_composites=True)


def function(fn: Optional[Callable] = None, *, devices: devices_lib.Devices,
             planner: str = "tofu", comm: str = PLAIN,
             constraints: Optional[api.Constraints] = None, **options):
  """A :class:`Function` for ``fn``; also usable as ``@tf_tofu.function(devices=8)``.

  Args:
    fn: the training step: a ``tf.function`` or a Python callable that runs
      one step (forward, gradients, optimizer update) and returns the loss.
    devices: an int k (the first k local accelerators, or logical CPU devices
      when there are not that many), a list of device names (remote ones too), or
      a cluster (module docstring).
    planner: ``"tofu"`` or a baseline (``tf_tofu.PLANNERS``).
    comm: ``"plain"`` or ``"collective"`` communication.
    constraints: user constraints for the search (see ``tf_tofu.plan``).
    **options: further search options (``tf_tofu.search.tofu.SearchOptions``
      fields, e.g. ``never_worse=True``), ``topology=`` (a
      ``tf_tofu.core.topology.Topology``) and ``connect_timeout_s=`` (the bound on
      connecting to a cluster, 30 s).
  """
  if fn is None:
    return lambda f: Function(f, devices, planner, comm, constraints, **options)
  return Function(fn, devices, planner, comm, constraints, **options)
