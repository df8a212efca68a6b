"""Tests for tf_tofu.opdefs.volume_ops: 3-D convolutions and poolings, cut on batch and channels.

Which variables each description lets a strategy cut (batch, channels; never
a spatial dim or a tap, since these ops take no EXPLICIT padding), the
states those strategies give, per-worker shape inputs, and refusals.  Every
strategy of every case is checked against the kernels by
tests/opdefs/test_validate.py (``validate`` runs ``cases/volume_cases.py``).
"""

from absl.testing import absltest, parameterized

from tf_tofu.core.states import PARTIAL, Cut
from tf_tofu.opdefs import analysis, registry, validate
from tf_tofu.opdefs.cases import Case, Rand, volume_cases
from tf_tofu.opdefs.description import DescriptionError


def _semantics(case):
  ctx, _ = validate.build_case(case)
  return registry.semantics_of(ctx)


def _case(op_type, label):
  return next(c for c in volume_cases.CASES if c.op_type == op_type and c.label == label)


class CutVariablesTest(parameterized.TestCase):

  @parameterized.parameters(
      ("Conv3D", ["b", "co", "ci"], [Cut(0), Cut(4), PARTIAL]),
      ("Conv3DBackpropFilterV2", ["ci", "co", "b"], [Cut(3), Cut(4), PARTIAL]),
      ("Conv3DBackpropInputV2", ["b", "ci", "co"], [Cut(0), Cut(4), PARTIAL]),
      ("MaxPool3D", ["b", "c"], [Cut(0), Cut(4)]),
      ("AvgPool3D", ["b", "c"], [Cut(0), Cut(4)]),
      ("MaxPool3DGrad", ["b", "c"], [Cut(0), Cut(4)]),
      ("AvgPool3DGrad", ["b", "c"], [Cut(0), Cut(4)]))
  def test_only_batch_and_channels_are_cut(self, op_type, cut, states):
    for case in (c for c in volume_cases.CASES if c.op_type == op_type):
      strategies = analysis.strategies(_semantics(case), 3)
      self.assertEqual(sorted(s.var for s in strategies), sorted(cut), str(case))
      by_var = {s.var: s.outputs[0] for s in strategies}
      self.assertEqual([by_var[v] for v in cut], states, str(case))

  def test_shape_inputs_are_the_workers_block(self):
    sem = _semantics(_case("Conv3DBackpropInputV2", "VALID"))  # input_sizes (3, 4, 5, 4, 5)
    b = next(s for s in analysis.strategies(sem, 2) if s.var == "b")
    self.assertEqual([sem.shard_spec(w).meta_inputs[0] for w in b.workers],
                     [[2, 4, 5, 4, 5], [1, 4, 5, 4, 5]])
    sem = _semantics(_case("Conv3DBackpropFilterV2", "VALID"))  # filter (2, 3, 2, 5, 7)
    co = next(s for s in analysis.strategies(sem, 3) if s.var == "co")
    self.assertEqual([sem.shard_spec(w).meta_inputs[1] for w in co.workers],
                     [[2, 3, 2, 5, 3], [2, 3, 2, 5, 2], [2, 3, 2, 5, 2]])


class RefusalTest(absltest.TestCase):

  def _refused(self, case, message):
    with self.assertRaisesRegex(DescriptionError, message):
      _semantics(case)

  def test_channels_first_dilations_and_groups_are_refused(self):
    attrs = {"strides": [1, 1, 1, 1, 1], "padding": "VALID"}
    self._refused(Case("Conv3D", [Rand((2, 4, 4, 4, 3)), Rand((2, 2, 2, 3, 5))],
                       dict(attrs, dilations=[1, 2, 1, 1, 1])), "dilations .* not described")
    self._refused(Case("Conv3D", [Rand((2, 4, 4, 4, 4)), Rand((2, 2, 2, 2, 4))], attrs),
                  "grouped convolutions are not described")
    self._refused(Case("MaxPool3D", [Rand((2, 3, 4, 4, 4))],
                       {"ksize": [1, 1, 2, 2, 2], "strides": [1, 1, 2, 2, 2], "padding": "VALID",
                        "data_format": "NCDHW"}), "data_format 'NCDHW' is not described")


if __name__ == "__main__":
  absltest.main()
