"""The shape of the package tree: the rules docs/design.md section 1 states, checked.

* only the entry points sit loose in ``tf_tofu/``;
* data flows one way: a stage imports only the stages before it, and
  ``tf_tofu.core`` imports nothing else of ``tf_tofu``;
* no function is longer than 80 lines;
* every source module has its test module (``tests/`` mirrors ``tf_tofu/``);
* the code points only at documents inside the repository.
"""

import ast
import pathlib

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tf_tofu"

# The pipeline, first stage first. A package may import the packages before it.
STAGES = ("core", "opdefs", "graph", "layout", "search", "ops", "rewrite")
# Built on the pipeline; they may import any stage (and the public API).
ENTRY_PACKAGES = ("models", "verify", "cli", "keras")
LOOSE_MODULES = {"__init__.py", "__main__.py", "api.py", "tofu_function.py"}
MAX_FUNCTION_LINES = 80


def _sources():
  return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _package_of(path: pathlib.Path) -> str:
  parts = path.relative_to(PACKAGE).parts
  return parts[0] if len(parts) > 1 else path.stem


def _imported_packages(path: pathlib.Path) -> set[str]:
  """The ``tf_tofu`` subpackages (or loose modules) ``path`` imports."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tf_tofu":
      parts = node.module.split(".")
      found.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
    elif isinstance(node, ast.Import):
      found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("tf_tofu."))
  return found - {_package_of(path)}


class ArchitectureTest(absltest.TestCase):

  def test_only_entry_points_are_loose(self):
    loose = {p.name for p in PACKAGE.glob("*.py")}
    self.assertEqual(loose - LOOSE_MODULES, set())
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    self.assertEqual(packages, set(STAGES) | set(ENTRY_PACKAGES))

  def test_data_flows_one_way(self):
    for path in _sources():
      package = _package_of(path)
      if package not in STAGES:
        continue
      earlier = set(STAGES[:STAGES.index(package)])
      later = _imported_packages(path) - earlier
      self.assertEqual(later, set(), f"{path.relative_to(ROOT)} imports a stage that is not "
                       f"before {package!r} in {STAGES}")

  def test_no_long_functions(self):
    long = []
    for path in _sources():
      for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
          lines = node.end_lineno - node.lineno + 1
          if lines > MAX_FUNCTION_LINES:
            long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    self.assertEqual(long, [])

  def test_tests_mirror_modules(self):
    missing = []
    for path in _sources():
      if path.name in ("__init__.py", "__main__.py"):
        continue
      rel = path.relative_to(PACKAGE)
      test = ROOT / "tests" / rel.parent / f"test_{rel.name}"
      if not test.exists():
        missing.append(str(test.relative_to(ROOT)))
    self.assertEqual(missing, [])

  def test_documents_pointed_at_exist(self):
    outside = []
    for path in _sources() + sorted((ROOT / "tests").rglob("*.py")):
      text = path.read_text()
      for name in ("TOFU" + ".md", "DESIGN" + ".md"):
        if name in text:
          outside.append(f"{path.relative_to(ROOT)} mentions {name}")
    self.assertEqual(outside, [])
    for name in ("method.md", "design.md", "benchmarks.md"):
      self.assertTrue((ROOT / "docs" / name).exists(), name)


if __name__ == "__main__":
  absltest.main()
