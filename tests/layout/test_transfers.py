"""Tests for tf_tofu.layout.transfers: piece-by-piece conversions match the cost table."""

import random

from absl.testing import absltest, parameterized

from tf_tofu.layout import tiling, transfers
from tf_tofu.core.regions import Region
from tf_tofu.core.states import REP, Cut

SHAPE = (8, 6)
S = 48  # elements


def held(layout, factors):
  return tiling.held_regions(SHAPE, layout, factors)


def elements(pieces):
  return sum(p.elements for p in pieces)


class GatherTest(parameterized.TestCase):

  @parameterized.parameters(2, 3, 4)
  def test_one_level_table(self, n):
    f = (n,)
    cut0, cut1, rep = held([Cut(0)], f), held([Cut(1)], f), held([REP], f)
    self.assertEqual(elements(transfers.gather(cut0, cut0, f)), 0)
    # cut(d) -> cut(d'): S (n-1)/n, exactly when n divides both dims.
    self.assertEqual(elements(transfers.gather(cut0, cut1, f)),
                     S - sum(a.intersect(b).volume for a, b in zip(cut0, cut1)))
    if n in (2,):
      self.assertEqual(elements(transfers.gather(cut0, cut1, f)), S * (n - 1) // n)
    self.assertEqual(elements(transfers.gather(cut0, rep, f)), S * (n - 1))
    self.assertEqual(elements(transfers.gather(rep, cut1, f)), 0)

  def test_pieces_come_from_the_nearest_replica(self):
    f = (2, 2)
    have = held([Cut(0), REP], f)  # devices 0, 1 hold rows 0-3; 2, 3 rows 4-7
    need = [Region.whole(SHAPE)] * 4
    pieces = transfers.gather(have, need, f)
    self.assertEqual(sorted((p.src, p.dst) for p in pieces), [(0, 2), (0, 3), (2, 0), (2, 1)])

  def test_two_level_layout_partitions(self):
    f = (2, 2)
    regions = held([Cut(0), Cut(1)], f)
    self.assertEqual([r.shape for r in regions], [(4, 3)] * 4)
    self.assertEqual(regions[1], Region.of([(0, 4), (3, 6)]))
    self.assertEqual(regions[2], Region.of([(4, 8), (0, 3)]))

  @parameterized.parameters(((2, 2, 2, 2, 2, 2), (Cut(0), Cut(1), REP, Cut(0), Cut(1), Cut(0)),
                              (Cut(1), Cut(1), Cut(0), REP, Cut(0), Cut(1))),
                             ((3, 2, 2), (Cut(1), REP, Cut(0)), (REP, Cut(0), Cut(1))))
  def test_pieces_are_every_intersection_from_the_nearest_replica(self, f, have_l, need_l):
    shape = (24, 20)
    have = tiling.held_regions(shape, list(have_l), f)
    need = tiling.held_regions(shape, list(need_l), f)
    got = [(p.src, p.dst, p.region) for p in transfers.gather(have, need, f)]
    boxes = transfers.distinct_boxes(have)
    want = [(transfers.nearest(d, boxes[b], f), d, n.intersect(b))
            for d, n in enumerate(need) if n.volume
            for b in boxes if b != have[d] and n.intersect(b).volume]
    self.assertEqual(got, want)

  @parameterized.parameters(((2, 2, 2), (7, 5)), ((3, 2), (5, 1)), ((2, 3, 2), (13, 2, 3)),
                            ((), (5, 3)))
  def test_flows_are_the_pieces_without_their_boxes(self, f, shape):
    # Uneven shapes (dims that 2 or 3 do not divide, dims smaller than k) on every
    # pair of layouts, plain and from partial sums.
    states = [REP] + [Cut(d) for d in range(len(shape))]
    layouts = [tuple(states[(i + j) % len(states)] for j in range(len(f)))
               for i in range(len(states))]
    for have_l in layouts:
      for need_l in layouts:
        have = tiling.held_regions(shape, list(have_l), f)
        need = tiling.held_regions(shape, list(need_l), f)
        keys = [tiling.device_coords(d, f)[:1] for d in range(len(have))]
        for pieces, flows in (
            (transfers.gather(have, need, f), transfers.gather_flows(have, need, f)),
            (transfers.produce_into([Region.whole(shape)] * len(have), keys, need, f),
             transfers.produce_flows([Region.whole(shape)] * len(have), keys, need, f))):
          self.assertEqual([(p.src, p.dst, p.elements) for p in pieces],
                           list(zip(flows.src.tolist(), flows.dst.tolist(),
                                    flows.elements.tolist())))

  def test_level_table_is_the_first_differing_coordinate(self):
    f = (2, 3, 2)
    table = transfers.level_table(f)
    for a in range(12):
      for b in range(12):
        ca, cb = tiling.device_coords(a, f), tiling.device_coords(b, f)
        want = next((l for l in range(3) if ca[l] != cb[l]), 3)
        self.assertEqual(table[a, b], want)

  def test_a_need_outside_every_held_box_is_rejected(self):
    with self.assertRaisesRegex(ValueError, "do not cover"):
      transfers.gather([Region.of([(0, 4), (0, 6)]), None], [None, Region.whole(SHAPE)], (2,))

  def test_overlapping_boxes_rejected(self):
    with self.assertRaisesRegex(ValueError, "overlap"):
      transfers.gather([Region.of([(0, 5), (0, 6)]), Region.of([(3, 8), (0, 6)])],
                       [Region.whole(SHAPE), None], (2,))

  def test_nothing_moves_where_every_device_holds_its_need(self):
    # Needs inside the device's own box (or none, or empty): no piece, whatever else
    # the held boxes are.
    have = [Region.whole(SHAPE), Region.of([(4, 8), (0, 6)])]
    for need in ([Region.of([(1, 3), (0, 6)]), Region.of([(4, 8), (2, 3)])],
                 [None, Region.of([(5, 5), (0, 6)])]):
      self.assertEqual(transfers.gather(have, need, (2,)), [])
      self.assertEqual(transfers.gather_flows(have, need, (2,)).elements.tolist(), [])
    self.assertEqual(transfers.gather_elements(have, need), 0)

  def test_gather_elements_counts_what_gather_moves(self):
    # Held: every Cut/REP layout of SHAPE over 1-3 levels of 2, 3 (dims 8 and 6 cut to
    # uneven blocks too); need: random boxes inside SHAPE, some devices needing nothing.
    rng = random.Random(0)
    for _ in range(300):
      factors = tuple(rng.choice((2, 3)) for _ in range(rng.randint(1, 3)))
      layout = [rng.choice((Cut(0), Cut(1), REP)) for _ in factors]
      have = held(layout, factors)
      need = []
      for _ in have:
        if rng.random() < 0.2:
          need.append(None)
          continue
        ends = [sorted(rng.sample(range(d + 1), 2)) for d in SHAPE]
        need.append(Region.of(ends))
      self.assertEqual(transfers.gather_elements(have, need),
                       elements(transfers.gather(have, need, factors)), (layout, factors))


class ReduceTest(parameterized.TestCase):

  @parameterized.parameters(2, 3, 4)
  def test_partial_to_cut_and_rep(self, n):
    f = (n,)
    produced = [Region.whole(SHAPE)] * n
    keys = [(w,) for w in range(n)]
    to_cut = transfers.produce_into(produced, keys, held([Cut(0)], f), f)
    self.assertEqual(elements(to_cut), S * (n - 1))
    self.assertTrue(all(p.kind == transfers.REDUCE for p in to_cut))
    to_rep = transfers.produce_into(produced, keys, held([REP], f), f)
    self.assertEqual(elements(to_rep), 2 * S * (n - 1))

  def test_cut_then_partial(self):
    # Level 1 cuts the output rows, level 2 a reduction: pairs of devices hold addends.
    f = (2, 2)
    top, bottom = Region.of([(0, 4), (0, 6)]), Region.of([(4, 8), (0, 6)])
    produced = [top, top, bottom, bottom]
    keys = [(0,), (1,), (0,), (1,)]
    stored = held([Cut(0), Cut(1)], f)
    pieces = transfers.produce_into(produced, keys, stored, f)
    self.assertEqual(elements(pieces), S)  # each pair reduce-scatters its half: 24 (2-1) x 2
    self.assertEqual({(p.src, p.dst) for p in pieces}, {(0, 1), (1, 0), (2, 3), (3, 2)})

  def test_replicas_are_not_summed(self):
    f = (2,)
    produced = [Region.whole(SHAPE)] * 2
    pieces = transfers.produce_into(produced, [(), ()], held([Cut(0)], f), f)
    self.assertEqual(elements(pieces), 0)


if __name__ == "__main__":
  absltest.main()
