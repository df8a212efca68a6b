"""tf_tofu: automatic dataflow-graph partitioning (Tofu) for TensorFlow."""

__version__ = "0.1.0"
