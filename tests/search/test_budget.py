"""Tests for tf_tofu.search.budget: the fewest bytes per step within a memory budget.

On the tiny zoo at k = 4: bytes never grow with the budget, every plan's exact
peak is within its budget, an unlimited budget moves no more than datapar and
cut-only Tofu, a budget below cut-only Tofu's peak is refused with the peak
and the largest shards, and a budgeted plan that stores tensors replicated
trains like the unpartitioned step (float64) and moves what it predicts.
"""

import functools
import math

from tests import cpu_devices  # splits the CPU before TensorFlow starts

import numpy as np  # noqa: E402
from absl.testing import absltest, parameterized  # noqa: E402

import tf_tofu  # noqa: E402
from tf_tofu import api, models  # noqa: E402
from tf_tofu.core.states import REP  # noqa: E402
from tf_tofu.graph import view  # noqa: E402
from tf_tofu.layout import memory  # noqa: E402
from tf_tofu.opdefs.registry import Describer  # noqa: E402
from tf_tofu.search import budget, coarsen, onecut, planners  # noqa: E402
from tests.test_tofu_function import ZooCase  # noqa: E402

K = 4


@functools.lru_cache(maxsize=None)
def traced(key):
  step = models.tiny(key, optimizer="adam")
  with step.context():
    graph = tf_tofu.trace(step.fn, *step.input_signature)
  describer = Describer()
  return graph, view.from_tofu_graph(graph, describer), describer


def sweep_budgets(low: int, high: int, points: int = 6) -> list:
  """``points`` geometric budgets from ``low`` to ``high``, then unlimited."""
  return [int(low * (high / low) ** (i / (points - 1))) for i in range(points)] + [math.inf]


class ParseTest(parameterized.TestCase):

  @parameterized.parameters(("16GiB", 16 * 2**30), ("512MiB", 512 * 2**20),
                            ("1.5GB", 1_500_000_000), ("1000", 1000), (" 2 kib ", 2048),
                            ("0.5KiB", 512), ("1.1KB", 1100), ("3TB", 3 * 10**12),
                            ("unlimited", math.inf), ("inf", math.inf), (4096, 4096),
                            (1e9, 1_000_000_000), (math.inf, math.inf), (None, None))
  def test_sizes(self, text, expected):
    self.assertEqual(budget.parse_memory_budget(text), expected)

  @parameterized.parameters("16G", "lots", "-1GiB", "1.5.3GB", "", "GiB")
  def test_bad_strings_are_named(self, text):
    with self.assertRaisesRegex(tf_tofu.TofuError, f"memory_budget='{text}'"):
      budget.parse_memory_budget(text)

  @parameterized.parameters((-1,), (float("nan"),), (True,), ([1],))
  def test_bad_values(self, value):
    with self.assertRaisesRegex(tf_tofu.TofuError, "memory_budget="):
      budget.parse_memory_budget(value)

  def test_the_api_parses_the_string(self):
    graph, _, describer = traced("mlp")
    plan = tf_tofu.plan(graph, devices=K, describer=describer, memory_budget="1GiB")
    unlimited = tf_tofu.plan(graph, devices=K, describer=describer, memory_budget=math.inf)
    # 1 GiB holds every candidate of the tiny step: the same plan as no limit at all.
    self.assertEqual(plan.to_json(),
                     unlimited.to_json().replace("unlimited", "1.0 GiB (1073741824 B)"))
    with self.assertRaisesRegex(tf_tofu.TofuError, "memory_budget='16G'"):
      tf_tofu.plan(graph, devices=K, describer=describer, memory_budget="16G")


