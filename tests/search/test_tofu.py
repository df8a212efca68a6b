"""Tests for tf_tofu.search.tofu: search options and user constraints per tensor group."""

from absl.testing import absltest

from tf_tofu.core.states import REP, Cut
from tf_tofu.search import tofu


class GroupConstraintsTest(absltest.TestCase):

  def test_members_constraints_intersect(self):
    groups = [["a", "b"], ["c"]]
    shapes = {"a": (8, 6), "b": (8, 6), "c": (4,)}
    states = {"a": (Cut(0), Cut(1)), "b": (Cut(1), REP)}
    got = tofu.group_constraints(groups, states, 2, shapes)
    self.assertEqual(got, {0: (Cut(1),)})   # group 1 is free

  def test_an_impossible_constraint_names_the_tensor_and_the_candidates(self):
    with self.assertRaisesRegex(ValueError, r"tensor 'c' \(shape \(1, 6\)\).*cut\(0\).*2 workers"):
      tofu.group_constraints([["c"]], {"c": (Cut(0),)}, 2, {"c": (1, 6)})

  def test_options_are_values(self):
    opts = tofu.SearchOptions()
    self.assertEqual(opts.max_table, 1 << 20)
    self.assertFalse(opts.allow_rep_storage)
    with self.assertRaises(Exception):
      opts.max_table = 3


if __name__ == "__main__":
  absltest.main()
