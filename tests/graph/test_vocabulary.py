"""Tests for tf_tofu.graph.vocabulary: one op vocabulary, consistent with itself."""

from absl.testing import absltest

from tf_tofu.graph import vocabulary as v


class VocabularyTest(absltest.TestCase):

  def test_update_types(self):
    for op_type in ("AssignVariableOp", "AssignSubVariableOp", "ResourceApplyAdam",
                    "ResourceSparseApplyAdagrad", "ResourceScatterUpdate",
                    "ResourceStridedSliceAssign"):
      self.assertTrue(v.is_update_type(op_type), op_type)
    for op_type in ("ReadVariableOp", "ResourceGather", "MatMul", "VarHandleOp"):
      self.assertFalse(v.is_update_type(op_type), op_type)

  def test_sets_nest(self):
    self.assertTrue(all(v.is_update_type(t) for t in v.UPDATE_OPS))
    self.assertLessEqual(v.SCATTER_OPS, v.UPDATE_OPS)
    self.assertLessEqual(v.FEED_OPS, v.SOURCE_OPS)
    self.assertEqual(v.READ_OPS, v.VALUE_READ_OPS | v.HANDLE_READ_OPS)
    self.assertLessEqual(set(v.RESOURCE_AS_VALUE), v.HANDLE_READ_OPS)
    for op_type, slots in v.SHARD_SLOTS.items():
      self.assertNotIn(0, slots, op_type)  # slot 0 is the variable itself


if __name__ == "__main__":
  absltest.main()
