"""Tests for tf_tofu.rewrite.memory: the liveness peak of a partitioned GraphDef."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tf_tofu.rewrite import memory
from tf_tofu.ops import comm

A, B = "/device:CPU:0", "/device:CPU:1"


class GraphDefTest(absltest.TestCase):

  def test_shards_and_activations_of_a_graph_def(self):
    b = comm.GraphBuilder()
    h0 = comm.resource_placeholder(b, "w/shard0", "float32", (4, 3), A)
    h1 = comm.resource_placeholder(b, "w/shard1", "float32", (4, 3), B)
    x = comm.placeholder(b, "x", "float32", (2, 4), A)
    r0 = b.add("ReadVariableOp", "read0", [h0], A, {"dtype": "float32"})
    b.add("ReadVariableOp", "read1", [h1], B, {"dtype": "float32"})
    y = b.add("MatMul", "mm", [x, r0], A, {"T": "float32"})
    b.add("Relu", "relu", [y], B, {"T": "float32"})  # y (2x3) is received on B
    est = memory.graph_peak(b.graph_def())
    self.assertEqual(est.persistent, {A: 48, B: 48})
    self.assertEqual(est.peak[A], 48 + 32 + 24)  # x and y live together
    self.assertEqual(est.peak[B], 48 + 24 + 24)  # received y and relu's output


if __name__ == "__main__":
  absltest.main()
