"""Tests for tf_tofu.layout.guillotine: the concat tree that reassembles a box from its parts."""

from absl.testing import absltest, parameterized

from tf_tofu.core.regions import Region
from tf_tofu.layout import guillotine


def shape_of(tree):
  """The tree without its slabs: a leaf, or (dim, subtrees)."""
  return tree if isinstance(tree, int) else (tree[0], tuple(shape_of(s) for _, s in tree[1]))


class GuillotineTest(parameterized.TestCase):

  def test_one_dim(self):
    t = Region.of([(0, 8), (0, 4)])
    parts = [Region.of([(4, 8), (0, 4)]), Region.of([(0, 4), (0, 4)])]
    self.assertEqual(guillotine.tree(t, parts),
                     (0, ((Region.of([(0, 4), (0, 4)]), 1), (Region.of([(4, 8), (0, 4)]), 0))))

  def test_two_dims(self):
    t = Region.of([(0, 4), (0, 6)])
    parts = [Region.of([(0, 2), (0, 3)]), Region.of([(0, 2), (3, 6)]),
             Region.of([(2, 4), (0, 6)])]
    self.assertEqual(shape_of(guillotine.tree(t, parts)), (0, ((1, (0, 1)), 2)))

  def test_pinwheel_is_refused(self):
    t = Region.of([(0, 3), (0, 3)])
    parts = [Region.of([(0, 2), (0, 1)]), Region.of([(2, 3), (0, 2)]), Region.of([(1, 3), (2, 3)]),
             Region.of([(0, 1), (1, 3)]), Region.of([(1, 2), (1, 2)])]
    with self.assertRaisesRegex(ValueError, "no guillotine cut"):
      guillotine.tree(t, parts)

  def test_parts_must_partition(self):
    with self.assertRaisesRegex(ValueError, "do not partition"):
      guillotine.tree(Region.of([(0, 4)]), [Region.of([(0, 2)])])


if __name__ == "__main__":
  absltest.main()
