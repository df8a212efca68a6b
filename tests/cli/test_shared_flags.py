"""Tests for tf_tofu.cli.shared_flags: the subcommands load in one process, sharing the
flags they have in common, and each names its own --out_dir default."""

from absl import flags
from absl.testing import absltest, flagsaver

# Loading these three together raised DuplicateFlagError when each defined its own
# --comm / --out_dir.
from tf_tofu.cli import demo, fuzz, rewrite, shared_flags


class SharedFlagsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    flags.FLAGS.mark_as_parsed()
    self.addCleanup(flags.FLAGS.unparse_flags)

  def test_common_flags_are_defined_once_here(self):
    for name in ("comm", "out_dir"):
      self.assertEqual(flags.FLAGS.find_module_defining_flag(name), shared_flags.__name__)
    for module in (demo, fuzz, rewrite):
      own = {f.name for f in flags.FLAGS.get_flags_for_module(module.__name__)}
      self.assertFalse(own & {"comm", "out_dir"}, module.__name__)

  def test_out_dir_defaults_per_subcommand(self):
    self.assertEqual(shared_flags.out_dir(demo.OUT_DIR), "tofu_demo")
    self.assertEqual(shared_flags.out_dir(fuzz.OUT_DIR), "tofu_fuzz")
    with flagsaver.flagsaver(out_dir=""):
      self.assertEqual(shared_flags.out_dir(demo.OUT_DIR), "")  # '' writes nothing
    with flagsaver.flagsaver(out_dir="elsewhere"):
      self.assertEqual(shared_flags.out_dir(fuzz.OUT_DIR), "elsewhere")


if __name__ == "__main__":
  absltest.main()
