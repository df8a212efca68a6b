"""Builders for the nodes the rewrite inserts, and the byte count of a partitioned graph.

``comm`` writes NodeDefs (slices, concats, sums, collectives) with explicit
devices; ``counting.count_transfer_bytes`` reads back how many bytes a
GraphDef moves between devices; ``shapes`` gives every tensor of a GraphDef its
static shape (and writes ``_output_shapes``).
"""

from tf_tofu.ops.comm import GraphBuilder, rank_order  # noqa: F401
from tf_tofu.ops.counting import (TransferCount, count_transfer_bytes,  # noqa: F401
                                  transfer_count)
from tf_tofu.ops.shapes import StaticShapes, with_output_shapes  # noqa: F401
