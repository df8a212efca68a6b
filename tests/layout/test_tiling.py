"""Tests for tf_tofu.layout.tiling: device coordinates, held boxes and op tiles across levels."""

import dataclasses

from absl.testing import absltest, parameterized

from tf_tofu.layout import tiling
from tf_tofu.opdefs.cases import Case, Rand
from tf_tofu.core.regions import Region
from tf_tofu.opdefs.registry import Describer, context_key, frozen_attrs
from tf_tofu.core.states import REP, Cut
from tf_tofu.opdefs.validate import build_case


def matmul_ctx(m=8, k=6, n=4):
  ctx, _ = build_case(Case("MatMul", [Rand((m, k)), Rand((k, n))]))
  return ctx


class CoordinatesTest(parameterized.TestCase):

  @parameterized.parameters(((2, 2, 2),), ((3, 2),), ((2, 3),), ((5,),))
  def test_round_trip(self, factors):
    for d in range(tiling.num_devices(factors)):
      self.assertEqual(tiling.device_index(tiling.device_coords(d, factors), factors), d)

  def test_first_level_is_most_significant(self):
    self.assertEqual(tiling.device_coords(5, (2, 2, 2)), (1, 0, 1))
    self.assertEqual(tiling.device_coords(3, (2, 3)), (1, 0))


class HeldTest(absltest.TestCase):

  def test_two_level_tiling(self):
    boxes = tiling.held_regions((8, 6), [Cut(0), Cut(1)], (2, 3))
    self.assertEqual(boxes[0], Region.of([(0, 4), (0, 2)]))
    self.assertEqual(boxes[5], Region.of([(4, 8), (4, 6)]))

  def test_rep_level_keeps_the_box(self):
    boxes = tiling.held_regions((8, 6), [REP, Cut(0)], (2, 2))
    self.assertEqual(boxes[0], boxes[2])
    self.assertEqual(boxes[1], Region.of([(4, 8), (0, 6)]))

  def test_level_count_checked(self):
    with self.assertRaisesRegex(tiling.TilingError, "levels"):
      tiling.held_region((8,), [Cut(0)], (2, 2), 0)


