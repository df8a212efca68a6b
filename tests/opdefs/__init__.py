"""Tests of tf_tofu/opdefs/, one file per module."""
