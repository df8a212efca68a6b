"""Keras 3 integration: ``tf_tofu.keras.partition(model, devices=8)`` makes ``fit``,
``evaluate`` and ``predict`` run partitioned (see ``partitioned_model``)."""

from tf_tofu.keras.partitioned_model import PartitionedSteps, partition

__all__ = ["PartitionedSteps", "partition"]
