"""Tests for tf_tofu.core.errors: one base, TofuError, for every refusal.

Every error class tf_tofu defines derives from it (found by walking the
package, so a new one that does not fails here), it is a ValueError, it is
public as ``tf_tofu.TofuError``, and the refusals users meet first (an
unknown planner, device or constraint, a bad zoo choice) raise it.
"""

import ast
import pathlib

import tensorflow as tf
from absl.testing import absltest

import tf_tofu
from tf_tofu.core import devices
from tf_tofu.core.errors import TofuError


def _error_classes() -> dict[str, tuple[str, ...]]:
  """Every class named ``*Error`` or ``*Exception`` in tf_tofu's source -> its base names
  (read from the source: importing every subcommand would define their flags twice)."""
  root = pathlib.Path(tf_tofu.__file__).parent
  found = {}
  for path in sorted(root.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
        found[node.name] = tuple(ast.unparse(b).split(".")[-1] for b in node.bases)
  return found


class TofuErrorTest(absltest.TestCase):

  def test_every_error_class_derives_from_tofu_error(self):
    classes = _error_classes()
    self.assertContainsSubset({"TofuError", "IngestError", "PlanError", "DescriptionError",
                               "UsageError", "TilingError"}, set(classes))

    def derives(name, seen=()):
      return name == "TofuError" or any(
          b in classes and b not in seen and derives(b, seen + (name,)) for b in classes[name])

    self.assertEqual([n for n in classes if n != "TofuError" and not derives(n)], [])

  def test_public_and_a_value_error(self):
    self.assertIs(tf_tofu.TofuError, TofuError)
    self.assertTrue(issubclass(TofuError, ValueError))
    self.assertIn("TofuError", tf_tofu.__all__)
    self.assertIn("TofuError", dir(tf_tofu))
    self.assertContainsSubset({"plan", "partition", "function", "load_plan", "trace"},
                              set(dir(tf_tofu)))

  def test_first_refusals_raise_it(self):
    @tf.function
    def step(x):
      return tf.reduce_sum(x * x)

    spec = tf.TensorSpec([4, 3], tf.float32)
    with self.assertRaisesRegex(TofuError, "planner"):
      tf_tofu.plan(step, spec, devices=2, planner="magic")
    with self.assertRaisesRegex(TofuError, "neither a tensor nor an op"):
      tf_tofu.plan(step, spec, devices=2, constraints={"nothing:0": "rep"})
    with self.assertRaises(TofuError):
      devices.resolve(["/GPU:0", "/GPU:0"])
    from tf_tofu import models
    with self.assertRaises(TofuError):
      models.tiny("mlp", optimizer="lbfgs")


if __name__ == "__main__":
  absltest.main()
