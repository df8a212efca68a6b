"""The op vocabulary every stage shares: feeds, sources, variable reads and updates, defined once.

* ``FEED_OPS`` - ops a step's inputs come from; ``SOURCE_OPS`` add constants and
  variable handles (their tensors can be produced in any layout for free);
* ``VALUE_READ_OPS`` read a whole variable (``ReadVariableOp``: on the shards,
  so in the variable's layout); ``HANDLE_READ_OPS`` read rows through the
  handle; ``READ_OPS`` is both;
* ``is_update_type`` - any op that writes a variable (by name prefix: every
  ``Assign*``, ``ResourceApply*``, ``ResourceSparseApply*``,
  ``ResourceScatter*``, ``ResourceStridedSliceAssign``), the structural notion
  ingestion uses to find a step's updates;
* ``SHARD_SLOTS`` - the updates the partitioned variables serve, each with the
  input slots that are element-wise with the variable (slot 0 is the variable;
  a listed slot is on the shards when it has the variable's shape; see
  ``view.update_slots``); ``UPDATE_OPS`` their names, ``SCATTER_OPS`` the row
  updates among them;
* ``RESOURCE_AS_VALUE`` - handle reads described as the same op on the value.
"""

FEED_OPS = frozenset({"Placeholder", "PlaceholderWithDefault", "_Arg"})
SOURCE_OPS = FEED_OPS | {"Const", "VarHandleOp"}
VALUE_READ_OPS = frozenset({"ReadVariableOp"})
HANDLE_READ_OPS = frozenset({"ResourceGather", "ResourceGatherNd"})
READ_OPS = VALUE_READ_OPS | HANDLE_READ_OPS

UPDATE_PREFIXES = ("Assign", "ResourceApply", "ResourceSparseApply", "ResourceScatter",
                   "ResourceStridedSliceAssign")
SPARSE_UPDATE_PREFIXES = ("ResourceScatter", "ResourceSparseApply")

SHARD_SLOTS = {
    "AssignVariableOp": (1,), "AssignAddVariableOp": (1,), "AssignSubVariableOp": (1,),
    "ResourceApplyGradientDescent": (2,),      # var, alpha, delta
    "ResourceApplyAdam": (1, 2, 9),            # var, m, v, beta1^t, beta2^t, lr, b1, b2, eps, grad
    "ResourceApplyMomentum": (1, 3),           # var, accum, lr, grad, momentum
    "ResourceApplyKerasMomentum": (1, 3),
    "ResourceScatterAdd": (),                  # var, indices, updates (rows by index)
    "ResourceScatterSub": (),
}
UPDATE_OPS = frozenset(SHARD_SLOTS)
SCATTER_OPS = frozenset({"ResourceScatterAdd", "ResourceScatterSub"})
RESOURCE_AS_VALUE = {"ResourceGather": "GatherV2"}
IGNORED_OPS = frozenset({"NoOp"})


def is_update_type(op_type: str) -> bool:
  """Whether ``op_type`` writes a variable (supported by the rewrite or not)."""
  return op_type.startswith(UPDATE_PREFIXES)
