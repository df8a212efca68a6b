"""Tests for tf_tofu.core.regions: canonical blocks, intervals, boxes."""

from absl.testing import absltest, parameterized

from tf_tofu.core.regions import Interval, Pool, Region, block, block_sizes, cut_region


class BlockTest(parameterized.TestCase):

  @parameterized.parameters((10, 3), (7, 4), (8, 8), (3, 2), (1, 1), (0, 2))
  def test_blocks_tile_the_dim_like_array_split(self, size, n):
    bounds = [block(size, n, w) for w in range(n)]
    self.assertEqual(bounds[0][0], 0)
    self.assertEqual(bounds[-1][1], size)
    for (_, hi), (lo, _) in zip(bounds, bounds[1:]):
      self.assertEqual(hi, lo)
    sizes = block_sizes(size, n)
    self.assertLessEqual(max(sizes) - min(sizes), 1)
    self.assertEqual(list(sizes), sorted(sizes, reverse=True))

  def test_known_uneven_split(self):
    self.assertEqual(block_sizes(10, 4), (3, 3, 2, 2))
    self.assertEqual(block(10, 4, 2), (6, 8))

  def test_bad_worker_raises(self):
    with self.assertRaisesRegex(ValueError, "worker 3"):
      block(10, 3, 3)
    with self.assertRaisesRegex(ValueError, "n=0"):
      block(10, 0, 0)


class IntervalRegionTest(absltest.TestCase):

  def test_clamp_hull_intersect(self):
    self.assertEqual(Interval(-2, 5).clamp(4), Interval(0, 4))
    self.assertTrue(Interval(6, 9).clamp(4).empty)
    self.assertEqual(Interval(0, 2).hull(Interval(5, 6)), Interval(0, 6))
    self.assertEqual(Interval(3, 3).hull(Interval(5, 6)), Interval(5, 6))
    self.assertEqual(Interval(0, 4).intersect(Interval(2, 9)), Interval(2, 4))

  def test_region_volume_and_slices(self):
    r = cut_region((10, 6), 0, 4, 1)
    self.assertEqual(r.shape, (3, 6))
    self.assertEqual(r.volume, 18)
    self.assertEqual(r.slices(), (slice(3, 6), slice(0, 6)))
    self.assertTrue(Region.whole((2, 3)).is_whole((2, 3)))

  def test_contains(self):
    box = Region.of([(2, 6), (0, 3)])
    self.assertTrue(box.contains(box))
    self.assertTrue(box.contains(Region.of([(2, 4), (1, 3)])))
    self.assertTrue(box.contains(Region.of([(3, 3), (0, 3)])))   # empty, inside
    self.assertFalse(box.contains(Region.of([(1, 4), (0, 3)])))
    self.assertFalse(box.contains(Region.of([(2, 6), (0, 4)])))
    with self.assertRaisesRegex(ValueError, "rank"):
      box.contains(Region.whole((2,)))

  def test_rank_mismatch_raises(self):
    with self.assertRaisesRegex(ValueError, "rank"):
      Region.whole((2,)).hull(Region.whole((2, 3)))



class PoolTest(absltest.TestCase):

  def test_one_object_per_distinct_box(self):
    pool = Pool()
    box = pool.region(((0, 4), (2, 3)))
    self.assertIs(box, pool.region(((0, 4), (2, 3))))
    self.assertEqual(box, Region.of([(0, 4), (2, 3)]))
    self.assertIs(pool.whole((4, 3)).intervals[0], box.intervals[0])
    self.assertIs(pool.interval(2, 3), box.intervals[1])
    self.assertIsNot(box, pool.region(((0, 4), (2, 4))))

  def test_offset_is_the_box_in_the_origins_coordinates(self):
    pool = Pool()
    origin = pool.region(((4, 8), (0, 6)))
    inner = pool.region(((1, 3), (2, 6)))
    moved = pool.offset(inner, origin)
    self.assertIs(moved, pool.region(((5, 7), (2, 6))))
    self.assertIs(pool.offset(inner, origin), moved)
    self.assertEqual(pool.offset(Region.of([(0, 1), (0, 1)]), origin), Region.of([(4, 5), (0, 1)]))

if __name__ == "__main__":
  absltest.main()
