"""Tests for tf_tofu.search.evaluate: exact bytes of a whole plan, against the cost table.

One matmul ``y = x w`` with x (8, 4), w (4, 6), float32, on 2 workers; S is a
tensor's size in bytes.  The table of docs/method.md section 5 gives, for n = 2:
cut(d) -> rep costs S, cut(d) -> cut(d') costs S/2, partial -> cut(d) costs S.
"""

import tensorflow as tf
from absl.testing import absltest, parameterized

from tests import search_testlib
from tf_tofu.graph import view
from tf_tofu.opdefs.registry import Describer
from tf_tofu.core.states import REP, Cut
from tf_tofu.search import evaluate

X, W, Y = 8 * 4 * 4, 4 * 6 * 4, 8 * 6 * 4   # bytes


def _matmul_view():
  g = tf.Graph()
  with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, (8, 4), name="x")
    w = tf.compat.v1.placeholder(tf.float32, (4, 6), name="w")
    tf.matmul(x, w, name="y")
  return view.from_tofu_graph(search_testlib.graph_from_tf(g))


class EvaluateTest(parameterized.TestCase):

  @parameterized.named_parameters(
      # rows of y: x is held as needed, w is gathered whole (cut -> rep: S).
      ("rows", {"x:0": Cut(0), "w:0": Cut(0), "y:0": Cut(0)}, "i", W),
      # the contraction: x re-cut (S/2), w held, a partial y reduce-scattered (S).
      ("contraction", {"x:0": Cut(0), "w:0": Cut(0), "y:0": Cut(0)}, "k", X // 2 + Y),
      # columns of y from replicated inputs: nothing moves.
      ("columns_from_replicas", {"x:0": REP, "w:0": REP, "y:0": Cut(1)}, "j", 0),
      # columns of y stored as rows: the output is re-cut (S/2); x gathered whole (S).
      ("columns_into_rows", {"x:0": Cut(0), "w:0": Cut(1), "y:0": Cut(0)}, "j", X + Y // 2),
  )
  def test_closed_form(self, layouts, strategy, want):
    graph = _matmul_view()
    ev = evaluate.evaluate(graph, (2,), {t: (s,) for t, s in layouts.items()},
                           {"y": (strategy,)}, Describer())
    self.assertEqual(ev.total_bytes, want)
    self.assertEqual(ev.level_bytes, (want,))
    self.assertEqual(sum(ev.op_bytes.values()), want)
    self.assertEqual(sum(c.bytes for c in ev.conversions), want)

  def test_levels_add_up(self):
    graph = _matmul_view()
    layouts = {"x:0": (Cut(0), Cut(1)), "w:0": (Cut(0), Cut(1)), "y:0": (Cut(0), Cut(1))}
    ev = evaluate.evaluate(graph, (2, 2), layouts, {"y": ("i", "j")}, Describer())
    self.assertLen(ev.level_bytes, 2)
    self.assertEqual(sum(ev.level_bytes), ev.total_bytes)
    self.assertGreater(ev.total_bytes, 0)

  def test_pair_bytes_split_the_total_by_device_pair(self):
    graph = _matmul_view()
    layouts = {"x:0": (Cut(0), Cut(1)), "w:0": (Cut(0), Cut(1)), "y:0": (Cut(0), Cut(1))}
    ev = evaluate.evaluate(graph, (2, 2), layouts, {"y": ("i", "j")}, Describer())
    self.assertEqual(sum(ev.pair_bytes.values()), ev.total_bytes)
    by_level = [0, 0]
    for (src, dst), b in ev.pair_bytes.items():
      self.assertNotEqual(src, dst)
      self.assertGreater(b, 0)
      by_level[0 if src // 2 != dst // 2 else 1] += b  # level 1 splits {0, 1} | {2, 3}
    self.assertEqual(tuple(by_level), ev.level_bytes)

  def test_equal_boxes_of_different_ops_are_one_object(self):
    g = tf.Graph()
    with g.as_default():
      x = tf.compat.v1.placeholder(tf.float32, (8, 6), name="x")
      tf.math.exp(x, name="e")
      tf.math.negative(x, name="m")  # another op type: its own tiles, the same boxes
    graph = view.from_tofu_graph(search_testlib.graph_from_tf(g))
    layouts = {t: (Cut(0), Cut(1)) for t in graph.tensors}
    cache = evaluate.EvalCache((2, 2))
    describer = Describer()
    ev = evaluate.evaluate(graph, (2, 2), layouts, {"e": ("i0", "i1"), "m": ("i0", "i1")},
                           describer, cache)
    self.assertEqual(ev.total_bytes, 0)
    self.assertLen(describer.tiles, 2)  # the describer keeps every op's tiles
    (_, exp_tiles), (_, neg_tiles) = describer.tiles.items()
    for a, b in zip(exp_tiles, neg_tiles):
      self.assertEqual(a.inputs, b.inputs)
      self.assertIs(a.inputs[0], b.inputs[0])
      self.assertIs(a.outputs[0], b.outputs[0])
      # The boxes are the describer's pool's: the quarters of x, of e and of m.
      bounds = tuple((iv.lo, iv.hi) for iv in a.inputs[0].intervals)
      self.assertIs(a.inputs[0], describer.pool.region(bounds))
    self.assertLen({id(t.inputs[0]) for t in exp_tiles + neg_tiles}, 4)


if __name__ == "__main__":
  absltest.main()
