"""Tests for tf_tofu.search.improve: the exact improvement pass.

The pass rests on one identity: with the ops' strategies fixed, the plan's
exact bytes are a sum of per-tensor terms, each a function of that tensor's
layout alone.  The tests check the identity against ``evaluate`` on every
planner's plans, that every move is one the search could make, that the bytes
a pass reports saved are exactly what ``evaluate`` then counts, and that it
finds moves where the recursion leaves bytes on the table.
"""

from unittest import mock

from tests import cpu_devices  # noqa: F401  (splits the CPU before TensorFlow starts)

from absl.testing import absltest, parameterized  # noqa: E402

from tests import search_testlib  # noqa: E402
import tf_tofu  # noqa: E402
from tf_tofu import models  # noqa: E402
from tf_tofu.core.states import REP, Cut  # noqa: E402
from tf_tofu.graph import view  # noqa: E402
from tf_tofu.opdefs.registry import Describer  # noqa: E402
from tf_tofu.search import coarsen, evaluate, improve, onecut, planners  # noqa: E402
from tf_tofu.search.recursive import block_shape  # noqa: E402
from tf_tofu.verify import sweep  # noqa: E402


def _planned(seed, k, planner="tofu"):
  describer = Describer()
  graph = view.from_tofu_graph(search_testlib.random_graph(seed), describer)
  result = planners.run(planner, graph, k, describer)
  return graph, describer, coarsen.tensor_groups(graph, describer), result


def _improved(graph, describer, groups, result, **kwargs):
  return improve.improve(graph, groups, result.factors, result.layouts, result.strategies,
                         describer, **kwargs)


class TensorTermsTest(parameterized.TestCase):

  @parameterized.product(seed=(0, 1, 2, 3), k=(2, 4, 6), planner=sorted(planners.PLANNERS))
  def test_the_terms_sum_to_the_evaluated_bytes(self, seed, k, planner):
    graph, describer, _, result = _planned(seed, k, planner)
    pricer = evaluate.PlanPricer(graph, result.factors, result.layouts, result.strategies,
                                 describer, evaluate.EvalCache(result.factors))
    for op in graph.ops:
      pricer.record(op)
    total = sum(pricer.tensor_elements(t, result.layouts[t]) * info.itemsize
                for t, info in graph.tensors.items())
    self.assertEqual(total, result.evaluation.total_bytes)


