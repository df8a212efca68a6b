"""Tests for tf_tofu.ops.counting: bytes across devices, read off a GraphDef (not run)."""

import numpy as np
from absl.testing import absltest, parameterized

from tf_tofu.ops import comm
from tf_tofu.ops.counting import count_transfer_bytes, pair_table, transfer_count


def cpu(i):
  return f"/device:CPU:{i}"


def const(b, name, shape, device, dtype="float32"):
  return comm.const(b, name, np.zeros(shape), dtype, device)


class EdgeTest(absltest.TestCase):

  def test_once_per_tensor_and_destination(self):
    b = comm.GraphBuilder()
    x = const(b, "x", (4, 3), cpu(0))
    comm.identity(b, "a", x, "float32", cpu(1))
    b.add("Neg", "n", [x], cpu(1), {"T": "float32"})  # same tensor, same destination
    comm.identity(b, "c", x, "float32", cpu(2))        # another destination
    comm.identity(b, "local", x, "float32", cpu(0))    # no transfer
    count = transfer_count(b.graph_def())
    self.assertEqual(count.edge_bytes, 2 * 48)
    self.assertEqual(count.edges, (("x:0", "/device:CPU:1", 48), ("x:0", "/device:CPU:2", 48)))
    self.assertEqual(count.collective_bytes, 0)
    self.assertEqual(count.received, {"/device:CPU:1": 48, "/device:CPU:2": 48})
    self.assertEqual(count.between, {("/device:CPU:0", "/device:CPU:1"): 48,
                                     ("/device:CPU:0", "/device:CPU:2"): 48})
    table = pair_table(count, [cpu(0), cpu(1), cpu(2)]).splitlines()
    self.assertEqual(table[0], "bytes sent between devices per step (edges; row -> column):")
    self.assertEqual(table[2].split(), ["0", "-", "48", "B", "48", "B"])
    self.assertEqual(table[3].split(), ["1", "0", "B", "-", "0", "B"])
    self.assertEqual(table[5], "devices: 0 /device:CPU:0, 1 /device:CPU:1, 2 /device:CPU:2")
    self.assertLen(table, 6)

  def test_bytes_per_link_class(self):
    from tf_tofu.core import topology
    from tf_tofu.ops.counting import link_bytes
    w = "/job:worker/replica:0/task:{}/device:CPU:{}"
    b = comm.GraphBuilder()
    x = const(b, "x", (4, 3), w.format(0, 0))
    comm.identity(b, "same_task", x, "float32", w.format(0, 1))
    comm.identity(b, "other_task", x, "float32", w.format(1, 0))
    y = const(b, "y", (2,), w.format(1, 1))
    comm.identity(b, "back", y, "float32", w.format(0, 0))
    count = transfer_count(b.graph_def())
    self.assertEqual(link_bytes(count), {"local": 48, "network": 56})
    self.assertEqual(link_bytes(count, topology.Topology({"network": 1e8})),
                     {"local": 48, "network": 56})
    self.assertEqual(link_bytes(transfer_count(comm.GraphBuilder().graph_def())), {})

  def test_control_edges_move_nothing(self):
    b = comm.GraphBuilder()
    x = const(b, "x", (100,), cpu(0))
    b.add("NoOp", "after", [], cpu(1), control=[x])
    self.assertEqual(count_transfer_bytes(b.graph_def()), 0)

  def test_outputs_are_told_apart(self):
    b = comm.GraphBuilder()
    x = const(b, "x", (3, 5), cpu(0), "int64")
    rows = comm.unstack(b, "u", x, 3, "int64", cpu(0))
    comm.identity(b, "a", rows[1], "int64", cpu(1))
    comm.identity(b, "b", rows[2], "int64", cpu(1))
    self.assertEqual(count_transfer_bytes(b.graph_def()), 2 * 5 * 8)

  def test_device_spellings_are_one_device(self):
    b = comm.GraphBuilder()
    x = const(b, "x", (4,), "/CPU:0")
    comm.identity(b, "a", x, "float32", "/device:CPU:0")
    comm.identity(b, "c", x, "float32", "/job:localhost/replica:0/task:0/device:CPU:1")
    self.assertEqual(count_transfer_bytes(b.graph_def()), 16)

  def test_declared_shapes_fill_what_import_cannot_know(self):
    b = comm.GraphBuilder()
    p = comm.placeholder(b, "p", "float32", [-1, 3], cpu(0))
    comm.identity(b, "a", p, "float32", cpu(1))
    gd = b.graph_def()
    with self.assertRaisesRegex(ValueError, "no static shape"):
      count_transfer_bytes(gd)
    node = next(n for n in gd.node if n.name == "p")
    node.attr["_output_shapes"].list.shape.add().dim.add(size=5)
    node.attr["_output_shapes"].list.shape[0].dim.add(size=3)
    self.assertEqual(count_transfer_bytes(gd), 60)

  def test_nodes_without_device_are_refused(self):
    b = comm.GraphBuilder()
    const(b, "x", (2,), cpu(0))
    gd = b.graph_def()
    gd.node[0].device = ""
    with self.assertRaisesRegex(ValueError, "'x' has no device"):
      count_transfer_bytes(gd)


