"""Tests for tf_tofu.rewrite.convert: conversions between layouts, run on logical CPU devices.

Every conversion is built by a Converter from per-device placeholders that
hold the boxes of a layout (``tiling.held_regions``), run on the logical CPU
devices (soft placement off) and compared in float64 with numpy: exactly
where it only moves data (gathers), within ``SUM_TOL`` where it adds partial
sums (AddN and all-reduce may add in another order than numpy).  Its bytes
(``count_transfer_bytes``) are those of the pieces the search prices
(``transfers.gather`` / ``transfers.produce_into``) in both comm forms, and a
plain conversion sends each piece from a node of its own, once.  Sizes include
dims that ``k`` does not divide and dims smaller than ``k``.
"""

import math

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

from tests import cpu_devices
from tf_tofu.core.regions import Region  # noqa: E402
from tf_tofu.core.states import REP, Cut  # noqa: E402
from tf_tofu.layout import transfers  # noqa: E402
from tf_tofu.layout.tiling import device_coords, held_regions  # noqa: E402
from tf_tofu.ops import comm, count_transfer_bytes, transfer_count  # noqa: E402
from tf_tofu.rewrite import convert  # noqa: E402
from tf_tofu.rewrite.assemble import Shard  # noqa: E402

DTYPE = "float64"
ITEMSIZE = 8
SUM_TOL = dict(rtol=1e-12, atol=1e-12)
MODES = (convert.PLAIN, convert.COLLECTIVE)


def setUpModule():
  cpu_devices.require()


def cpus(k):
  return tuple(f"/device:CPU:{i}" for i in range(k))


def canonical(device):
  return tf.DeviceSpec.from_string(device).to_string()


def _ref(tensor):
  return tensor if ":" in tensor else tensor + ":0"


def run(gd, feeds, outputs):
  """Runs ``gd`` with ``feeds`` (placeholder -> value) and returns the ``outputs`` as numpy."""
  names = list(feeds)

  def body(*args):
    return tf.graph_util.import_graph_def(
        gd, input_map={_ref(n): a for n, a in zip(names, args)},
        return_elements=[_ref(t) for t in outputs])

  fn = tf.compat.v1.wrap_function(body, [tf.TensorSpec(feeds[n].shape, tf.float64)
                                         for n in names])
  return [v.numpy() for v in fn(*[tf.constant(feeds[n]) for n in names])]


def placeholders(b, name, values, boxes, devices):
  """One placeholder per device for its box (None: nothing), fed ``values(d)[box]``."""
  shards, feeds = [], {}
  for d, box in enumerate(boxes):
    if box is None:
      shards.append(None)
      continue
    t = comm.placeholder(b, f"{name}/d{d}", DTYPE, box.shape, devices[d])
    shards.append(Shard(box, t, d))
    feeds[t] = np.ascontiguousarray(values(d)[box.slices()])
  return shards, feeds


def node_of(gd, tensor):
  return {n.name: n for n in gd.node}[tensor.split(":")[0]]


def op_count(gd, op_type):
  return [n.op for n in gd.node].count(op_type)


