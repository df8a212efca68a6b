"""From a Plan to a partitioned GraphDef (docs/method.md section 10).

``partition_graph_def(graph, plan, describer, comm=...)`` builds the GraphDef
(:mod:`partition`), whose conversions (:mod:`convert`, :mod:`assemble`,
:mod:`collective`) move exactly the bytes the plan predicts;
``execute.wrap`` runs it with whole feeds and fetches.
"""

from tf_tofu.rewrite.partition import (FeedShard, FetchShard, Partitioned,  # noqa: F401
                                       partition_graph_def, tensor_stem)
