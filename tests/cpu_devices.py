"""Logical CPU devices for the tests that run partitioned graphs (docs/design.md section 3).

Import this first in a test module: TensorFlow can split the CPU only before
it initialises, so the first test module to import it splits the CPU into
``COUNT`` devices for the whole process; soft placement is turned off, so a
node placed on a device that does not exist fails instead of moving.
"""

import contextlib

import tensorflow as tf
from absl.testing import absltest
from tensorflow.python.eager import context

COUNT = 8
try:
  tf.config.set_logical_device_configuration(
      tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * COUNT)
except RuntimeError:
  pass  # already initialised (by another test module); require() checks the count
tf.config.set_soft_device_placement(False)


def require(k: int = COUNT) -> None:
  """Skips the calling module when the process has fewer than ``k`` logical CPUs."""
  n = len(tf.config.list_logical_devices("CPU"))
  if n < k:
    raise absltest.SkipTest(f"needs {k} logical CPU devices, the process has {n} (TensorFlow "
                            "was initialised before the CPU could be split)")


@contextlib.contextmanager
def run_metadata():
  """Collects the run metadata (partition graphs) of what runs inside, with Grappler off so
  that the partition graphs hold the nodes as placed.  Yields a list that holds the
  ``RunMetadata`` when the block ends."""
  saved = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
  tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
  ctx = context.context()
  out = []
  try:
    ctx.enable_run_metadata()
    ctx.enable_graph_collection()
    # TensorFlow (2.21) keeps the graphs of functions instantiated since an earlier use
    # and reports them with this one's; exporting here drops them.
    ctx.export_run_metadata()
    yield out
    out.append(ctx.export_run_metadata())
  finally:
    ctx.disable_graph_collection()
    ctx.disable_run_metadata()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": saved})
