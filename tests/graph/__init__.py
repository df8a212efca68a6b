"""Tests of tf_tofu/graph/, one file per module."""
