"""Descriptions of TensorFlow's array ops: reshapes, slices, concatenation, gathers."""

from __future__ import annotations
