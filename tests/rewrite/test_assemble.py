"""Tests for tf_tofu.rewrite.assemble: a box concatenated on one device from its parts."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tf_tofu.core.regions import Region
from tf_tofu.ops import comm
from tf_tofu.rewrite import assemble

CPU = "/device:CPU:0"


class BuildBoxTest(absltest.TestCase):

  def test_three_parts_give_the_whole_box(self):
    whole = np.arange(24, dtype=np.float64).reshape(4, 6)
    boxes = [Region.of([(0, 2), (0, 3)]), Region.of([(0, 2), (3, 6)]),
             Region.of([(2, 4), (0, 6)])]
    b = comm.GraphBuilder()
    parts = [assemble.Shard(box, comm.const(b, f"part{i}", whole[box.slices()], "float64", CPU),
                            0) for i, box in enumerate(boxes)]
    out = assemble.build_box(b, "x", Region.of([(0, 4), (0, 6)]), parts, "float64", CPU)
    self.assertEqual(sum(n.op == "ConcatV2" for n in b.graph_def().node), 2)
    got = tf.compat.v1.wrap_function(
        lambda: tf.graph_util.import_graph_def(b.graph_def(), return_elements=[out if ":" in out else out + ":0"],
                                          name=""),
        [])()
    np.testing.assert_array_equal(got[0], whole)

  def test_one_part_is_used_as_it_is_and_none_is_refused(self):
    b = comm.GraphBuilder()
    box = Region.of([(0, 2)])
    x = comm.const(b, "x", np.ones(2), "float64", CPU)
    self.assertEqual(assemble.build_box(b, "y", box, [assemble.Shard(box, x, 0)], "float64", CPU),
                     x)
    with self.assertRaisesRegex(ValueError, "no parts"):
      assemble.build_box(b, "z", box, [], "float64", CPU)


if __name__ == "__main__":
  absltest.main()