class StorageFactorTest(absltest.TestCase):

  def test_replication_is_priced_per_group_and_cuts_are_free(self):
    _, sgraph, describer = traced("mlp")
    groups = coarsen.tensor_groups(sgraph, describer)
    shapes = {t: s.shape for t, s in sgraph.tensors.items()}
    domains = [onecut.candidate_states(shapes[m[0]], 2, True) for m in groups]
    self.assertEqual(onecut.storage_factors(sgraph, groups, shapes, domains, 2, 0.0), ())
    factors = onecut.storage_factors(sgraph, groups, shapes, domains, 2, 0.25)
    self.assertNotEmpty(factors)
    for f in factors:
      (g,) = f.scope
      size = max(int(np.prod(shapes[t])) * sgraph.tensors[t].itemsize for t in groups[g])
      for state, price in zip(domains[g], f.table):
        self.assertEqual(price, 0.25 * size if state == REP else 0.0)


class SplitWorkTest(parameterized.TestCase):
  """With replicated storage allowed, a contraction (MatMul, Conv2D and their gradients:
  more work than data) never runs whole on every worker (onecut's "split work"); ops
  whose work is at most their data (elementwise, reductions) keep that option."""

  CONTRACTIONS = ("MatMul", "BatchMatMulV2", "Conv2D", "Conv2DBackpropInput",
                  "Conv2DBackpropFilter")
  ELEMENTWISE = ("AddV2", "Mul", "Relu", "ReluGrad", "Sub", "Tanh", "Sigmoid")

  def member_options(self, problem):
    """op name -> the option names it has in the level problem's units."""
    out = {}
    for members, _, names, _ in problem.units:
      per_member = (names.per_member if isinstance(names, onecut.ComboNames)
                    else list(zip(*names)))
      for op, options in zip(members, per_member):
        out.setdefault(op.name, set()).update(options)
    return out

  @parameterized.parameters("mlp", "gpt", "wresnet")
  def test_contractions_split_their_work_other_ops_may_replicate(self, key):
    _, sgraph, describer = traced(key)
    groups = coarsen.tensor_groups(sgraph, describer)
    shapes = {t: s.shape for t, s in sgraph.tensors.items()}
    contexts = {op.name: op.context for op in sgraph.ops}
    built = {split: self.member_options(onecut.build_level(
        sgraph, groups, contexts, shapes, 2, describer, {}, allow_rep=True,
        storage_price=0.0, split_work=split)) for split in (False, True)}
    op_type = {op.name: op.op_type for op in sgraph.ops}
    seen = {"contraction": 0, "elementwise": 0}
    for op, names in built[False].items():
      splits = bool(names - {"replicate", "single"})
      if op_type[op] in self.CONTRACTIONS and splits:
        seen["contraction"] += 1
        self.assertIn("replicate", names, op)
        self.assertEqual(built[True][op], names - {"replicate"}, op)
      else:
        seen["elementwise"] += op_type[op] in self.ELEMENTWISE and "replicate" in names
        if op_type[op] in self.ELEMENTWISE:
          self.assertEqual(built[True][op], names, op)
    self.assertGreater(seen["contraction"], 0)
    self.assertGreater(seen["elementwise"], 0)

  def test_unlimited_memory_still_splits_the_work_and_moves_bytes(self):
    _, sgraph, describer = traced("wresnet")
    unlimited = api.plan_view(sgraph, K, describer=describer, memory_budget=math.inf)
    self.assertGreater(unlimited.total_bytes, 0)
    op_type = {op.name: op.op_type for op in sgraph.ops}
    contractions = [op for op in unlimited.strategies
                    if op_type[op] in SplitWorkTest.CONTRACTIONS]
    self.assertNotEmpty(contractions)
    for op in contractions:
      self.assertNotIn("replicate", unlimited.strategies[op], op)


