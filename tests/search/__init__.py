"""Tests of tf_tofu/search/, one file per module."""
