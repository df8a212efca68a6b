"""What the tests of the case modules share: names, stated shapes, and the checks every
case module must pass (each case builds, is described and runs its kernel; the module's
cases are exactly its ops module's op types, each once in ``all_cases``, following the
OpDef)."""

import numpy as np
from absl.testing import absltest
from tensorflow.python.framework import op_def_registry

from tf_tofu.opdefs import kernels, registry, validate
from tf_tofu.opdefs.cases import Fixed, Rand, all_cases


def case_name(i, case, width=2):
  label = "".join(ch if ch.isalnum() else "_" for ch in case.label)
  return f"{i:0{width}d}_{case.op_type}" + (f"_{label}" if label else "")


def stated_shape(spec) -> tuple:
  return tuple(spec.shape) if isinstance(spec, Rand) else np.shape(spec.value)


def family_op_types(module) -> set:
  """The op types whose description lives in ``module``."""
  return {t for t in registry.described_op_types()
          if registry.lookup(t).__module__ == module.__name__}


def build_describe_run(test: absltest.TestCase, case):
  """Builds ``case``, checks its inputs, description and meta inputs, runs its kernel;
  returns ``(ctx, values, outputs)``."""
  ctx, values = validate.build_case(case)
  flat = case.flat_inputs()
  test.assertEqual(ctx.op_type, case.op_type)
  test.assertEqual([v.shape for v in values], [stated_shape(s) for s in flat])
  test.assertIn(case.op_type, registry.described_op_types())
  sem = registry.lookup(case.op_type)(ctx)
  test.assertEqual([type(flat[i]) for i in sorted(sem.meta_inputs)],
                   [Fixed] * len(sem.meta_inputs), "meta inputs must be Fixed")
  outs = kernels.run_op(ctx.op_type, ctx.attrs, values)
  test.assertEqual([o.dtype.name for o in outs], [t.dtype for t in ctx.outputs])
  return ctx, values, outs


class ModuleChecks:
  """Mixin for an absltest.TestCase: ``CASES``, ``OPS_MODULE`` and ``OP_TYPE_COUNT``."""

  CASES = ()
  OPS_MODULE = None
  OP_TYPE_COUNT = 0

  def test_cases_cover_exactly_the_ops_modules_descriptions(self):
    cased = {c.op_type for c in self.CASES}
    self.assertEqual(cased, family_op_types(self.OPS_MODULE))
    self.assertLen(cased, self.OP_TYPE_COUNT)

  def test_validate_runs_every_case_once(self):
    ids = [id(c) for c in all_cases()]
    self.assertEqual([ids.count(id(c)) for c in self.CASES], [1] * len(self.CASES))

  def test_inputs_and_attrs_follow_the_op_def(self):
    for case in self.CASES:
      op_def = op_def_registry.get(case.op_type)
      args = op_def.input_arg
      self.assertLen(case.inputs, len(args), str(case))
      for x, arg in zip(case.inputs, args):
        self.assertEqual(isinstance(x, (list, tuple)), bool(arg.number_attr or
                                                            arg.type_list_attr),
                         f"{case}: argument {arg.name}")
      settable = {a.name for a in op_def.attr} - kernels._inferred_attrs(op_def)
      self.assertEqual(sorted(set(case.attrs) - settable), [], str(case))
