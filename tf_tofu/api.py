"""The public composition: trace -> search -> Plan -> rewrite, written once.

    plan = tf_tofu.plan(train_step, x_spec, y_spec, devices=8)           # a tf.function
    plan = tf_tofu.plan(tofu_graph, devices=["/GPU:0", "/GPU:1"], planner="megatron")
    print(plan.report()); open("plan.json", "w").write(plan.to_json())
    job = tf_tofu.partition(train_step, x_spec, y_spec, devices=8)     # ... and the rewrite
    job.partitioned.graph_def

:func:`plan_view` is the search step (graph view -> Plan), :func:`partition`
the whole pipeline; ``tf_tofu.function``, the ``tofu`` command and the
benchmarks call these rather than composing the stages themselves.

``constraints`` maps a tensor name to the state(s) it may take (``"cut(0)"``,
``"rep"``, or a list of them) or an op name to the strategy it must use (an
index variable of its description, ``"replicate"``); the search honours them
at every level.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Union

from tf_tofu import graph as graph_lib
from tf_tofu.core.errors import TofuError
from tf_tofu.core import devices as devices_lib
from tf_tofu.core import collector, progress
from tf_tofu.core.plan import Plan, PlanError, link_fields, plan_from_search, priced_fields
from tf_tofu.core.topology import Topology
from tf_tofu.graph import view
from tf_tofu.layout import memory as memory_model
from tf_tofu.opdefs.registry import Describer
from tf_tofu.core.states import Cut, state_from_str
from tf_tofu.rewrite import partition_graph_def
from tf_tofu.search import budget, evaluate, planners, topology_search
from tf_tofu.search.tofu import SearchOptions

Constraints = Mapping[str, Union[str, Sequence[str]]]


# SearchOptions fields a caller may set by keyword (the constraints come resolved).
OPTIONS = ("max_table", "allow_rep_storage", "never_worse", "needs_once", "memory_budget")


def check_options(options: Mapping[str, Any]) -> None:
  """TofuError naming any keyword of ``options`` that is not a search option."""
  unknown = sorted(set(options) - set(OPTIONS))
  if unknown:
    raise TofuError(f"unknown search option(s) {unknown}; the options are {list(OPTIONS)}")


def search_options(graph: view.SearchGraph, constraints: Optional[Constraints] = None,
                   **kwargs) -> SearchOptions:
  """SearchOptions with user constraints resolved against the graph (names checked)."""
  check_options(kwargs)
  if "memory_budget" in kwargs:
    kwargs["memory_budget"] = budget.parse_memory_budget(kwargs["memory_budget"])
  tensor_states, op_strategies = {}, {}
  op_names = {o.name for o in graph.ops}
  for name, value in (constraints or {}).items():
    if name in graph.tensors:
      values = [value] if isinstance(value, str) else list(value)
      try:
        tensor_states[name] = tuple(state_from_str(v) for v in values)
      except ValueError as e:
        raise TofuError(f"constraint on tensor {name!r}: {e}") from None
    elif name in op_names:
      if not isinstance(value, str):
        raise TofuError(f"constraint on op {name!r}: give one strategy name, got {value!r}")
      op_strategies[name] = value
    else:
      raise TofuError(f"constraint names {name!r}, which is neither a tensor nor an op of the "
                       "graph (tensors are named 'op:index')")
  return SearchOptions(tensor_states=tensor_states, op_strategies=op_strategies, **kwargs)


@collector.bulk()
def as_graph(fn_or_graph: Any, signature: Sequence[Any]):
  """A TofuGraph from a TofuGraph, a tf.function / ConcreteFunction plus signature."""
  if isinstance(fn_or_graph, graph_lib.TofuGraph):
    if signature:
      raise TypeError("a TofuGraph is already traced; pass no signature")
    return fn_or_graph
  with progress.phase("tracing the step"):
    return graph_lib.trace(fn_or_graph, *signature)


def _view(tofu_graph, describer: Describer) -> view.SearchGraph:
  with progress.phase(f"describing {len(tofu_graph.ops):,} ops"):
    return view.from_tofu_graph(tofu_graph, describer)


@collector.bulk()
def plan_view(graph: view.SearchGraph, devices: devices_lib.Devices, planner: str = "tofu",
              constraints: Optional[Constraints] = None, describer: Optional[Describer] = None,
              memory: bool = True, topology: Optional[Topology] = None, **options) -> Plan:
  """Searches a Plan for a graph view (the search step of the pipeline).

  Args:
    graph: the partitioning view (``tf_tofu.graph.view.from_tofu_graph``).
    devices: an int k or a list of device names (see ``tf_tofu.core.devices.resolve``).
    planner: "tofu" or a baseline ("datapar", "allrow", "spartan", "equalchop", "megatron").
    constraints: user constraints (module docstring).
    describer: a Describer to share its cache across calls.
    memory: fill the Plan's per-device peak-memory estimate
      (``tf_tofu.layout.memory.plan_memory``, seconds on large graphs).
    topology: the links between the devices (``tf_tofu.core.topology.Topology``; None:
      classes from the device names, default bandwidths).  The factor order and the
      device order are chosen for the least predicted time (``search.topology_search``);
      with one link class that is the fewest bytes.
    **options: further SearchOptions fields (``OPTIONS``: max_table, allow_rep_storage,
      never_worse, needs_once, memory_budget: bytes per device, math.inf, or a string such as
      "16GiB" / "1.5GB" (``search.budget.parse_memory_budget``); the fewest-bytes plan
      whose estimated worst-device peak fits, replicating storage where it pays).
  """
  planners.check(planner)
  names = devices_lib.resolve(devices)
  describer = describer or Describer()
  with progress.phase(f"planning {len(graph.ops):,} ops over {len(names)} devices ({planner})"):
    result = planners.run(planner, graph, len(names), describer,
                          search_options(graph, constraints, **options))
  topology = topology or Topology()
  if options.get("memory_budget") is not None:  # other factor orders were not sized:
    result = dataclasses.replace(result, candidates=())  # only the device order moves
  result, order = topology_search.place(result, names, topology)
  the_plan = plan_from_search(result, graph, planner, order.names,
                              _links(result.evaluation, order, topology))
  if not memory:
    return the_plan
  with progress.phase("estimating the memory per device"):
    return dataclasses.replace(the_plan, memory=memory_model.plan_memory(graph, the_plan,
                                                                         describer))


def _links(ev, order, topology: Topology) -> dict:
  """The Plan's link fields for an evaluation run in device ``order``."""
  names = order.names
  return link_fields(topology_search.link_bytes(ev.pair_bytes, names, topology),
                     {c: topology.bandwidth_of(c) for c in topology.link_classes(names)},
                     order.describe() if len(topology.link_classes(names)) > 1 else "")


