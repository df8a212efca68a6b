"""What the tests of the tofu command share: running it as a user does, and a saved step.

Each subcommand that succeeds runs in a subprocess (``python -m tf_tofu.cli``),
as a user runs it (:func:`tofu`); plan and rewrite commands that stop at a bad
input run through the same entry point in this process (:func:`tofu_here`: no
process and TensorFlow start per command, seconds each).  The SavedModel
fixture is a tiny MLP training step saved with its variables.
"""

import contextlib
import io
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


def tofu_here(*args, cwd=ROOT):
  """``tofu ARGS`` through ``tf_tofu.cli.run`` in this process, as :func:`tofu` returns it.

  The exit status is the ``SystemExit`` code that ``run`` (absl's ``app.run``) raises;
  stdout and stderr are what it printed.  Flags are unparsed before and after, so
  no value carries over from one command to the next."""
  from absl import flags
  from tf_tofu import cli
  out, err = io.StringIO(), io.StringIO()
  here = os.getcwd()
  flags.FLAGS.unparse_flags()
  code = 0
  try:
    os.chdir(cwd)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      cli.run(["tofu", *args])
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  finally:
    os.chdir(here)
    flags.FLAGS.unparse_flags()
  return subprocess.CompletedProcess(["tofu", *args], code, out.getvalue(), err.getvalue())


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