class ImproveTest(parameterized.TestCase):

  @parameterized.product(seed=tuple(range(8)), k=(4, 8))
  def test_saved_bytes_are_what_evaluate_counts(self, seed, k):
    graph, describer, groups, result = _planned(seed, k)
    found = _improved(graph, describer, groups, result)
    again = evaluate.evaluate(graph, result.factors, found.layouts, result.strategies,
                              describer)
    self.assertEqual(again.total_bytes, result.evaluation.total_bytes - found.saved_bytes)
    self.assertEqual(found.saved_bytes > 0, found.moves > 0)
    self.assertGreaterEqual(found.saved_bytes, 0)

  def test_finds_what_the_recursion_leaves(self):
    # Random graph 0 at k = 4: the recursion's plan moves 136 B; moving one tensor
    # group's state at one level gives 112 B.
    graph, describer, groups, result = _planned(0, 4)
    self.assertEqual(result.evaluation.total_bytes, 136)
    found = _improved(graph, describer, groups, result)
    self.assertEqual((found.moves, found.saved_bytes), (1, 24))
    self.assertEqual(_improved(graph, describer, groups, result), found)  # deterministic

  def test_reports_progress_over_the_groups(self):
    graph, describer, groups, result = _planned(0, 4)
    said = []
    with mock.patch.object(improve, "PROGRESS_EVERY", 2), \
         mock.patch.object(improve.progress, "update", said.append):
      _improved(graph, describer, groups, result)
    self.assertGreaterEqual(len(groups), 2)
    self.assertIn(f"exact improvement pass, sweep 1: 2/{len(groups):,} tensor groups, 0 moves",
                  said)
    self.assertLen([m for m in said if "sweep 1:" in m], len(groups) // 2)

  @parameterized.parameters(*range(8))
  def test_moved_layouts_are_states_the_search_could_choose(self, seed):
    graph, describer, groups, result = _planned(seed, 8)
    found = _improved(graph, describer, groups, result)
    for members in groups:
      self.assertEqual(len({found.layouts[t] for t in members}), 1, members)
    for t, layout in found.layouts.items():
      block = graph.tensors[t].shape
      for state, n in zip(layout, result.factors):
        self.assertIn(state, onecut.candidate_states(block, n, False), (t, layout))
        block = block_shape(block, state, n)

  def test_tensor_constraints_hold(self):
    graph, describer, groups, result = _planned(0, 8)
    moved = {t for t, lay in _improved(graph, describer, groups, result).layouts.items()
             if lay != result.layouts[t]}
    self.assertTrue(moved)
    pinned = {t: tuple(sorted(set(result.layouts[t]), key=str)) for t in moved}
    found = _improved(graph, describer, groups, result, tensor_states=pinned)
    for t, allowed in pinned.items():
      self.assertLessEqual(set(found.layouts[t]), set(allowed), t)


class ImprovedPlansRunTest(parameterized.TestCase):
  """An improved plan, end to end in float64: rewritten, run on logical devices, equal to
  the unpartitioned step, and moving exactly the bytes it predicts."""

  def setUp(self):
    super().setUp()
    cpu_devices.require(8)

  @parameterized.parameters(("lstm", "tf", 6, "tofu"), ("gpt", "keras", 8, "megatron"))
  def test_improved_plan_runs_and_counts_its_bytes(self, key, flavor, k, found_by):
    step = models.tiny(key, flavor=flavor, optimizer="adam", dtype="float64")
    inputs = [step.example_inputs(seed) for seed in range(2)]
    row = sweep.check_step(step.name, step.fn, inputs, k, never_worse=True)
    self.assertEqual(row.mismatches, ())
    self.assertEqual(row.counted, row.predicted)
    with step.context():
      graph = tf_tofu.trace(step.fn, *step.input_signature)
    plan = tf_tofu.plan(graph, devices=k, never_worse=True, memory=False)
    self.assertEqual(plan.total_bytes, row.predicted)
    self.assertEqual(plan.found_by, found_by)
    self.assertTrue([n for n in plan.notes if n.startswith("exact improvement pass")],
                    plan.notes)


class GroupMovesTest(absltest.TestCase):

  def test_one_level_changes_and_the_others_stay(self):
    self.assertEqual(improve.group_moves((4, 4), (Cut(0), Cut(0)), 1, (2, 2), False),
                     [(Cut(0), Cut(1))])
    self.assertEqual(improve.group_moves((4, 4), (Cut(0), Cut(0)), 1, (2, 2), True),
                     [(Cut(0), Cut(1)), (Cut(0), REP)])

  def test_a_move_that_leaves_a_later_cut_too_small_is_not_made(self):
    # (3, 2) cut on dim 0 over 2 leaves the last worker a (1, 2) block: dim 0 cannot be
    # cut again at level 2, so only the current layout's level-1 state is valid.
    self.assertEqual(improve.group_moves((3, 2), (Cut(1), Cut(0)), 0, (2, 2), False), [])
    self.assertEqual(improve.group_moves((4, 2), (Cut(1), Cut(0)), 0, (2, 2), False),
                     [(Cut(0), Cut(0))])

  def test_constraints_narrow_the_moves(self):
    self.assertEqual(improve.group_moves((4, 4, 4), (Cut(0),), 0, (2,), False,
                                         frozenset({Cut(0), Cut(2)})), [(Cut(2),)])


if __name__ == "__main__":
  absltest.main()
