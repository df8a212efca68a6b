"""Ingestion: from a tf.function, GraphDef or SavedModel to the one graph view (TofuGraph).

    g = tf_tofu.graph.trace(train_step, x_spec, y_spec)          # a tf.function
    g = TofuGraph.from_graph_def("step.pb", feeds={"x": (32, 784)}, fetches=["loss"])
    g = TofuGraph.from_saved_model(path, signature="train")

The stage, one module a step:

* ``ingest``: trace, refuse control flow and malformed graphs, inline
  functions, fold shape arithmetic, infer every static shape;
* ``sources``: GraphDef files, feed shapes, the variables of a bare GraphDef;
* ``links``: roles of ops and tensors, each variable's gradient, accumulation
  and update (from structure, not names);
* ``attach``: each gradient op attached to the forward op it differentiates;
* ``tofu_graph``: :class:`TofuGraph`, the view every later stage reads.
"""

from tf_tofu.graph.ingest import IngestError
from tf_tofu.graph.tofu_graph import Op, Tensor, TofuGraph, Variable, trace

__all__ = ["IngestError", "Op", "Tensor", "TofuGraph", "Variable", "trace"]
