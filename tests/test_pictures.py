"""Tests for tf_tofu.pictures: the plan's DOT drawing and the TensorBoard graph summary."""

import os
import re
import shutil
import tempfile

import tensorflow as tf
from absl.testing import absltest

import tf_tofu
from tf_tofu import graph as graph_lib, models, pictures
from tf_tofu.opdefs.registry import Describer
from tf_tofu.plans import _human
from tf_tofu.search import problem


def planned(key):
  step = models.tiny(key)
  g = graph_lib.trace(step.fn, *step.input_signature)
  describer = Describer()
  return problem.from_tofu_graph(g, describer), tf_tofu.plan(g, devices=4, describer=describer)


class DotTest(absltest.TestCase):

  def test_structure(self):
    for key in ("mlp", "gpt"):
      sgraph, plan = planned(key)
      text = pictures.plan_dot(sgraph, plan)
      self.assertEqual(text.count("{"), text.count("}"))
      declared = re.findall(r'^  "((?:[^"\\]|\\.)*)" \[shape', text, re.M)
      self.assertEqual(len(declared), len(set(declared)))
      for lead in plan.op_groups:
        self.assertIn("g:" + lead, declared)
      for name in sgraph.variables.values():
        self.assertIn("v:" + name, declared)
      edges = re.findall(r'^  "((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)" \[label="([^"]*)"',
                         text, re.M)
      self.assertTrue(edges)
      for src, dst, _ in edges:
        self.assertIn(src, declared)
        self.assertIn(dst, declared)
      self.assertTrue(any("color=red" in line for line in text.splitlines()), key)
      self.assertIn(_human(plan.total_bytes) + " per step", text)
      self.assertEqual(text, pictures.plan_dot(sgraph, plan))

  def test_write_dot(self):
    sgraph, plan = planned("mlp")
    d = tempfile.mkdtemp()
    written = pictures.write_dot(os.path.join(d, "plan.dot"), sgraph, plan)
    self.assertEqual(written[0], os.path.join(d, "plan.dot"))
    self.assertLen(written, 1 if shutil.which("dot") is None else 3)
    for w in written:
      self.assertGreater(os.path.getsize(w), 0)
    self.assertEqual(sorted(os.listdir(d)), sorted(os.path.basename(w) for w in written))


class TensorBoardTest(absltest.TestCase):

  def test_graph_summary_round_trip(self):
    gd = tf.compat.v1.GraphDef()
    for i in range(3):
      n = gd.node.add(name=f"n{i}", op="NoOp", device=f"/device:CPU:{i}")
    d = pictures.write_tensorboard(tempfile.mkdtemp(), gd)
    (event_file,) = os.listdir(d)
    graphs = []
    for record in tf.data.TFRecordDataset(os.path.join(d, event_file)):
      event = tf.compat.v1.Event.FromString(record.numpy())
      if event.graph_def:
        graphs.append(tf.compat.v1.GraphDef.FromString(event.graph_def))
    self.assertLen(graphs, 1)
    self.assertEqual([n.device for n in graphs[0].node], [n.device for n in gd.node])
    del n


if __name__ == "__main__":
  absltest.main()
