"""Tests of tf_tofu/models/, one file per module."""
