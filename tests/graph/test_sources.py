"""Tests for tf_tofu.graph.sources: GraphDef parsing, feed shapes, variables of a bare GraphDef."""

import os
import tempfile

import tensorflow as tf
from absl.testing import absltest
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

from tf_tofu.graph import sources as graph_sources
from tf_tofu.graph.ingest import IngestError


def _read_graph(with_output_shapes=False):
  graph = tf.Graph()
  with graph.as_default():
    h = tf.raw_ops.Placeholder(dtype=tf.resource, shape=[], name="h")
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    r = tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32, name="read")
    tf.matmul(x, r, name="y")
  gd = graph.as_graph_def()
  if with_output_shapes:
    for n in gd.node:
      if n.name == "read":
        n.attr["_output_shapes"].list.shape.add().CopyFrom(tf.TensorShape([3, 4]).as_proto())
  return gd


class ParseTest(absltest.TestCase):

  def test_binary_text_bytes_and_proto(self):
    gd = _read_graph()
    tmp = tempfile.mkdtemp()
    binary, text = os.path.join(tmp, "g.pb"), os.path.join(tmp, "g.pbtxt")
    with open(binary, "wb") as f:
      f.write(gd.SerializeToString())
    with open(text, "w") as f:
      f.write(text_format.MessageToString(gd))
    for source in (gd, gd.SerializeToString(), binary, text):
      self.assertEqual([n.name for n in graph_sources.parse_graph_def(source).node],
                       [n.name for n in gd.node])

  def test_garbage(self):
    with self.assertRaisesRegex(IngestError, "the given bytes is not a GraphDef"):
      graph_sources.parse_graph_def(b"\xff\xfe\x00garbage")
    with self.assertRaisesRegex(IngestError, "expected a GraphDef, bytes or a file path, got int"):
      graph_sources.parse_graph_def(7)

  def test_close_names(self):
    self.assertEqual(graph_sources.close_names("lose", ["loss", "x", "lossy"]), "'loss', 'lossy'")


class FeedTest(absltest.TestCase):

  def test_feed_shapes(self):
    gd = graph_sources.with_feed_shapes(_read_graph(), {"x:0": [5, 3]})
    x = [n for n in gd.node if n.name == "x"][0]
    self.assertEqual(tf.TensorShape(x.attr["shape"].shape).as_list(), [5, 3])
    gd = graph_sources.with_feed_shapes(_read_graph(), {"x:0": tf.TensorSpec([2, 3], tf.float32)})
    x = [n for n in gd.node if n.name == "x"][0]
    self.assertEqual(tf.TensorShape(x.attr["shape"].shape).as_list(), [2, 3])

  def test_bad_feeds(self):
    with self.assertRaisesRegex(IngestError, "feed 'x:0' is float32, the spec says int32"):
      graph_sources.with_feed_shapes(_read_graph(), {"x:0": tf.TensorSpec([2, 3], tf.int32)})
    with self.assertRaisesRegex(IngestError, "feed 'read:0' is a ReadVariableOp, not a Placeholder"):
      graph_sources.with_feed_shapes(_read_graph(), {"read:0": [3, 4]})


class ResourceTest(absltest.TestCase):

  def test_shape_sources(self):
    res = graph_sources.resources_of_graph_def(_read_graph(True), {}, ["x:0"])
    self.assertEqual((res["h"].shape, res["h"].dtype), ((3, 4), "float32"))
    res = graph_sources.resources_of_graph_def(_read_graph(), {"h": ([3, 9], "float32")}, [])
    self.assertEqual(res["h"].shape, (3, 9))
    gd = _read_graph()
    h = [n for n in gd.node if n.name == "h"][0]
    h.attr["_handle_shapes"].list.shape.add().CopyFrom(tf.TensorShape([3, 2]).as_proto())
    h.attr["_handle_dtypes"].list.type.append(tf.float32.as_datatype_enum)
    self.assertEqual(graph_sources.resources_of_graph_def(gd, {}, [])["h"].shape, (3, 2))

  def test_unknown_and_fed_resources(self):
    with self.assertRaisesRegex(IngestError, "resource placeholder 'h' .* has no known shape"):
      graph_sources.resources_of_graph_def(_read_graph(), {}, [])
    with self.assertRaisesRegex(IngestError, "feed 'h' is a resource"):
      graph_sources.resources_of_graph_def(_read_graph(True), {}, ["h:0"])

  def test_default_control_outputs_skip_initializers(self):
    graph = tf.Graph()
    with graph.as_default():
      x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
      v = tf.compat.v1.get_variable("v", [3], use_resource=True)
      v.assign_add(x, name="step")
    gd = graph.as_graph_def()
    self.assertIn("AssignVariableOp", {n.op for n in gd.node})  # the initializer
    self.assertEqual(graph_sources.updates_fed_by(gd, ["x:0"]), ["step"])


class CaptureTest(absltest.TestCase):

  def test_eager_constants_are_frozen(self):
    c = tf.constant([1.0, 2.0])

    @tf.function
    def f(x):
      return x + c

    cf = f.get_concrete_function(tf.TensorSpec([2]))
    captures = list(cf.graph.internal_captures)
    gd = graph_sources.freeze_captured_constants(cf.graph.as_graph_def(), cf, captures)
    node = [n for n in gd.node if n.name == captures[0].op.name][0]
    self.assertEqual(node.op, "Const")
    self.assertEqual(tf.make_ndarray(node.attr["value"].tensor).tolist(), [1.0, 2.0])
    self.assertIsInstance(gd, graph_pb2.GraphDef)


if __name__ == "__main__":
  absltest.main()
