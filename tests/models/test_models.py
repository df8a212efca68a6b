"""Tests for tf_tofu.models: every zoo training step runs, trains, and ingests completely."""

import functools
import itertools

import numpy as np
import tensorflow as tf
from absl.testing import absltest, parameterized

import tf_tofu
from tf_tofu import models
from tf_tofu.models import wresnet

CASES = [dict(testcase_name=f"{k}_{f}_{o}", key=k, flavor=f, optimizer=o)
         for k, f, o in itertools.product(sorted(models.TINY), models.FLAVORS, models.OPTIMIZERS)]


@functools.lru_cache(maxsize=None)
def _ingested(key, flavor, optimizer):
  step = models.tiny(key, flavor=flavor, optimizer=optimizer)
  return step, tf_tofu.trace(step.fn, *step.input_signature)


class ZooIngestTest(parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_tiny_step_ingests_completely(self, key, flavor, optimizer):
    step, g = _ingested(key, flavor, optimizer)
    for t in g.tensors.values():
      self.assertTrue(all(isinstance(d, int) and d >= 0 for d in t.shape), t.name)
      self.assertTrue(t.dtype, t.name)
    self.assertEqual(g.unattached, ())
    trainable = [v for v in g.variables if v.trainable]
    self.assertLen(trainable, len(step.variables))
    self.assertCountEqual([v.shape for v in trainable],
                          [tuple(v.shape.as_list()) for v in step.variables])
    for v in trainable:
      self.assertIsNotNone(v.gradient, v.name)
      self.assertTrue(v.updates, v.name)
      self.assertTrue(v.reads, v.name)
      grad = g.tensors[v.gradient]
      self.assertEqual(grad.dtype, v.dtype)
      if v.gradient_indices is None:
        self.assertEqual(grad.shape, v.shape, v.name)
      else:
        self.assertEqual(grad.shape[1:], v.shape[1:], v.name)
      self.assertEqual(g.ops[grad.producer].role, "backward", v.name)
      for u in v.updates:
        self.assertEqual(g.ops[u].role, "update")
    self.assertTrue(all(g.ops[f].role == "forward" for f in g.forward_op_of.values()))
    self.assertTrue(all(g.ops[b].role == "backward" for b in g.forward_op_of))
    self.assertEqual(len(g.forward_op_of), len(g.ops_with_role("backward")))

  @parameterized.named_parameters(*CASES[::3])
  def test_tiny_step_trains(self, key, flavor, optimizer):
    step = models.tiny(key, flavor=flavor, optimizer=optimizer)
    before = [v.numpy() for v in step.variables]
    loss = float(step.fn(*step.example_inputs(seed=3)))
    self.assertTrue(np.isfinite(loss))
    changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, step.variables)]
    self.assertTrue(all(changed), step.name)


class ZooBuildTest(parameterized.TestCase):

  @parameterized.parameters((50, (3, 4, 6, 3)), (101, (3, 4, 23, 3)), (152, (3, 8, 36, 3)))
  def test_wresnet_depths(self, depth, blocks):
    self.assertEqual(wresnet.block_counts(depth), blocks)
    # Bottleneck ResNet depth = 3 convs per block + stem conv + head.
    self.assertEqual(3 * sum(blocks) + 2, depth)

  def test_wresnet_filters_scale_with_width(self):
    step = models.build("wresnet", depth=50, blocks=(1, 1, 1, 1), width=3, base=(4, 8, 16, 16, 32),
                        image=32, classes=5, batch=2)
    kernels = {v.name.split(":")[0]: tuple(v.shape.as_list()) for v in step.variables
               if "kernel" in v.name}
    self.assertEqual(kernels["stem/kernel"], (7, 7, 3, 12))
    self.assertEqual(kernels["stage4/block1/c/kernel"], (1, 1, 24, 96))

  def test_unmaterialized_build_allocates_no_weights(self):
    step = models.paper("wresnet152")
    self.assertIsNotNone(step.graph)
    self.assertGreater(step.weight_bytes(), 10 * 2**30)  # tens of GiB if it were real
    with step.context():
      self.assertFalse(tf.executing_eagerly())
      self.assertEqual(step.variables[0].handle.graph, step.graph)
    kernel = [v for v in step.variables if v.name.startswith("stage4/block3/c/kernel")][0]
    self.assertEqual(tuple(kernel.shape.as_list()), (1, 1, 5120, 20480))

  def test_paper_lstm_sizes(self):
    step = models.paper("lstm10")
    kernels = [v for v in step.variables if "lstm_" in v.name and "kernel" in v.name]
    self.assertLen(kernels, 10)
    self.assertEqual(tuple(kernels[0].shape.as_list()), (2 * 8192, 4 * 8192))
    self.assertEqual(step.config["steps"], 20)

  def test_gpt_tied_has_no_output_weight(self):
    tied = models.tiny("gpt")
    untied = models.tiny("gpt_untied")
    self.assertLen(untied.variables, len(tied.variables) + 1)
    self.assertIn("lm_head/kernel", [v.name.split(":")[0] for v in untied.variables])

  def test_lstm_weight_gradient_accumulates_over_steps(self):
    step, g = _ingested("lstm", "tf", "sgd")
    kernel = [v for v in g.variables if v.name == "lstm_0/kernel"][0]
    acc = kernel.accumulation
    self.assertTrue(acc)
    self.assertEqual(g.ops[acc[-1]].op_type, "AddN")
    self.assertLen(g.ops[acc[-1]].inputs, step.config["steps"])

  def test_bad_choices_are_refused(self):
    with self.assertRaisesRegex(ValueError, "unknown flavor 'torch'"):
      models.tiny("mlp", flavor="torch")
    with self.assertRaisesRegex(ValueError, "unknown optimizer 'lamb'"):
      models.tiny("mlp", optimizer="lamb")
    with self.assertRaisesRegex(ValueError, "depth must be one of"):
      models.build("wresnet", depth=34)
    with self.assertRaisesRegex(ValueError, "no zoo model 'vgg'"):
      models.build("vgg")

  def test_example_inputs_match_signature(self):
    step = models.tiny("gpt")
    ids, targets = step.example_inputs()
    self.assertEqual(ids.shape, (2, 4))
    self.assertEqual(ids.dtype, np.int32)
    self.assertTrue((0 <= targets).all() and (targets < 11).all())


if __name__ == "__main__":
  absltest.main()
