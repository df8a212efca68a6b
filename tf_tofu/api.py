"""The public entry points of planning: ``tf_tofu.plan`` and its options.

    plan = tf_tofu.plan(train_step, x_spec, y_spec, devices=8)           # a tf.function
    plan = tf_tofu.plan(tofu_graph, devices=["/GPU:0", "/GPU:1"], planner="megatron")
    print(plan.report()); open("plan.json", "w").write(plan.to_json())

``constraints`` maps a tensor name to the state(s) it may take (``"cut(0)"``,
``"rep"``, or a list of them) or an op name to the strategy it must use (an
index variable of its description, ``"replicate"``); the search honours them
at every level.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from tf_tofu import devices as devices_lib
from tf_tofu.opdefs.registry import Describer
from tf_tofu.opdefs.strategy import state_from_str
from tf_tofu.plans import Plan, plan_from_search
from tf_tofu.search import baselines, problem
from tf_tofu.search.tofu import SearchOptions

Constraints = Mapping[str, Union[str, Sequence[str]]]


def search_options(graph: problem.SearchGraph, constraints: Optional[Constraints] = None,
                   **kwargs) -> SearchOptions:
  """SearchOptions with user constraints resolved against the graph (names checked)."""
  tensor_states, op_strategies = {}, {}
  op_names = {o.name for o in graph.ops}
  for name, value in (constraints or {}).items():
    if name in graph.tensors:
      values = [value] if isinstance(value, str) else list(value)
      try:
        tensor_states[name] = tuple(state_from_str(v) for v in values)
      except ValueError as e:
        raise ValueError(f"constraint on tensor {name!r}: {e}") from None
    elif name in op_names:
      if not isinstance(value, str):
        raise ValueError(f"constraint on op {name!r}: give one strategy name, got {value!r}")
      op_strategies[name] = value
    else:
      raise ValueError(f"constraint names {name!r}, which is neither a tensor nor an op of the "
                       "graph (tensors are named 'op:index')")
  return SearchOptions(tensor_states=tensor_states, op_strategies=op_strategies, **kwargs)


def as_graph(fn_or_graph: Any, signature: Sequence[Any]):
  """A TofuGraph from a TofuGraph, a tf.function / ConcreteFunction plus signature."""
  from tf_tofu import graph as graph_lib
  if isinstance(fn_or_graph, graph_lib.TofuGraph):
    if signature:
      raise TypeError("a TofuGraph is already traced; pass no signature")
    return fn_or_graph
  return graph_lib.trace(fn_or_graph, *signature)


def plan(fn_or_graph: Any, *signature: Any, devices: devices_lib.Devices, planner: str = "tofu",
         constraints: Optional[Constraints] = None, describer: Optional[Describer] = None,
         **options) -> Plan:
  """Plans the partition of a training step across ``devices``.

  Args:
    fn_or_graph: a TofuGraph, or a tf.function / ConcreteFunction with ``signature``.
    *signature: tf.TensorSpecs or example tensors for the function's arguments.
    devices: an int k or a list of device names (see ``tf_tofu.devices.resolve``).
    planner: "tofu" or a baseline ("datapar", "allrow", "spartan", "equalchop", "megatron").
    constraints: user constraints (module docstring).
    describer: a Describer to share its cache across calls.
    **options: further SearchOptions fields (max_table, allow_rep_storage).

  Returns:
    The Plan, with ``total_bytes``, ``proven_optimal``, ``to_json()`` and ``report()``.
  """
  tofu_graph = as_graph(fn_or_graph, signature)
  names = devices_lib.resolve(devices)
  describer = describer or Describer()
  sgraph = problem.from_tofu_graph(tofu_graph, describer)
  result = baselines.plan_with(planner, sgraph, len(names), describer,
                               search_options(sgraph, constraints, **options))
  return plan_from_search(result, sgraph, planner, names)