@collector.bulk()
def plan(fn_or_graph: Any, *signature: Any, devices: devices_lib.Devices, planner: str = "tofu",
         constraints: Optional[Constraints] = None, describer: Optional[Describer] = None,
         **options) -> Plan:
  """Plans the partition of a training step across ``devices``.

  Args:
    fn_or_graph: a TofuGraph, or a tf.function / ConcreteFunction with ``signature``.
    *signature: tf.TensorSpecs or example tensors for the function's arguments.
    devices, planner, constraints, describer, options: as for :func:`plan_view`.

  Returns:
    The Plan, with ``total_bytes``, ``proven_optimal``, ``to_json()`` and ``report()``.
  """
  describer = describer or Describer()
  graph = _view(as_graph(fn_or_graph, signature), describer)
  return plan_view(graph, devices, planner, constraints, describer, **options)


@dataclasses.dataclass(frozen=True)
class Partitioning:
  """One pass of the pipeline: the ingested step, its view, its Plan, its rewrite."""

  graph: Any          # tf_tofu.graph.TofuGraph
  view: view.SearchGraph
  plan: Plan
  partitioned: Any    # tf_tofu.rewrite.Partitioned


@collector.bulk()
def partition(fn_or_graph: Any, *signature: Any, devices: Optional[devices_lib.Devices],
              planner: str = "tofu", comm: str = "plain",
              constraints: Optional[Constraints] = None, describer: Optional[Describer] = None,
              plan_json: Optional[str] = None, topology: Optional[Topology] = None,
              **options) -> Partitioning:
  """trace -> search -> Plan -> rewrite.

  Args:
    fn_or_graph, signature: as for :func:`plan`.
    devices, planner, constraints, describer, options: as for :func:`plan_view`.
    comm: ``"plain"`` or ``"collective"`` communication in the rewrite.
    plan_json: apply this Plan (JSON, checked and re-priced by :func:`load_plan`)
      instead of searching; ``devices`` (None: the plan's own) then names the
      devices to run it on, as many as the plan has.
  """
  describer = describer or Describer()
  tofu_graph = as_graph(fn_or_graph, signature)
  graph = _view(tofu_graph, describer)
  if plan_json is not None:
    the_plan = load_plan(plan_json, graph, describer, devices=devices, topology=topology)
  else:
    the_plan = plan_view(graph, devices, planner, constraints, describer, memory=False,
                         topology=topology, **options)
  with progress.phase(f"rewriting for {len(the_plan.devices)} devices"):
    p = partition_graph_def(graph, the_plan, describer, comm=comm,
                            fetches=list(tofu_graph.fetches))
  return Partitioning(tofu_graph, graph, the_plan, p)


