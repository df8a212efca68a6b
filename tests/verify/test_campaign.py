"""Tests for tf_tofu.verify.campaign: counts, seeds, and reproductions of failures."""

import os
import tempfile

from absl.testing import absltest

from tests import cpu_devices
from tf_tofu.verify import campaign, random_steps  # noqa: E402


def setUpModule():
  cpu_devices.require()


class CampaignTest(absltest.TestCase):

  def test_clean_run_counts_every_example(self):
    lines = []
    result = campaign.run(4, seed=7, out_dir=None, progress=lines.append, progress_every=2)
    self.assertEqual((result.tried, result.failed), (4, 0))
    self.assertEqual(result.summary(), "4 tried, 0 failed")
    self.assertEqual(result.reproductions, ())
    self.assertTrue(any("2/4 tried, 0 failed" in l for l in lines), lines)

  def test_failures_are_counted_shrunk_and_written(self):
    seen = []

    def fake_check(spec):  # a pretend bug in every step with more than one block
      seen.append(spec)
      return ["numerics: pretend"] if len(spec.blocks) > 1 else []

    real = random_steps.check
    random_steps.check = fake_check
    out = tempfile.mkdtemp()
    try:
      result = campaign.run(12, seed=3, out_dir=out, progress=lambda _: None)
    finally:
      random_steps.check = real
    self.assertEqual(result.tried, 12)
    self.assertEqual(result.failed, sum(len(s.blocks) > 1 for s in seen[:12]))
    self.assertGreater(result.failed, 0)
    self.assertEqual(result.by_kind, (("numerics", result.failed),))
    self.assertTrue(result.reproductions)
    text = open(result.reproductions[0]).read()
    compile(text, result.reproductions[0], "exec")
    spec = random_steps.StepSpec.from_json(text.split("StepSpec.from_json(")[1].split(")\n")[0]
                                           .strip("'\""))
    self.assertLen(spec.blocks, 2)  # shrunk to the smallest step that still fails
    self.assertEqual(sorted(os.listdir(out)), sorted(os.path.basename(p)
                                                     for p in result.reproductions))

  def test_same_seed_same_examples(self):
    first, second = [], []
    for sink in (first, second):
      real = random_steps.check
      random_steps.check = lambda spec, sink=sink: sink.append(spec.to_json()) or []
      try:
        campaign.run(5, seed=11, progress=lambda _: None)
      finally:
        random_steps.check = real
    self.assertEqual(first, second)


if __name__ == "__main__":
  absltest.main()