class GatherTest(parameterized.TestCase):
  """Held boxes -> needed boxes: exact values, the priced pieces and nothing else."""

  def build(self, stem, shape, devices, factors, held, need, mode=convert.PLAIN):
    b = comm.GraphBuilder()
    conv = convert.Converter(b, devices, factors, mode)
    whole = np.random.default_rng(0).standard_normal(shape)
    have, feeds = placeholders(b, f"{stem}/x", lambda d: whole, held, devices)
    out = conv.gather(stem, DTYPE, have, list(need))
    return conv, b.graph_def(), whole, have, feeds, out

  def check_values(self, gd, whole, need, feeds, out, devices):
    wanted = [d for d, n in enumerate(need) if n is not None]
    self.assertEqual([d for d, t in enumerate(out) if t is not None], wanted)
    got = run(gd, feeds, [out[d] for d in wanted])
    for d, value in zip(wanted, got):
      np.testing.assert_array_equal(value, whole[need[d].slices()], err_msg=f"device {d}")
      self.assertEqual(node_of(gd, out[d]).device, devices[d], f"device {d}'s result")

  @parameterized.named_parameters(
      # held layout -> needed layout, over `factors` levels.
      ("cut_to_rep", (8, 6), (4,), (Cut(0),), (REP,)),
      ("rows_to_cols_odd", (7, 5), (3,), (Cut(0),), (Cut(1),)),
      ("dims_smaller_than_k", (2, 3), (4,), (Cut(0),), (Cut(1),)),
      ("tiles_transposed_odd", (5, 7), (2, 2), (Cut(0), Cut(1)), (Cut(1), Cut(0))),
      ("from_replicas", (6, 5), (2, 3), (Cut(0), REP), (REP, Cut(1))),
      ("rep_to_cut_moves_nothing", (5, 3), (4,), (REP,), (Cut(0),)),
  )
  def test_plain_gather(self, shape, factors, held_layout, need_layout):
    devices = cpus(math.prod(factors))
    held = held_regions(shape, held_layout, factors)
    need = held_regions(shape, need_layout, factors)
    stem = f"plain_{'x'.join(map(str, shape))}_{len(devices)}"
    conv, gd, whole, _, feeds, out = self.build(stem, shape, devices, factors, held, need)
    self.check_values(gd, whole, need, feeds, out, devices)
    pieces = transfers.gather(held, list(need), factors)
    self.assertEqual(count_transfer_bytes(gd), ITEMSIZE * sum(p.elements for p in pieces))
    # Each piece leaves its source from a node of its own (Identity when it is the source's
    # whole shard, else Slice), shared by the destinations that need the same piece, and
    # crosses once per destination: the cross-device edges are the pieces.
    want_edges = set()
    for p in pieces:
      sent = node_of(gd, convert.sender_name(stem, p.src, p.region))
      self.assertEqual(sent.device, devices[p.src])
      self.assertEqual(sent.op, "Identity" if p.region == held[p.src] else "Slice")
      want_edges.add((sent.name + ":0", canonical(devices[p.dst]), ITEMSIZE * p.elements))
    self.assertEqual(set(transfer_count(gd).edges), want_edges)
    self.assertLen(transfer_count(gd).edges, len(pieces))
    senders = [n.name for n in gd.node if n.name.startswith(f"{stem}/from")]
    self.assertCountEqual(senders, {convert.sender_name(stem, p.src, p.region) for p in pieces})
    self.assertEqual((conv.plain_conversions, conv.collective_conversions),
                     (1 if pieces else 0, 0))

  def test_a_piece_received_whole_is_kept_on_its_destination(self):
    devices = cpus(2)
    held = held_regions((5, 3), (Cut(0),), (2,))
    need = [held[1], None]
    conv, gd, whole, _, feeds, out = self.build("whole_piece", (5, 3), devices, (2,), held, need)
    self.assertIsNone(out[1])
    recv = node_of(gd, out[0])
    self.assertEqual((recv.op, recv.device), ("Identity", devices[0]))
    sent = node_of(gd, recv.input[0])
    self.assertEqual((sent.op, sent.device), ("Identity", devices[1]))
    self.check_values(gd, whole, need, feeds, out, devices)
    self.assertEqual(count_transfer_bytes(gd), ITEMSIZE * held[1].volume)
    self.assertEqual(conv.plain_conversions, 1)

  @parameterized.named_parameters(
      # The members' blocks in rank order are rows in ascending order: gathered directly.
      ("rows_in_rank_order_odd", (9, 5), cpus(3), 0),
      # CPU:3 holds the first rows, CPU:0 the last: TensorFlow's rank order (by device index)
      # gathers them backwards, so the blocks are stacked and reassembled.
      ("devices_out_of_rank_order", (8, 6), cpus(4)[::-1], 4),
  )
  def test_cut_to_rep_as_all_gather(self, shape, devices, unpacks):
    factors = (len(devices),)
    held = held_regions(shape, (Cut(0),), factors)
    need = held_regions(shape, (REP,), factors)
    conv, gd, whole, _, feeds, out = self.build(f"allgather_{len(devices)}", shape, devices,
                                                factors, held, need, convert.COLLECTIVE)
    self.check_values(gd, whole, need, feeds, out, devices)
    self.assertEqual((op_count(gd, "CollectiveGatherV2"), op_count(gd, "Unpack")),
                     (len(devices), unpacks))
    pieces = transfers.gather(held, list(need), factors)
    count = transfer_count(gd)
    self.assertEqual((count.edge_bytes, count.collective_bytes),
                     (0, ITEMSIZE * sum(p.elements for p in pieces)))
    self.assertEqual((conv.collective_conversions, conv.plain_conversions), (1, 0))

  def test_needs_inside_the_own_box_are_served_locally(self):
    devices, factors = cpus(4), (2, 2)
    held = held_regions((8, 4), (Cut(0), REP), factors)
    whole_box = Region.whole((8, 4))
    need = [whole_box, held[1], whole_box, held[3]]
    conv, gd, whole, have, feeds, out = self.build("local_needs", (8, 4), devices, factors,
                                                   held, need, convert.COLLECTIVE)
    self.assertEqual((out[1], out[3]), (have[1].tensor, have[3].tensor))
    self.check_values(gd, whole, need, feeds, out, devices)
    gathers = [n for n in gd.node if n.op == "CollectiveGatherV2"]
    self.assertEqual(sorted(n.device for n in gathers), [devices[0], devices[2]])
    pieces = transfers.gather(held, need, factors)
    self.assertEqual(count_transfer_bytes(gd), ITEMSIZE * sum(p.elements for p in pieces))
    self.assertEqual(count_transfer_bytes(gd), ITEMSIZE * 2 * 16)


