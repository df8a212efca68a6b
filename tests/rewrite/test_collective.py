"""Tests for tf_tofu.rewrite.collective: conversions matched to collective groups, moving the
same elements as the plain pieces."""

from absl.testing import absltest

from tf_tofu.layout import transfers
from tf_tofu.layout.tiling import held_regions
from tf_tofu.core.regions import Region
from tf_tofu.core.states import REP, Cut
from tf_tofu.rewrite import collective


class MatchTest(absltest.TestCase):

  def test_gather_groups_pair_the_ith_holders(self):
    have = held_regions((8, 4), (Cut(0), REP, REP), (2, 2, 2))
    need = [Region.whole((8, 4))] * 8
    recipe = collective.match_gather(have, need)
    self.assertEqual([g.members for g in recipe.groups], [(0, 4), (1, 5), (2, 6), (3, 7)])
    pieces = transfers.gather(have, need, (2, 2, 2))
    self.assertEqual(recipe.elements, sum(p.elements for p in pieces))

  def test_gather_refuses_partial_needs(self):
    have = held_regions((8, 4), (Cut(0),), (2,))
    self.assertIsNone(collective.match_gather(have, [Region.whole((8, 4)), None]))

  def test_reduce_with_replicas(self):
    box = Region.whole((4, 4))
    produced = [box] * 4
    keys = [(0,), (0,), (1,), (1,)]
    recipe = collective.match_reduce(produced, keys, [box] * 4, (2, 2), range(4), False)
    (g,) = recipe.groups
    self.assertEqual(g.core, (0, 2))
    self.assertEqual(g.copies, ((1, 0), (3, 2)))
    red, inter = transfers.reduce_partials(produced, keys, [box] * 4, (2, 2))
    after = transfers.gather(inter, [box] * 4, (2, 2))
    self.assertEqual(recipe.elements, sum(p.elements for p in red + after))

  def test_reduce_scatter_needs_rank_ordered_blocks(self):
    box = Region.whole((4, 4))
    stored = [Region.of([(2, 4), (0, 4)]), Region.of([(0, 2), (0, 4)])]
    self.assertIsNone(collective.match_reduce([box] * 2, [(0,), (1,)], stored, (2,), (0, 1), True))
    recipe = collective.match_reduce([box] * 2, [(0,), (1,)], stored, (2,), (1, 0), True)
    self.assertEqual(recipe.groups[0].scatter, 0)
    self.assertIsNone(collective.match_reduce([box] * 2, [(0,), (1,)], stored, (2,), (1, 0), False))


if __name__ == "__main__":
  absltest.main()
