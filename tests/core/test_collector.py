"""Tests for tf_tofu.core.collector: the collector's threshold during bulk work."""

import gc

from absl.testing import absltest

from tf_tofu.core import collector


class BulkTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.saved = gc.get_threshold()
    self.addCleanup(gc.set_threshold, *self.saved)
    gc.set_threshold(700, 10, 10)

  def test_raises_the_young_and_middle_thresholds_and_restores_all_three(self):
    with collector.bulk():
      self.assertEqual(gc.get_threshold(),
                       (collector.BULK_THRESHOLD, collector.BULK_MIDDLE, 10))
    self.assertEqual(gc.get_threshold(), (700, 10, 10))

  def test_restores_after_an_exception(self):
    with self.assertRaises(KeyError):
      with collector.bulk():
        raise KeyError("x")
    self.assertEqual(gc.get_threshold(), (700, 10, 10))

  def test_nested_blocks_keep_it_raised_until_the_outermost_ends(self):
    with collector.bulk():
      with collector.bulk():
        pass
      self.assertEqual(gc.get_threshold()[0], collector.BULK_THRESHOLD)
    self.assertEqual(gc.get_threshold()[0], 700)

  def test_a_higher_threshold_of_the_process_is_kept(self):
    gc.set_threshold(500_000, 5_000, 4)
    with collector.bulk():
      self.assertEqual(gc.get_threshold(), (500_000, 5_000, 4))

  def test_as_a_decorator_and_cycles_are_still_collected(self):
    @collector.bulk()
    def make_cycles():
      self.assertEqual(gc.get_threshold()[0], collector.BULK_THRESHOLD)
      for _ in range(3 * collector.BULK_THRESHOLD):
        a = []
        a.append(a)
      return gc.get_count()[0]

    young = make_cycles()
    self.assertLess(young, collector.BULK_THRESHOLD + 1)  # collected on the way, not piled up


if __name__ == "__main__":
  absltest.main()
