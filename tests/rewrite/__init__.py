"""Tests of tf_tofu/rewrite/, one file per module."""