class BudgetSearchTest(parameterized.TestCase):

  @parameterized.parameters("mlp", "gpt", "lstm")
  def test_bytes_fall_as_the_budget_grows_and_every_plan_fits(self, key):
    _, sgraph, describer = traced(key)
    cut = api.plan_view(sgraph, K, describer=describer)
    single = memory.single_device_peak(sgraph, describer)
    budgets = sweep_budgets(cut.memory["worst"], 2 * single)
    found = planners.trade_off(sgraph, K, describer, budgets)
    moved = []
    for b, (result, peak) in zip(budgets, found):
      self.assertLessEqual(peak, b)
      self.assertEqual(budget.exact_peak(sgraph, result, describer), peak)
      moved.append(result.evaluation.total_bytes)
    self.assertEqual(moved, sorted(moved, reverse=True), budgets)
    self.assertLessEqual(moved[0], cut.total_bytes)
    self.assertLess(moved[-1], cut.total_bytes)
    # The API's plan at a budget: the same bytes, its memory within the budget.
    middle = api.plan_view(sgraph, K, describer=describer, memory_budget=budgets[3])
    self.assertEqual(middle.total_bytes, moved[3])
    self.assertLessEqual(middle.memory["worst"], budgets[3])

  def test_unlimited_moves_no_more_than_datapar_or_cut_only_tofu(self):
    _, sgraph, describer = traced("wresnet")
    unlimited = api.plan_view(sgraph, K, describer=describer, memory_budget=math.inf)
    for planner in ("tofu", "datapar"):
      other = api.plan_view(sgraph, K, describer=describer, planner=planner)
      self.assertLessEqual(unlimited.total_bytes, other.total_bytes, planner)
    self.assertIn(REP, {s for states in unlimited.layouts.values() for s in states})

  def test_a_budget_below_cut_only_peak_names_the_peak_and_largest_tensors(self):
    _, sgraph, describer = traced("gpt")
    peak = api.plan_view(sgraph, K, describer=describer).memory["worst"]
    with self.assertRaisesRegex(tf_tofu.TofuError, rf"below the smallest peak .*\({peak} B\)"
                                r".*largest tensors per device: .*\[cut\(\d\)"):
      api.plan_view(sgraph, K, describer=describer, memory_budget=peak - 1)
    fits = api.plan_view(sgraph, K, describer=describer, memory_budget=peak)
    self.assertLessEqual(fits.memory["worst"], peak)

  def test_no_budget_is_todays_plan(self):
    _, sgraph, describer = traced("gpt")
    today = api.plan_view(sgraph, K, describer=describer)
    self.assertEqual(api.plan_view(sgraph, K, describer=describer,
                                  memory_budget=None).to_json(), today.to_json())
    self.assertNotIn("memory budget", today.to_json())

  def test_refusals(self):
    graph, _, describer = traced("mlp")
    with self.assertRaisesRegex(tf_tofu.TofuError, "option of the tofu planner"):
      tf_tofu.plan(graph, devices=K, planner="datapar", memory_budget="1GiB")
    with self.assertRaisesRegex(tf_tofu.TofuError, "drop allow_rep_storage"):
      tf_tofu.plan(graph, devices=K, memory_budget="1GiB", allow_rep_storage=True)


class EndToEndTest(ZooCase):
  """A budgeted plan that stores tensors replicated, rewritten and run."""

  def test_budgeted_plan_trains_and_moves_what_it_predicts(self):
    cpu_devices.require()
    zoo = self.zoo("mlp", "tf", "adam")
    xs = zoo.inputs[0]
    cut = tf_tofu.function(zoo.step.fn, devices=K)
    _, sgraph = cut.traced(*xs)
    low = memory.plan_peak(sgraph, cut.plan(*xs), cut.describer).worst
    f = tf_tofu.function(zoo.step.fn, devices=K, memory_budget=int(1.6 * low))
    plan = f.plan(*xs)
    self.assertLess(plan.total_bytes, cut.plan(*xs).total_bytes)
    replicated = [t for t, states in plan.layouts.items() if REP in states
                  and max(sgraph.tensors[t].shape, default=0) >= K]
    self.assertNotEmpty(replicated)
    self.assertLessEqual(memory.plan_peak(sgraph, plan, f.describer).worst, int(1.6 * low))
    self.check_bytes(f, xs, "budgeted mlp")
    self.check_training(zoo, f, "budgeted mlp")


if __name__ == "__main__":
  absltest.main()
