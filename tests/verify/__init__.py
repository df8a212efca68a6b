"""Tests of tf_tofu/verify/, one file per module."""
