"""Closed-form optima the search must reproduce exactly (docs/design.md section 4)."""


import tensorflow as tf
from absl.testing import absltest, parameterized

from tests import search_testlib  # noqa: E402

from tf_tofu.opdefs.registry import Describer  # noqa: E402
from tf_tofu.core.states import Cut  # noqa: E402
from tf_tofu.search import planners  # noqa: E402
from tf_tofu.graph import view  # noqa: E402


def matmul_chain(layers, batch, width):
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, (batch, width), name="x")
    for i in range(layers):
      w = tf.compat.v1.placeholder(tf.float32, (width, width), name=f"w{i}")
      x = tf.raw_ops.MatMul(a=x, b=w, name=f"layer{i}")
  return view.from_tofu_graph(search_testlib.graph_from_tf(g))


class MatmulChainTest(parameterized.TestCase):
  """x_{l+1} = x_l W_l, L layers, x: [B, H], W: [H, H], float32, n workers (prime).

  Cutting the batch needs every W whole: (n-1) 4 H^2 bytes a layer.  Cutting
  the contraction keeps W and x cut for free but leaves a partial output that
  a reduce-scatter resolves: (n-1) 4 B H a layer (so does cutting the output
  columns, which needs x whole).  With tensors stored as cuts, the optimum is

      L (n - 1) 4 min(B H, H^2).
  """

  @parameterized.parameters(
      # batch, width, n: small batch + large width -> weight-partitioned
      (4, 64, 2), (4, 64, 3), (6, 48, 2),
      # large batch + small width -> batch-partitioned
      (64, 8, 2), (96, 6, 3))
  def test_flip(self, batch, width, n):
    layers = 6
    graph = matmul_chain(layers, batch, width)
    res = planners.run("tofu", graph, n, Describer())
    expected = layers * (n - 1) * 4 * min(batch * width, width * width)
    self.assertEqual(res.evaluation.total_bytes, expected)
    self.assertTrue(res.proven_optimal)
    choice = {res.strategies[f"layer{i}"][0] for i in range(layers)}
    if batch < width:
      self.assertNotIn("i", choice, "small batch, wide layers: weights must be partitioned")
      for i in range(layers):
        self.assertIsInstance(res.layouts[f"w{i}:0"][0], Cut)
    else:
      self.assertEqual(choice, {"i"}, "large batch, narrow layers: batch-partitioned")


if __name__ == "__main__":
  absltest.main()