def _partial_keys(factors, levels):
  """Per device, its worker indices at the partial ``levels`` (() where the value is final)."""
  return [tuple(device_coords(d, factors)[l] for l in levels)
          for d in range(math.prod(factors))]


# name: (shape, factors, produced layout (None: on device 0 only), partial levels,
#        stored layout, CollectiveReduceV2 nodes in the collective form on CPUs)
PRODUCE_CASES = {
    "all_reduce_odd": ((5, 3), (3,), (REP,), (0,), (REP,), 3),
    "reduce_to_rows_odd": ((5, 3), (3,), (REP,), (0,), (Cut(0),), 0),  # no CPU reduce-scatter
    "reduce_to_rows_smaller_than_k": ((2, 3), (4,), (REP,), (0,), (Cut(0),), 0),
    "all_reduce_with_replicas": ((4, 6), (2, 2), (REP, REP), (0,), (REP, REP), 2),
    "reduce_to_cols_with_replicas": ((5, 6), (2, 2), (REP, REP), (0,), (REP, Cut(1)), 0),
    "two_boxes_of_addends": ((6, 4), (2, 2), (REP, Cut(0)), (0,), (Cut(1), REP), 0),
    "final_values_regathered": ((7, 5), (3,), (Cut(0),), (), (Cut(1),), 0),
    "single_op_output": ((5, 4), (3,), None, (), (Cut(0),), 0),
}


