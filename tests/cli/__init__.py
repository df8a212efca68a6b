"""Tests of tf_tofu/cli/, one file per module."""