class CollectiveCountTest(parameterized.TestCase):

  def group(self, op, n, shape=(2, 3), members=None):
    b = comm.GraphBuilder()
    build = {"gather": comm.collective_gather, "allreduce": comm.collective_all_reduce,
             "reducescatter": comm.collective_reduce_scatter}[op]
    for d in range(n if members is None else members):
      x = const(b, f"x{d}", shape, cpu(d))
      build(b, f"c{d}", x, "float32", cpu(d), n, 7, 9)
    return b.graph_def()

  @parameterized.parameters(("gather", 4, 4 * 24 * 3), ("allreduce", 4, 2 * 24 * 3),
                            ("reducescatter", 4, 24 * 3), ("gather", 2, 2 * 24),
                            ("allreduce", 3, 2 * 24 * 2))
  def test_what_collectives_move(self, op, n, want):
    count = transfer_count(self.group(op, n))
    self.assertEqual((count.edge_bytes, count.collective_bytes), (0, want))
    self.assertLen(count.collectives, 1)
    # Every member receives an equal share.
    self.assertEqual(count.received, {cpu(d): want // n for d in range(n)})

  def test_incomplete_group_is_refused(self):
    with self.assertRaisesRegex(ValueError, "3 members"):
      count_transfer_bytes(self.group("allreduce", 4, members=3))

  def test_instances_are_counted_apart(self):
    b = comm.GraphBuilder()
    for ikey in (1, 2):
      for d in range(2):
        x = const(b, f"x{ikey}{d}", (5,), cpu(d))
        comm.collective_all_reduce(b, f"r{ikey}{d}", x, "float32", cpu(d), 2, 3, ikey)
    self.assertEqual(count_transfer_bytes(b.graph_def()), 2 * (2 * 20 * 1))

  def test_keys_must_be_constants(self):
    b = comm.GraphBuilder()
    for d in range(2):
      x = const(b, f"x{d}", (5,), cpu(d))
      k = comm.const(b, f"k{d}", np.int32(3), "int32", cpu(d))
      kk = comm.identity(b, f"kk{d}", k, "int32", cpu(d))
      gs = comm.const(b, f"gs{d}", np.int32(2), "int32", cpu(d))
      b.add(comm.COLLECTIVE_REDUCE, f"r{d}", [x, gs, kk, kk], cpu(d),
            {"T": "float32", "merge_op": "Add", "final_op": "Id"})
    with self.assertRaisesRegex(ValueError, "group_key must be a Const"):
      count_transfer_bytes(b.graph_def())

  def test_other_collectives_are_refused(self):
    b = comm.GraphBuilder()
    x = const(b, "x", (5,), cpu(0))
    b.add("CollectiveReduce", "r", [x], cpu(0),
          {"T": "float32", "group_size": 2, "group_key": 1, "instance_key": 1,
           "merge_op": "Add", "final_op": "Id", "subdiv_offsets": []})
    with self.assertRaisesRegex(ValueError, "not implemented"):
      count_transfer_bytes(b.graph_def())


if __name__ == "__main__":
  absltest.main()
