"""What the tests of the tofu command share: running it as a user does, and a saved step.

Each subcommand runs in a subprocess (``python -m tf_tofu.cli``), as a user
runs it; the SavedModel fixture is a tiny MLP training step saved with its
variables.
"""

import os
import subprocess
import sys
import tempfile

import tensorflow as tf
from absl.testing import absltest

from tests import cpu_devices  # noqa: F401  (splits the CPU: rewritten SavedModels run here)

K = 4
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tofu(*args, cwd=ROOT):
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return subprocess.run([sys.executable, "-m", "tf_tofu.cli", *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=600)


def save_tiny_step(path):
  """A tiny MLP training step as a SavedModel (signature "train"), with its example inputs."""
  from tf_tofu import models
  step = models.tiny("mlp", optimizer="adam")
  module = tf.Module()
  module.weights = list(step.variables) + list(step.optimizer_variables)
  module.train = step.fn
  tf.saved_model.save(module, path, signatures={"train": step.fn})
  return step


class CommandCase(absltest.TestCase):
  """A temporary folder with the saved tiny step, and helpers to run commands in it."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = tempfile.mkdtemp(prefix="tofu_cli_test_")
    cls.saved = os.path.join(cls.dir, "tiny_step")
    cls.step = save_tiny_step(cls.saved)

  def out(self, name):
    return os.path.join(tempfile.mkdtemp(dir=self.dir), name)

  def ok(self, result):
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    return result.stdout