def load_plan(text: str, graph, describer: Optional[Describer] = None,
              devices: Optional[devices_lib.Devices] = None,
              topology: Optional[Topology] = None) -> Plan:
  """A Plan read from JSON (maybe edited by hand), checked against ``graph`` and re-priced.

  Args:
    text: the Plan JSON.
    graph: the search view (``search.view.SearchGraph``) of the graph it is for.
    describer: a Describer to share its cache.
    devices: devices to run the plan on instead of the file's (as many as it has).
    topology: prices the bytes per link class of the plan's devices, in its order
      (None: classes from the names, default bandwidths).

  Raises:
    PlanError: unreadable JSON, another graph, a tensor without a layout, an op
      without a strategy, a strategy the op does not have, or a device count
      that differs from the plan's.

  The bytes, per-level bytes, per-op bytes and conversions are computed again
  from the layouts and strategies (``search.evaluate``), so an edited plan
  reports what it moves; a note says when the file's figure differed.
  """
  plan = Plan.from_json(text)
  plan.check_matches(graph)
  describer = describer or Describer()
  wanted = view.laid_out_tensors(graph)
  for t in sorted(wanted - set(plan.layouts)):
    raise PlanError(f"the plan has no layout for tensor {t!r}; give it one state per level "
                    "('cut(d)' or 'rep')")
  for t in sorted(set(plan.layouts) - set(graph.tensors)):
    raise PlanError(f"the plan lays out {t!r}, which is not a tensor of this graph; remove it")
  for t, states in sorted(plan.layouts.items()):
    rank = len(graph.tensors[t].shape)
    for st in states:
      if isinstance(st, Cut) and st.dim >= rank:
        raise PlanError(f"the plan cuts tensor {t!r} (rank {rank}) on dim {st.dim}; use a dim "
                        f"below {rank} or 'rep'")
  for op in graph.ops:
    if op.kind == "compute" and op.name not in plan.strategies:
      raise PlanError(f"the plan has no strategy for op {op.name!r} ({op.op_type}); plan "
                      "the graph again or add one (an index variable of its description, or "
                      "'replicate') per level")
  try:
    ev = evaluate.evaluate(graph, plan.factors, plan.layouts, plan.strategies, describer)
  except ValueError as e:
    raise PlanError(f"the plan cannot be applied: {e}") from None
  notes = plan.notes
  if ev.total_bytes != plan.total_bytes:
    notes = notes + (f"re-priced on loading: the file said {plan.total_bytes} B per step, the "
                     f"layouts and strategies move {ev.total_bytes} B",)
  names = plan.devices
  if devices is not None:
    names = devices_lib.resolve(devices)
    if len(names) != len(plan.devices):
      raise PlanError(f"{len(names)} devices given, the plan has {len(plan.devices)}; plan "
                      "again for that many devices")
  order = topology_search.device_orders(names, plan.factors, topology or Topology())[0]
  links = _links(ev, order, topology or Topology())
  return dataclasses.replace(plan, devices=tuple(names), **priced_fields(ev), notes=notes,
                             **links,
                             proven_optimal=plan.proven_optimal and ev.total_bytes == plan.total_bytes)