class OpTilesTest(absltest.TestCase):

  def test_batch_then_reduction(self):
    tiles = tiling.op_tiles(matmul_ctx(), ("i", "k"), (2, 2), Describer())
    t = tiles[3]  # coords (1, 1): second half of the rows, second half of k
    self.assertEqual(t.inputs[0], Region.of([(4, 8), (3, 6)]))
    self.assertEqual(t.inputs[1], Region.of([(3, 6), (0, 4)]))
    self.assertEqual(t.outputs[0], Region.of([(4, 8), (0, 4)]))
    self.assertEqual(t.partial_key, ((1,),))
    self.assertEqual(tiles[2].partial_key, ((0,),))
    self.assertEqual(t.context.inputs[0].shape, (4, 3))

  def test_replicate_and_single(self):
    rep = tiling.op_tiles(matmul_ctx(), ("replicate", "j"), (2, 2), Describer())
    self.assertEqual(rep[0].outputs, rep[2].outputs)
    self.assertEqual(rep[1].outputs[0], Region.of([(0, 8), (2, 4)]))
    single = tiling.op_tiles(matmul_ctx(), ("single", "single"), (2, 2), Describer())
    self.assertIsNotNone(single[0])
    self.assertEqual(single[1:], (None, None, None))

  def test_small_worker_piece_runs_replicated(self):
    # 3 rows cut 2 ways leaves worker 1 one row, which cannot be cut 2 ways again.
    tiles = tiling.op_tiles(matmul_ctx(m=3), ("i", "i"), (2, 2), Describer())
    self.assertEqual(tiles[2].outputs[0], tiles[3].outputs[0])
    self.assertNotEqual(tiles[0].outputs[0], tiles[1].outputs[0])

  def test_the_tree_walk_is_every_device_descending_alone(self):
    # op_tiles cuts each distinct sub-op once and shares equal sub-ops between
    # siblings; composing tiling.descend level by level per device is the
    # definition.  Uneven sizes (7 rows over 2 x 3, a window whose edge workers
    # need padding) make siblings differ.
    conv, _ = build_case(Case("Conv2D", [Rand((3, 7, 9, 2)), Rand((3, 3, 2, 4))],
                              {"strides": [1, 1, 1, 1], "padding": "SAME"}))
    for ctx, strategy, factors in ((matmul_ctx(m=7, k=5), ("i", "k", "j"), (2, 3, 2)),
                                   (matmul_ctx(m=7, k=5), ("k", "replicate", "k"), (2, 2, 2)),
                                   (conv, ("y", "x", "b"), (2, 3, 2)),
                                   (conv, ("x", "x", "y"), (2, 2, 2))):
      describer = Describer()
      tiles = tiling.op_tiles(ctx, strategy, factors, describer)
      for d, tile in enumerate(tiles):
        cur = ctx
        ins = tuple(Region.whole(t.shape) for t in ctx.inputs)
        outs = tuple(Region.whole(t.shape) for t in ctx.outputs)
        keys = [() for _ in outs]
        for level, (choice, n, w) in enumerate(zip(strategy, factors,
                                                   tiling.device_coords(d, factors))):
          step = tiling.descend(cur, choice, n, w, describer, level + 1)
          if step.view is not None:
            ins = tuple(Region(tuple(tiling.Interval(o.lo + r.lo, o.lo + r.hi)
                                     for r, o in zip(a.intervals, b.intervals)))
                        for a, b in zip(step.view.input_regions, ins))
            outs = tuple(Region(tuple(tiling.Interval(o.lo + r.lo, o.lo + r.hi)
                                      for r, o in zip(a.intervals, b.intervals)))
                         for a, b in zip(step.view.output_regions, outs))
          keys = [k + (w,) if p else k for k, p in zip(keys, step.partial)]
          cur = step.context
        with self.subTest(op=ctx.op_type, strategy=strategy, device=d):
          self.assertEqual((tile.inputs, tile.outputs, tile.partial_key),
                           (ins, outs, tuple(keys)))
          self.assertEqual(context_key(tile.context), context_key(cur))

  def test_a_sub_op_keyed_by_its_own_attributes(self):
    # A sub-op that keeps its op's attributes takes their frozen form from the op (a
    # MatMul cut by rows); one whose attributes change (a SAME convolution's rows become
    # EXPLICIT padding) freezes its own.  Either way its key is the one computed afresh.
    conv, _ = build_case(Case("Conv2D", [Rand((3, 7, 9, 2)), Rand((3, 3, 2, 4))],
                              {"strides": [1, 1, 1, 1], "padding": "SAME"}))
    for ctx, choice, inherits in ((matmul_ctx(), "i", True), (conv, "y", False)):
      sub = tiling.descend(ctx, choice, 2, 1, Describer()).context
      self.assertEqual(sub.__dict__.get("_frozen_attrs") is frozen_attrs(ctx), inherits)
      fresh = dataclasses.replace(sub)
      self.assertNotIn("_frozen_attrs", fresh.__dict__)
      self.assertEqual(context_key(sub), context_key(fresh))

  def test_a_step_is_made_once_per_context_key(self):
    # Two contexts of one key (another op's name): one step, one sub-op object, kept by
    # the describer; replicating leaves the worker the whole (first) context.
    describer = Describer()
    ctx = matmul_ctx()
    twin = dataclasses.replace(ctx, name=ctx.name + "_twin")
    self.assertEqual(context_key(twin), context_key(ctx))
    step = tiling.descend(ctx, "i", 2, 1, describer)
    self.assertIsNot(step.context, ctx)
    self.assertIs(tiling.descend(twin, "i", 2, 1, describer), step)
    other = tiling.descend(ctx, "i", 2, 0, describer)
    self.assertIsNot(other, step)
    self.assertIs(other.context, step.context)  # an even split: equal sub-ops, one object
    self.assertIs(tiling.descend(twin, "replicate", 2, 1, describer).context,
                  tiling.descend(ctx, "replicate", 2, 1, describer).context)

  def test_equal_ops_share_their_tiles_sub_ops(self):
    # The tiles of two equal ops hold the same sub-op objects: cut once for both.
    describer = Describer()
    ctx = matmul_ctx(m=7)
    twin = dataclasses.replace(ctx, name=ctx.name + "_twin")
    a = tiling.op_tiles(ctx, ("i", "k"), (2, 2), describer)
    b = tiling.op_tiles(twin, ("i", "k"), (2, 2), describer)
    for x, y in zip(a, b):
      self.assertIs(x.context, y.context)
      self.assertEqual((x.inputs, x.outputs, x.partial_key), (y.inputs, y.outputs, y.partial_key))
    self.assertEqual(a, tiling.op_tiles(ctx, ("i", "k"), (2, 2), Describer()))

  def test_tiles_are_made_once_per_key_and_kept_by_the_describer(self):
    # The exact count, the memory estimate and the rewrite of a plan ask for the same
    # tiles: one walk per (context key, strategy, factors), whatever the op's name.
    describer = Describer()
    ctx = matmul_ctx(m=7)
    twin = dataclasses.replace(ctx, name=ctx.name + "_twin")
    a = tiling.op_tiles(ctx, ("i", "k"), (2, 2), describer)
    self.assertIs(tiling.op_tiles(twin, ["i", "k"], [2, 2], describer), a)
    self.assertEqual(len(describer.tiles), 1)
    for strategy, factors in ((("k", "i"), (2, 2)), (("i", "k"), (2, 3))):
      other = tiling.op_tiles(ctx, strategy, factors, describer)
      self.assertIsNot(other, a)
      self.assertEqual(other, tiling.op_tiles(ctx, strategy, factors, Describer()))
    self.assertEqual(len(describer.tiles), 3)

  def test_a_replicated_level_repeats_its_subtree(self):
    tiles = tiling.op_tiles(matmul_ctx(m=7), ("replicate", "i"), (2, 2), Describer())
    self.assertIs(tiles[2], tiles[0])
    self.assertIs(tiles[3], tiles[1])
    self.assertNotEqual(tiles[0].outputs, tiles[1].outputs)

  def test_unknown_variable_raises(self):
    with self.assertRaisesRegex(tiling.TilingError, "no index variable 'z'"):
      tiling.op_tiles(matmul_ctx(), ("z",), (2,), Describer())


if __name__ == "__main__":
  absltest.main()
