"""Tests for tf_tofu.core.progress: long phases are shown, quick ones are not.

``DELAY`` and ``INTERVAL`` are shortened for the test; stderr is captured.
"""

import contextlib
import io
import os
import time
from unittest import mock

from absl.testing import absltest

from tf_tofu.core import progress


class ProgressTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.object(progress, "DELAY", 0.05))
    self.enter_context(mock.patch.object(progress, "INTERVAL", 0.0))
    self.enter_context(mock.patch.object(progress, "_verbose", None))
    self.enter_context(mock.patch.dict(os.environ, {"TF_TOFU_VERBOSE": "1"}))
    self.err = io.StringIO()
    self.enter_context(contextlib.redirect_stderr(self.err))

  def test_a_long_phase_shows_its_name_updates_and_time(self):
    with progress.phase("planning 12 ops"):
      progress.update("hidden: the phase is not shown yet")
      time.sleep(0.3)
      progress.update("level n=2: priced 5/12 op groups")
    lines = self.err.getvalue().splitlines()
    self.assertEqual(lines[0], "tf_tofu: planning 12 ops ...")
    self.assertEqual(lines[1], "tf_tofu:   [0 s] level n=2: priced 5/12 op groups")
    self.assertRegex(lines[2], r"^tf_tofu: planning 12 ops: done in 0\.\d s$")
    self.assertLen(lines, 3)

  def test_quick_phases_print_nothing(self):
    with progress.phase("tracing"):
      progress.update("anything")
    time.sleep(0.1)  # the cancelled timer never fires
    self.assertEqual(self.err.getvalue(), "")

  def test_nested_phases_are_indented(self):
    with progress.phase("outer"):
      with progress.phase("inner"):
        time.sleep(0.3)
    lines = self.err.getvalue().splitlines()
    self.assertEqual(lines[:2], ["tf_tofu: outer ...", "tf_tofu:   inner ..."])
    self.assertTrue(lines[2].startswith("tf_tofu:   inner: done in"))
    self.assertTrue(lines[3].startswith("tf_tofu: outer: done in"))

  def test_silenced_by_set_verbose_and_the_environment(self):
    progress.set_verbose(False)
    self.assertFalse(progress.verbose())
    with progress.phase("slow"):
      time.sleep(0.2)
    progress.set_verbose(True)
    self.assertTrue(progress.verbose())
    progress._verbose = None  # back to the environment
    with mock.patch.dict(os.environ, {"TF_TOFU_VERBOSE": "0"}):
      self.assertFalse(progress.verbose())
      with progress.phase("slow"):
        time.sleep(0.2)
    self.assertEqual(self.err.getvalue(), "")

  def test_an_error_still_ends_the_phase(self):
    with self.assertRaises(KeyError):
      with progress.phase("failing"):
        time.sleep(0.2)
        raise KeyError("x")
    self.assertIn("tf_tofu: failing: done in", self.err.getvalue())
    self.assertEqual(progress._stack, [])

  def test_record_times_every_phase_verbose_or_not(self):
    progress.set_verbose(False)
    with progress.record() as timings:
      with progress.phase("outer"):
        with progress.phase("inner"):
          time.sleep(0.1)
      with progress.phase("quick"):
        pass
    with progress.phase("after the record"):
      pass
    self.assertEqual([(t.name, t.depth) for t in timings],
                     [("inner", 1), ("outer", 0), ("quick", 0)])
    self.assertGreaterEqual(timings[0].seconds, 0.1)
    self.assertGreaterEqual(timings[1].seconds, timings[0].seconds)
    self.assertEqual(self.err.getvalue(), "")  # recording shows nothing
    self.assertEqual((progress._stack, progress._recorders), ([], []))


if __name__ == "__main__":
  absltest.main()
