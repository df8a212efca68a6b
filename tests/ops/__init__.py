"""Tests of tf_tofu/ops/, one file per module."""
