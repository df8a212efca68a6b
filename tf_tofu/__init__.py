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
}

__all__ = sorted(_LAZY)


def __getattr__(name):
  """The public names load TensorFlow on first use, not at package import."""
  if name in _LAZY:
    import importlib
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'tf_tofu' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(_LAZY))
