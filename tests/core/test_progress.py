"""Tests for tf_tofu.core.progress: long phases are shown, quick ones are not.

``DELAY``, ``INTERVAL`` and ``HEARTBEAT`` are shortened for the test; stderr is
captured, and absl's verbosity is WARNING (its default outside ``app.run``)
unless a test sets INFO.
"""

import contextlib
import io
import os
import time
from unittest import mock

from absl import logging
from absl.testing import absltest

from tf_tofu.core import progress


class ProgressTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.object(progress, "DELAY", 0.05))
    self.enter_context(mock.patch.object(progress, "INTERVAL", 0.0))
    self.enter_context(mock.patch.object(progress, "HEARTBEAT", 10.0))
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.WARNING)
    self.addCleanup(logging.set_verbosity, verbosity)
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

  def test_a_silent_phase_beats_with_its_latest_update(self):
    with mock.patch.object(progress, "HEARTBEAT", 0.2):
      with progress.phase("outer"):
        with progress.phase("pricing"):
          progress.update("level n=2: priced 5/12 op groups")
          time.sleep(1.0)  # no update for 5 heartbeats
    lines = self.err.getvalue().splitlines()
    beats = [l for l in lines if "level n=2" in l]
    self.assertGreaterEqual(len(beats), 3, lines)
    for line in beats:
      self.assertRegex(line, r"^tf_tofu:     \[\d+ s\] level n=2: priced 5/12 op groups$")
    self.assertEqual([l for l in lines if "still running" in l], [],
                     "the outer phase, not innermost, must not beat")
    self.assertEqual(lines[-1][:len("tf_tofu: outer: done")], "tf_tofu: outer: done")

  def test_lines_go_through_absl_logging_when_it_shows_info(self):
    logging.set_verbosity(logging.INFO)
    with self.assertLogs("absl", level="INFO") as logs:
      with progress.phase("planning 12 ops"):
        time.sleep(0.3)
        progress.update("level n=2: priced 5/12 op groups")
    self.assertEqual(self.err.getvalue(), "")  # one channel only
    messages = [r.getMessage() for r in logs.records]
    self.assertEqual(messages[:2], ["tf_tofu: planning 12 ops ...",
                                    "tf_tofu:   [0 s] level n=2: priced 5/12 op groups"])
    self.assertRegex(messages[2], r"^tf_tofu: planning 12 ops: done in 0\.\d s$")
    self.assertEqual({r.levelname for r in logs.records}, {"INFO"})

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
