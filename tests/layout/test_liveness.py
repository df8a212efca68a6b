"""Tests for tf_tofu.layout.liveness: peaks of hand-made schedules with known answers."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest

from tf_tofu.layout import liveness
from tf_tofu.layout.liveness import Step

A, B = "/device:CPU:0", "/device:CPU:1"


class PeakTest(absltest.TestCase):

  def test_chain_frees_each_buffer_after_its_last_reader(self):
    # x(100) -> y(10) -> z(1): live sets {x}, {x, y}, {y, z} -> peak 110.
    schedule = [Step("x", A, "Placeholder", (), (100,)),
                Step("y", A, "Relu", ("x:0",), (10,)),
                Step("z", A, "Relu", ("y:0",), (1,))]
    est = liveness.peak_memory(schedule, {A: 7})
    self.assertEqual(est.peak, {A: 7 + 110})
    self.assertEqual(est.persistent, {A: 7})

  def test_a_tensor_read_late_stays_live(self):
    # x is read by the last op, so it overlaps everything: 100 + 50 + 50 + 1.
    schedule = [Step("x", A, "Placeholder", (), (100,)),
                Step("y", A, "Relu", ("x:0",), (50,)),
                Step("z", A, "Relu", ("y:0",), (50,)),
                Step("w", A, "AddV2", ("z:0", "x:0"), (1,))]
    self.assertEqual(liveness.peak_memory(schedule, {}).peak[A], 100 + 50 + 50)

  def test_received_buffer_counts_on_the_receiver(self):
    # x (40) on A is read on B: B holds a copy from x's step to its reader's.
    schedule = [Step("x", A, "Placeholder", (), (40,)),
                Step("big", B, "Placeholder", (), (5,)),
                Step("y", B, "AddV2", ("x:0", "big:0"), (3,))]
    est = liveness.peak_memory(schedule, {})
    self.assertEqual(est.peak[A], 40)
    self.assertEqual(est.peak[B], 40 + 5 + 3)

  def test_aliases_allocate_nothing_and_keep_their_input_alive(self):
    schedule = [Step("x", A, "Placeholder", (), (64,)),
                Step("r", A, "Reshape", ("x:0", "s:0"), (64,)),
                Step("y", A, "Relu", ("r:0",), (64,))]
    self.assertEqual(liveness.peak_memory(schedule, {}).peak[A], 128)

  def test_variable_reads_and_constants_are_persistent(self):
    schedule = [Step("c", A, "Const", (), (8,)),
                Step("v", A, "ReadVariableOp", ("h:0",), (32,)),
                Step("y", A, "MatMul", ("v:0", "c:0"), (4,))]
    self.assertEqual(liveness.peak_memory(schedule, {A: 32 + 8}).peak[A], 32 + 8 + 4)

  def test_devices_are_kept_apart_and_a_buffer_lives_through_its_last_reader(self):
    # On A, x (100) dies at y's step: y's buffer (60) is born at that step, so A's peak is
    # 160 there (x is freed only after its last reader), then z (30) with y -> 90.  B only
    # makes a zero-byte output; C holds persistent bytes only.
    schedule = [Step("x", A, "Placeholder", (), (100,)),
                Step("e", B, "NoOp", (), (0,)),
                Step("y", A, "Relu", ("x:0",), (60,)),
                Step("z", A, "Relu", ("y:0",), (30,)),
                Step("w", A, "Relu", ("z:0",), (1,))]
    est = liveness.peak_memory(schedule, {"C": 12})
    self.assertEqual(est.peak, {A: 160, B: 0, "C": 12})
    self.assertEqual(est.persistent, {A: 0, B: 0, "C": 12})

  def test_ratio_to_the_ideal(self):
    est = liveness.MemoryEstimate(peak={A: 60, B: 40}, persistent={A: 0, B: 0})
    self.assertAlmostEqual(est.ratio_to(100), 1.2)
    s = est.summary(100)
    self.assertEqual((s["worst"], s["ideal"], s["single_device"]), (60, 50, 100))

  def test_peak_running_sums_equal_a_count_at_every_step(self):
    # Random buffers (some of zero bytes, one device without any), listed in step order
    # as a schedule makes them and shuffled: each device's peak is the largest live total
    # over the steps, counted directly.
    rng = np.random.default_rng(0)
    n_devices, steps, n = 5, 60, 400
    device = rng.integers(0, n_devices - 1, n)
    born = np.sort(rng.integers(0, steps, n))
    last = born + rng.integers(0, 20, n)
    size = rng.integers(0, 1000, n) * (rng.random(n) < 0.9)
    expected = [max((int(size[(device == d) & (born <= s) & (last >= s)].sum())
                     for s in range(steps + 20)), default=0) for d in range(n_devices)]
    self.assertEqual(expected[-1], 0)
    for order in (np.arange(n), rng.permutation(n)):
      columns = [c[order] for c in (device, size, born, last)]
      self.assertEqual(liveness._peak_running_sums(n_devices, *(c.tolist() for c in columns)),
                       expected)

  def test_tofu_graph_peak_counts_variables_once(self):
    from tf_tofu import graph as graph_lib
    v = tf.Variable(np.ones((8, 8), np.float32))

    @tf.function
    def step(x):
      y = tf.matmul(x, v)
      v.assign_sub(0.1 * tf.matmul(x, y, transpose_a=True))
      return tf.reduce_sum(y)

    g = graph_lib.trace(step, tf.TensorSpec((4, 8), tf.float32))
    peak = liveness.tofu_graph_peak(g)
    self.assertGreaterEqual(peak, 256 + 128)  # the weight and the input at least
    self.assertLess(peak, 256 + 8 * 256)


class LivenessTest(absltest.TestCase):
  """The rules applied node by node, on int tensors and devices (what the plan model uses)."""

  def test_ids_buffers_and_received_copies(self):
    live = liveness.Liveness()
    x = live.add(0, "Placeholder", (), (100,))
    pair = live.add(0, "Unpack", (x,), (30, 20))        # outputs pair and pair + 1
    done = live.add(0, "NoOp", (pair,), ())            # no outputs: no id, no buffer
    self.assertEqual((x, pair, done), (0, 1, -1))
    live.add(1, "AddV2", (pair + 1, None), (4,))       # a received copy of 20; None: uncounted
    est = live.estimate(["a", "b"], {"b": 1})
    # a: x (100) lives through the Unpack's step with its outputs (50); b: 20 + 4 + 1.
    self.assertEqual(est.peak, {"a": 150, "b": 25})

  def test_an_alias_of_a_received_tensor_is_the_received_buffer(self):
    live = liveness.Liveness()
    x = live.add(0, "Placeholder", (), (64,))
    r = live.add(1, "Reshape", (x, None), (64,))
    live.add(1, "Relu", (r,), (8,))
    self.assertEqual(live.estimate(["a", "b"], {}).peak, {"a": 64, "b": 64 + 8})

  def test_steps_and_the_node_by_node_count_agree(self):
    schedule = [Step("x", A, "Placeholder", (), (100,)), Step("c", B, "Const", (), (8,)),
                Step("y", B, "Mul", ("x:0", "c:0"), (100,)),
                Step("i", B, "Identity", ("y:0",), (100,)),
                Step("z", A, "AddV2", ("i:0", "x:0"), (100,))]
    live = liveness.Liveness()
    ids = {}
    for s in schedule:
      ids[s.name] = live.add({A: 0, B: 1}[s.device], s.op_type,
                             [ids[t.split(":")[0]] for t in s.inputs], s.output_bytes)
    self.assertEqual(live.estimate([A, B], {B: 8}), liveness.peak_memory(schedule, {B: 8}))
    self.assertEqual(liveness.peak_memory(schedule, {B: 8}).peak, {A: 300, B: 8 + 200})


if __name__ == "__main__":
  absltest.main()
