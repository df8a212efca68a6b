"""Tests for tf_tofu.core.states: the three states and their text form."""

from absl.testing import absltest

from tf_tofu.core.states import PARTIAL, REP, Cut, state_from_str


class StateTest(absltest.TestCase):

  def test_text_round_trip(self):
    for state in (Cut(0), Cut(3), REP, PARTIAL):
      self.assertEqual(state_from_str(str(state)), state)
    self.assertEqual([str(s) for s in (Cut(2), REP, PARTIAL)], ["cut(2)", "rep", "partial"])

  def test_bad_states(self):
    for text in ("cut(-1)", "cut(x)", "replicated", "", "cut(1"):
      with self.assertRaises(ValueError, msg=text):
        state_from_str(text)
    with self.assertRaisesRegex(ValueError, "dim >= 0"):
      Cut(-2)

  def test_states_are_values(self):
    self.assertEqual(Cut(1), Cut(1))
    self.assertNotEqual(Cut(1), Cut(0))
    self.assertLen({Cut(1), Cut(1), REP, PARTIAL}, 3)


if __name__ == "__main__":
  absltest.main()
