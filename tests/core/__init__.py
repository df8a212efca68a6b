"""Tests of tf_tofu/core/, one file per module."""
