"""Kernel-check cases for ``array_ops`` descriptions.

``CASES`` is what ``python -m tf_tofu.opdefs.validate`` runs.  Attributes are
written with their OpDef names, as in a NodeDef.
"""

from tf_tofu.opdefs.cases import Case, Fixed, Rand


def _i32(v):
  return Fixed(v, "int32")


def _i64(v):
  return Fixed(v, "int64")


def _ids(shape, hi, dtype="int32"):
  return Rand(shape, dtype, 0, hi)


CASES = [
    # BroadcastTo
    Case("BroadcastTo", [Rand((1, 5)), _i32([4, 5])]),
    Case("BroadcastTo", [Rand((3, 1)), _i64([2, 3, 7])], label="new leading dim"),
    # Concat / ConcatV2
    Case("ConcatV2", [[Rand((5, 3)), Rand((5, 4)), Rand((5, 2))], _i32(1)]),
    Case("ConcatV2", [[Rand((3, 5)), Rand((4, 5))], _i32(0)], label="uneven parts"),
    Case("ConcatV2", [[Rand((2, 3, 2), "int32"), Rand((2, 3, 5), "int32")], _i64(-1)],
         label="negative axis, int32"),
    Case("Concat", [_i32(0), [Rand((3, 4)), Rand((5, 4))]]),
    # Fill
    Case("Fill", [_i32([5, 7]), Rand(())]),
    Case("Fill", [_i64([9]), Rand((), "int32")]),
    # Gather / GatherV2
    Case("GatherV2", [Rand((7, 5)), _ids((6,), 7), _i32(0)]),
    Case("GatherV2", [Rand((4, 9, 3)), _ids((2, 5), 9, "int64"), _i64(1)], label="axis 1"),
    Case("GatherV2", [Rand((4, 7, 3)), _ids((4, 5), 7), _i32(1)], {"batch_dims": 1},
         label="batch_dims"),
    Case("GatherV2", [Rand((5, 6)), _ids((7,), 6), _i32(-1)], label="negative axis"),
    Case("Gather", [Rand((7, 4)), _ids((5, 2), 7)]),
    # OneHot
    Case("OneHot", [_ids((5,), 6), _i32(6), Rand(()), Rand(())], {"axis": -1}),
    Case("OneHot", [_ids((4, 3), 5, "int64"), _i32(5), Rand(()), Rand(())], {"axis": 0}),
    Case("OneHot", [_ids((4, 3), 7), _i32(7), Rand(()), Rand(())], {"axis": 1}),
    # Pack
    Case("Pack", [[Rand((4, 5)), Rand((4, 5)), Rand((4, 5))]], {"axis": 1}),
    Case("Pack", [[Rand((6,)), Rand((6,))]], {"axis": -1}, label="negative axis"),
    # Pad / PadV2
    Case("Pad", [Rand((5, 4)), _i32([[1, 2], [0, 3]])]),
    Case("Pad", [Rand((3, 6)), _i64([[4, 0], [1, 1]])], label="blocks inside the padding"),
    Case("PadV2", [Rand((4, 5)), _i32([[2, 1], [1, 1]]), Rand(())]),
    # Reshape
    Case("Reshape", [Rand((6, 4)), _i32([3, 2, 4])], label="split"),
    Case("Reshape", [Rand((3, 2, 4)), _i32([6, 4])], label="merge"),
    Case("Reshape", [Rand((4, 3, 5)), _i64([4, -1])], label="merge minor, -1"),
    Case("Reshape", [Rand((6, 4)), _i32([4, 6])], label="shared factor 2"),
    Case("Reshape", [Rand((10, 6)), _i32([6, 10])], label="shared factor 2, uneven"),
    Case("Reshape", [Rand((2, 3)), _i32([3, 2])], label="entangled"),
    Case("Reshape", [Rand((1, 6, 1, 4)), _i32([6, 4, 1])], label="size-1 dims"),
    Case("Reshape", [Rand((12, 5)), _i32([-1, 15])], label="regroup"),
    Case("Reshape", [Rand((8, 9)), _i32([2, 36])], label="digits across dims"),
    # ReverseV2
    Case("ReverseV2", [Rand((4, 5, 3)), _i32([0, 2])]),
    Case("ReverseV2", [Rand((7,)), _i64([-1])], label="negative axis"),
    Case("ReverseV2", [Rand((5, 6)), Fixed([], "int32")], label="no axes"),
    # Slice
    Case("Slice", [Rand((7, 6)), _i32([1, 2]), _i32([5, -1])]),
    Case("Slice", [Rand((9,)), _i64([3]), _i64([4])]),
    # StridedSlice
    Case("StridedSlice", [Rand((9, 8)), _i32([1, 0]), _i32([8, 7]), _i32([2, 3])],
         label="strides"),
    Case("StridedSlice", [Rand((10, 6)), _i32([-2, 0]), _i32([0, 6]), _i32([-3, 1])],
         label="negative stride"),
    Case("StridedSlice", [Rand((10, 6)), _i32([9, 1]), _i32([0, 5]), _i32([-2, 1])],
         {"end_mask": 1}, label="negative stride to the start"),
    Case("StridedSlice", [Rand((4, 5, 6)), _i32([1, 0, 0, 1]), _i32([2, 0, 0, 5]),
                          _i32([1, 1, 1, 1])],
         {"ellipsis_mask": 2, "new_axis_mask": 4, "shrink_axis_mask": 1},
         label="shrink, ellipsis, new axis"),
    Case("StridedSlice", [Rand((7, 8)), _i32([2, 3]), _i32([0, 0]), _i32([1, 2])],
         {"begin_mask": 1, "end_mask": 3}, label="begin/end masks"),
    Case("StridedSlice", [Rand((6, 5)), _i64([-1]), _i64([0]), _i64([1])],
         {"shrink_axis_mask": 1}, label="shrink -1"),
    Case("StridedSlice", [Rand((11, 3)), _i32([0]), _i32([0]), _i32([3])],
         {"begin_mask": 1, "end_mask": 1}, label="::3"),
    Case("StridedSlice", [Rand((5, 7)), _i32([0, 1]), _i32([0, 6]), _i32([1, 1])],
         {"new_axis_mask": 1}, label="leading new axis"),
    # StridedSliceGrad
    Case("StridedSliceGrad", [_i32([9, 8]), _i32([1, 0]), _i32([8, 7]), _i32([2, 3]),
                              Rand((4, 3))], label="strides"),
    Case("StridedSliceGrad", [_i32([10, 6]), _i32([-2, 0]), _i32([0, 6]), _i32([-3, 1]),
                              Rand((3, 6))], label="negative stride"),
    Case("StridedSliceGrad", [_i32([10, 6]), _i32([9, 1]), _i32([0, 5]), _i32([-2, 1]),
                              Rand((5, 4))], {"end_mask": 1},
         label="negative stride to the start"),
    Case("StridedSliceGrad", [_i32([4, 5, 6]), _i32([1, 0, 0, 1]), _i32([2, 0, 0, 5]),
                              _i32([1, 1, 1, 1]), Rand((5, 1, 4))],
         {"ellipsis_mask": 2, "new_axis_mask": 4, "shrink_axis_mask": 1},
         label="shrink, ellipsis, new axis"),
    Case("StridedSliceGrad", [_i64([7, 5]), _i64([2, 1]), _i64([6, 4]), _i64([1, 1]),
                              Rand((4, 3))], label="plain"),
    # Tile
    Case("Tile", [Rand((3, 4)), _i32([2, 1])]),
    Case("Tile", [Rand((2, 3)), _i32([3, 2])], label="both tiled"),
    Case("Tile", [Rand((1, 5)), _i64([4, 1])], label="size-1 tiled"),
    Case("Tile", [Rand((5, 1)), _i32([1, 3])]),
    # Transpose
    Case("Transpose", [Rand((2, 3, 4)), _i32([2, 0, 1])]),
    Case("Transpose", [Rand((5, 7)), _i32([1, 0])]),
    Case("Transpose", [Rand((3, 1, 5, 2), "int32"), _i64([3, 1, 0, 2])], label="int32"),
    # Unpack
    Case("Unpack", [Rand((3, 4, 5))], {"num": 4, "axis": 1}),
    Case("Unpack", [Rand((5, 2))], {"num": 2, "axis": -1}, label="negative axis"),
    # Cumsum / Cumprod
    Case("Cumsum", [Rand((5, 7)), _i32(1)]),
    Case("Cumsum", [Rand((6, 3, 4)), _i32(0)], {"exclusive": True}, label="exclusive"),
    Case("Cumsum", [Rand((4, 5)), _i64(-1)], {"reverse": True}, label="reverse"),
    Case("Cumprod", [Rand((3, 6)), _i32(1)]),
    # TopKV2
    Case("TopKV2", [Rand((6, 9)), _i32(3)]),
    Case("TopKV2", [Rand((2, 4, 7)), _i32(2)], label="3-D"),
    # ScatterNd
    Case("ScatterNd", [_ids((6, 1), 5), Rand((6, 3)), _i32([5, 3])]),
    Case("ScatterNd", [_ids((4, 2), 3, "int64"), Rand((4, 2)), _i64([3, 3, 2])],
         label="2-D index"),
    Case("ScatterNd", [_ids((3, 4, 1), 6), Rand((3, 4)), _i32([6])], label="rows of rows"),
    # UnsortedSegment*
    Case("UnsortedSegmentSum", [Rand((9, 4)), _ids((9,), 5), _i32(5)]),
    Case("UnsortedSegmentSum", [Rand((6, 5, 3)), _ids((6, 5), 4, "int64"), _i64(4)],
         label="2-D ids"),
    Case("UnsortedSegmentMax", [Rand((8, 3)), _ids((8,), 4), _i32(4)]),
    Case("UnsortedSegmentMin", [Rand((7, 2)), _ids((7,), 3), _i32(3)]),
    Case("UnsortedSegmentProd", [Rand((6, 3)), _ids((6,), 4), _i32(4)]),

    # ExpandDims
    Case("ExpandDims", [Rand((5, 6)), _i32(1)]),
    Case("ExpandDims", [Rand((5, 6)), _i64([-1])], label="negative axis"),
    # Split / SplitV
    Case("Split", [_i32(1), Rand((5, 6))], {"num_split": 3}),
    Case("Split", [_i32(-1), Rand((4, 3, 4))], {"num_split": 2}, label="negative axis"),
    Case("Split", [_i32(0), Rand((6, 5))], {"num_split": 6}, label="size-1 pieces"),
    Case("SplitV", [Rand((7, 5)), _i32([2, -1, 1]), _i32(0)], {"num_split": 3}),
    Case("SplitV", [Rand((4, 9)), _i64([3, 3, 3]), _i32(1)], {"num_split": 3}),
    # Squeeze
    Case("Squeeze", [Rand((5, 1, 6, 1))], label="all size-1 dims"),
    Case("Squeeze", [Rand((5, 1, 6, 1))], {"squeeze_dims": [-1]}, label="negative dim"),
    Case("Squeeze", [Rand((1, 3))], {"squeeze_dims": [0]}),
]
