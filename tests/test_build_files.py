"""The project files stay true to the tree: BUILD, pyproject.toml, README, .ci/run."""

import importlib.util
import os
import re
import tomllib

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SPEC = importlib.util.spec_from_file_location("gen_build",
                                               os.path.join(ROOT, "tools", "gen_build.py"))
gen_build = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gen_build)


def _read(name):
  with open(os.path.join(ROOT, name)) as f:
    return f.read()


class ProjectFilesTest(absltest.TestCase):

  def test_build_matches_tree(self):
    self.assertEqual(_read("BUILD"), gen_build.generate(),
                     "BUILD is stale: run python tools/gen_build.py")

  def test_pyproject_packages_and_deps(self):
    meta = tomllib.loads(_read("pyproject.toml"))
    deps = " ".join(meta["project"]["dependencies"])
    for dep in ("numpy", "networkx", "protobuf", "absl-py"):
      self.assertIn(dep, deps)
    extras = meta["project"]["optional-dependencies"]
    self.assertTrue(any("tensorflow-cpu" in x for x in extras["cpu"]))
    self.assertTrue(any(x.startswith("tensorflow>") for x in extras["tensorflow"]))
    self.assertIn("pytest", " ".join(extras["test"]))

  def test_readme_has_two_commands_and_ci_runs_the_test_one(self):
    readme = _read("README.md")
    commands = re.findall(r"^```sh\n(.*?)\n```", readme, flags=re.M | re.S)
    self.assertLen(commands, 2, "the README states exactly two commands")
    ci_lines = [l for l in _read(".ci/run").splitlines() if l and not l.startswith(("#", "set ", "cd "))]
    self.assertEqual(ci_lines, [commands[1].strip()])


if __name__ == "__main__":
  absltest.main()
