"""Tests for tf_tofu.layout.guillotine: the concat tree that reassembles a box from its parts."""

import random

from absl.testing import absltest, parameterized

from tf_tofu.core.regions import Interval, Region
from tf_tofu.layout import guillotine


def shape_of(tree):
  """The tree without its slabs: a leaf, or (dim, subtrees)."""
  return tree if isinstance(tree, int) else (tree[0], tuple(shape_of(s) for _, s in tree[1]))


def reference_tree(target, idx, boxes):
  """The module's rule written out directly: the lowest dim with a cut (an end of a part
  strictly inside the target that no part straddles), cut at every such end."""
  if len(idx) == 1:
    return idx[0]
  for dim in range(target.rank):
    lo, hi = target.intervals[dim].lo, target.intervals[dim].hi
    ends = {boxes[i].intervals[dim].lo for i in idx} | {boxes[i].intervals[dim].hi for i in idx}
    cuts = [c for c in sorted(ends) if lo < c < hi and not any(
        boxes[i].intervals[dim].lo < c < boxes[i].intervals[dim].hi for i in idx)]
    if cuts:
      subs = []
      for a, z in zip([lo] + cuts, cuts + [hi]):
        ivs = list(target.intervals)
        ivs[dim] = Interval(a, z)
        slab = Region(tuple(ivs))
        members = [i for i in idx if a <= boxes[i].intervals[dim].lo
                   and boxes[i].intervals[dim].hi <= z]
        subs.append((slab, reference_tree(slab, members, boxes)))
      return (dim, tuple(subs))
  raise ValueError("no guillotine cut")


def random_partition(rng, box, depth):
  """Parts of ``box`` from random cuts (any dim, 2-4 ways, uneven) ``depth`` levels deep."""
  if depth == 0 or rng.random() < 0.2:
    return [box]
  dims = [d for d, iv in enumerate(box.intervals) if iv.size > 1]
  if not dims:
    return [box]
  d = rng.choice(dims)
  iv = box.intervals[d]
  points = sorted(rng.sample(range(iv.lo + 1, iv.hi), min(iv.size - 1, rng.randint(1, 3))))
  parts = []
  for a, z in zip([iv.lo] + points, points + [iv.hi]):
    ivs = list(box.intervals)
    ivs[d] = Interval(a, z)
    parts += random_partition(rng, Region(tuple(ivs)), depth - 1)
  return parts


class GuillotineTest(parameterized.TestCase):

  def test_the_tree_is_the_rule_on_random_partitions(self):
    rng = random.Random(0)
    for _ in range(300):
      target = Region.of([(lo, lo + rng.randint(1, 12)) for lo in
                          (rng.randint(0, 5) for _ in range(rng.randint(1, 3)))])
      parts = random_partition(rng, target, rng.randint(1, 4))
      rng.shuffle(parts)
      want = reference_tree(target, list(range(len(parts))), parts)
      self.assertEqual(guillotine.tree(target, parts), want, (target, parts))

  def test_one_dim(self):
    t = Region.of([(0, 8), (0, 4)])
    parts = [Region.of([(4, 8), (0, 4)]), Region.of([(0, 4), (0, 4)])]
    self.assertEqual(guillotine.tree(t, parts),
                     (0, ((Region.of([(0, 4), (0, 4)]), 1), (Region.of([(4, 8), (0, 4)]), 0))))

  def test_fold_joins_each_node_after_its_slabs(self):
    # Folding the boxes back: each join gets its slabs' boxes in order along its dim, and
    # builds exactly the node's box; joins come children first.
    t = Region.of([(0, 4), (0, 6)])
    parts = [Region.of([(0, 2), (0, 3)]), Region.of([(0, 2), (3, 6)]),
             Region.of([(2, 4), (0, 6)])]
    joins = []

    def join(dim, xs, box):
      joins.append((dim, box))
      lo = box.intervals[dim].lo
      for x in xs:  # the slabs tile the box along dim, in order
        self.assertEqual(x.intervals[:dim] + x.intervals[dim + 1:],
                         box.intervals[:dim] + box.intervals[dim + 1:])
        self.assertEqual(x.intervals[dim].lo, lo)
        lo = x.intervals[dim].hi
      self.assertEqual(lo, box.intervals[dim].hi)
      return box

    self.assertEqual(guillotine.fold(guillotine.tree(t, parts), t, parts.__getitem__, join), t)
    self.assertEqual(joins, [(1, Region.of([(0, 2), (0, 6)])), (0, t)])

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
