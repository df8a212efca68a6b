"""Tests of tf_tofu/layout/, one file per module."""
