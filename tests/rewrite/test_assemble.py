"""Tests for tf_tofu.rewrite.assemble: guillotine cuts that reassemble a box from its parts."""

from absl.testing import absltest, parameterized

from tf_tofu.core.regions import Region
from tf_tofu.rewrite import assemble


class AssembleTest(parameterized.TestCase):

  def test_one_dim(self):
    t = Region.of([(0, 8), (0, 4)])
    parts = [Region.of([(4, 8), (0, 4)]), Region.of([(0, 4), (0, 4)])]
    self.assertEqual(assemble.guillotine(t, parts), (0, (1, 0)))

  def test_two_dims(self):
    t = Region.of([(0, 4), (0, 6)])
    parts = [Region.of([(0, 2), (0, 3)]), Region.of([(0, 2), (3, 6)]),
             Region.of([(2, 4), (0, 6)])]
    self.assertEqual(assemble.guillotine(t, parts), (0, ((1, (0, 1)), 2)))

  def test_pinwheel_is_refused(self):
    t = Region.of([(0, 3), (0, 3)])
    parts = [Region.of([(0, 2), (0, 1)]), Region.of([(2, 3), (0, 2)]), Region.of([(1, 3), (2, 3)]),
             Region.of([(0, 1), (1, 3)]), Region.of([(1, 2), (1, 2)])]
    with self.assertRaisesRegex(ValueError, "no guillotine cut"):
      assemble.guillotine(t, parts)

  def test_parts_must_partition(self):
    with self.assertRaisesRegex(ValueError, "do not partition"):
      assemble.guillotine(Region.of([(0, 4)]), [Region.of([(0, 2)])])


if __name__ == "__main__":
  absltest.main()
