"""tf_tofu: automatic dataflow-graph partitioning (Tofu) for TensorFlow."""

__version__ = "0.1.0"

_LAZY = {
    "trace": "tf_tofu.graph",
    "TofuGraph": "tf_tofu.graph",
    "plan": "tf_tofu.api",
    "partition": "tf_tofu.api",
    "load_plan": "tf_tofu.api",
    "Plan": "tf_tofu.core.plan",
    "SearchOptions": "tf_tofu.search.tofu",
    "PLANNERS": "tf_tofu.search.planners",
    "function": "tf_tofu.tofu_function",
    "Function": "tf_tofu.tofu_function",
    "count_transfer_bytes": "tf_tofu.ops.counting",
    "TofuError": "tf_tofu.core.errors",
    "set_verbose": "tf_tofu.core.progress",
    "ClusterDevices": "tf_tofu.core.cluster",
    "LocalCluster": "tf_tofu.core.local_cluster",
    "Topology": "tf_tofu.core.topology",
}

# Subpackages that are public API: ``tf_tofu.keras.partition(model, devices=8)``.
_SUBPACKAGES = ("keras",)

__all__ = sorted((*_LAZY, *_SUBPACKAGES))


def __getattr__(name):
  """The public names load TensorFlow on first use, not at package import."""
  import importlib
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  if name in _SUBPACKAGES:
    return importlib.import_module(f"tf_tofu.{name}")
  raise AttributeError(f"module 'tf_tofu' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
