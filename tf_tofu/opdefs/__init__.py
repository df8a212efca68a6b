"""Op semantics: TDL descriptions of TensorFlow ops and the strategies derived from them.

Importing this package registers every description (``math_ops``, ``nn_ops``,
``array_ops``, ``random_ops``, ``volume_ops``).  Use :func:`semantics_of` to describe one op and
``analysis.strategies`` to derive its partition strategies.
"""

from tf_tofu.opdefs import (array_ops, math_ops, nn_ops, random_ops,  # noqa: F401  (registration)
                            volume_ops)
from tf_tofu.opdefs.analysis import OpFacts, facts, strategies, strategy_for
from tf_tofu.opdefs.description import (DescriptionError, OpContext, Semantics,
                                        ShardSpec, TensorInfo, WorkerView)
from tf_tofu.opdefs.registry import described_op_types, describe, lookup, semantics_of
from tf_tofu.opdefs.strategy import InputNeed, Strategy
