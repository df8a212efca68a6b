"""Tests for tf_tofu.ops.shapes: static shapes of rewritten GraphDefs, and _output_shapes."""

import numpy as np
from absl.testing import absltest

from tf_tofu.ops import comm, shapes

A = "/device:CPU:0"


class StaticShapesTest(absltest.TestCase):

  def test_reads_of_a_resource_placeholder_have_the_variable_shape(self):
    b = comm.GraphBuilder()
    h = comm.resource_placeholder(b, "v/shard", "float32", (5, 3), A)
    r = b.add("ReadVariableOp", "read", [h], A, {"dtype": "float32"})
    b.add("Relu", "relu", [r], A, {"T": "float32"})
    s = shapes.StaticShapes(b.graph_def())
    self.assertEqual(s.shape("read", 0), (5, 3))
    self.assertEqual(s.shape("relu", 0), (5, 3))
    self.assertEqual(s.bytes("relu", 0), 60)
    self.assertEqual(s.bytes(h, 0), 0)  # a resource handle moves no data
    self.assertEqual(shapes.handle_shape(b.graph_def().node[0]), ((5, 3), "float32"))

  def test_collective_gather_has_its_gathered_dim(self):
    b = comm.GraphBuilder()
    x = comm.placeholder(b, "x", "float32", (2, 4), A)
    y = comm.collective_gather(b, "g", x, "float32", A, 3, 1, 1)
    s = shapes.StaticShapes(b.graph_def())
    self.assertEqual(s.shape(y, 0), (6, 4))

  def test_unknown_shape_is_reported(self):
    b = comm.GraphBuilder()
    x = b.add("Placeholder", "x", [], A, {"dtype": "float32", "shape": None})
    s = shapes.StaticShapes(b.graph_def())
    self.assertIsNone(s.shape(x, 0))
    with self.assertRaisesRegex(ValueError, "x:0 has no static shape"):
      s.bytes(x, 0)

  def test_with_output_shapes_annotates_every_node(self):
    b = comm.GraphBuilder()
    x = comm.placeholder(b, "x", "float32", (2, 4), A)
    c = comm.const(b, "c", np.ones((4, 3)), "float32", A)
    b.add("MatMul", "mm", [x, c], A, {"T": "float32"})
    gd = shapes.with_output_shapes(b.graph_def())
    got = {n.name: [tuple(d.size for d in sh.dim) for sh in n.attr["_output_shapes"].list.shape]
           for n in gd.node}
    self.assertEqual(got, {"x": [(2, 4)], "c": [(4, 3)], "mm": [(2, 3)]})


if __name__ == "__main__":
  absltest.main()
