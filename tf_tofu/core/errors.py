"""The one base of every error tf_tofu raises for input it refuses.

``except tf_tofu.TofuError`` catches them all: a graph that cannot be
ingested, an op a description does not fit, an impossible request (an
unknown device or planner, a dim that cannot be cut, a bad constraint), a
plan that does not match its graph, a command line used wrongly.  Each
message names the op, tensor or value concerned and the way out.
``TofuError`` is a ``ValueError``, so code that caught ``ValueError`` keeps
working.  Other exceptions out of tf_tofu (AssertionError, TensorFlow's own
errors from running a graph) are bugs or failures of the run, not refusals.
"""


class TofuError(ValueError):
  """Input tf_tofu refuses; the message says what and how to fix it."""


__all__ = ["TofuError"]