class ProduceTest(parameterized.TestCase):
  """An op's outputs (maybe partial sums) -> the stored layout."""

  def build(self, stem, shape, devices, factors, produced, keys, stored, mode):
    """Random addends (replicas of one (box, key) get the same), the Converter's result and
    the expected whole value (the sum over distinct keys, per produced box)."""
    rng = np.random.default_rng(0)
    addend = {}
    for box, key in zip(produced, keys):
      if box is not None and (box, key) not in addend:
        addend[box, key] = rng.standard_normal(shape)
    total = np.zeros(shape)
    for (box, _), value in addend.items():
      total[box.slices()] += value[box.slices()]
    b = comm.GraphBuilder()
    conv = convert.Converter(b, devices, factors, mode)
    have, feeds = placeholders(b, f"{stem}/y", lambda d: addend[produced[d], keys[d]], produced,
                               devices)
    out = conv.produce(stem, DTYPE, have, keys, list(stored))
    return conv, b.graph_def(), total, feeds, out

  @parameterized.named_parameters(
      (f"{name}_{mode}", case, mode) for name, case in PRODUCE_CASES.items() for mode in MODES)
  def test_produce(self, case, mode):
    shape, factors, produced_layout, levels, stored_layout, reducers = case
    k = math.prod(factors)
    devices = cpus(k)
    produced = (held_regions(shape, produced_layout, factors) if produced_layout else
                (Region.whole(shape),) + (None,) * (k - 1))
    keys = _partial_keys(factors, levels)
    if produced_layout is None:
      keys = [()] + [None] * (k - 1)
    stored = held_regions(shape, stored_layout, factors)
    stem = f"produce_{self._testMethodName}"
    conv, gd, total, feeds, out = self.build(stem, shape, devices, factors, produced, keys,
                                             stored, mode)
    self.assertEqual([(s.box, s.device) for s in out], [(s, d) for d, s in enumerate(stored)])
    got = run(gd, feeds, [s.tensor for s in out])
    for d, value in enumerate(got):
      np.testing.assert_allclose(value, total[stored[d].slices()], **SUM_TOL,
                                 err_msg=f"device {d}")
      self.assertEqual(value.shape, stored[d].shape)
      self.assertEqual(node_of(gd, out[d].tensor).device, devices[d], f"device {d}")
    pieces = transfers.produce_into(produced, keys, stored, factors)
    self.assertEqual(count_transfer_bytes(gd), ITEMSIZE * sum(p.elements for p in pieces))
    collective = reducers if mode == convert.COLLECTIVE else 0
    self.assertEqual(op_count(gd, "CollectiveReduceV2"), collective)
    self.assertEqual(op_count(gd, "CollectiveReduceScatterV2"), 0)
    self.assertEqual((conv.collective_conversions, conv.plain_conversions),
                     (1, 0) if collective else (0, 1))
    if levels:
      self.assertEqual(op_count(gd, "AddN") > 0, not collective)

  def test_reduce_scatter_only_when_every_device_is_a_gpu(self):
    # Not run (no GPUs here): the form of the graph and its bytes.
    shape, factors = (4, 6), (2,)
    produced = held_regions(shape, (REP,), factors)
    stored = held_regions(shape, (Cut(1),), factors)
    keys = _partial_keys(factors, (0,))
    priced = ITEMSIZE * sum(p.elements for p in
                            transfers.produce_into(produced, keys, stored, factors))
    for devices, scatters in ((("/device:GPU:0", "/device:GPU:1"), 2),
                              (("/device:GPU:0", "/device:CPU:0"), 0)):
      b = comm.GraphBuilder()
      conv = convert.Converter(b, devices, factors, convert.COLLECTIVE)
      self.assertEqual(conv.allow_reduce_scatter, bool(scatters))
      have, _ = placeholders(b, "rs/y", lambda d: np.zeros(shape), produced, devices)
      conv.produce("rs", DTYPE, have, keys, list(stored))
      gd = b.graph_def()
      self.assertEqual(op_count(gd, "CollectiveReduceScatterV2"), scatters, devices)
      self.assertEqual(op_count(gd, "Transpose"), 2 * scatters)  # dim 1 scattered via dim 0
      self.assertEqual(count_transfer_bytes(gd), priced, devices)


class CollectiveOrderTest(absltest.TestCase):

  def test_collectives_of_a_device_are_chained_with_its_token(self):
    devices, factors = cpus(4), (4,)
    b = comm.GraphBuilder()
    conv = convert.Converter(b, devices, factors, convert.COLLECTIVE)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 6))
    parts = [rng.standard_normal((4, 6)) for _ in devices]
    have, feeds = placeholders(b, "chain/a", lambda d: a, held_regions((8, 6), (Cut(0),), factors),
                               devices)
    gathered = conv.gather("chain/a", DTYPE, have, [Region.whole((8, 6))] * 4)
    produced, more = placeholders(b, "chain/b", lambda d: parts[d], [Region.whole((4, 6))] * 4,
                                  devices)
    feeds.update(more)
    summed = conv.produce("chain/b", DTYPE, produced, _partial_keys(factors, (0,)),
                          [Region.whole((4, 6))] * 4)
    gd = b.graph_def()
    nodes = {n.name: n for n in gd.node}
    self.assertLen(conv.collective_nodes, 8)
    self.assertEqual([nodes[n].op for n in conv.collective_nodes],
                     ["CollectiveGatherV2"] * 4 + ["CollectiveReduceV2"] * 4)
    for d, dev in enumerate(devices):
      mine = [n for n in conv.collective_nodes if nodes[n].device == dev]
      self.assertLen(mine, 2)
      token = f"tofu_collective/ordering_token_d{d}"
      self.assertEqual((nodes[token].op, nodes[token].device), ("VarHandleOp", dev))
      for i, name in enumerate(mine):
        data = [x for x in nodes[name].input if not x.startswith("^")]
        self.assertEqual(data[4:], [token], name)  # after x, group size, group and instance key
        control = [x for x in nodes[name].input if x.startswith("^")]
        self.assertEqual(control, ["^" + mine[i - 1]] if i else [], name)
    got = run(gd, feeds, gathered + [s.tensor for s in summed])
    for d in range(4):
      np.testing.assert_array_equal(got[d], a)
      np.testing.assert_allclose(got[4 + d], sum(parts), **SUM_TOL)


if __name__ == "__main__":
  absltest.main()
