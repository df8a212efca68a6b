"""What every zoo model shares: the training-step record, optimizers, the loss.

A zoo builder returns a :class:`TrainStep`: a ``tf.function`` that runs one
training step (forward, ``tf.GradientTape`` backward, optimizer update) and
returns the loss, plus the input signature it must be traced with.

Two flavours of each model:

* ``"tf"``: plain ``tf.Variable`` weights and ``tf`` ops, with the optimizers
  of this module (SGD as ``v.assign_sub(lr * g)``, Adam as the fused
  ``ResourceApplyAdam`` kernel, as ``tf.compat.v1.train.AdamOptimizer`` emits);
* ``"keras"``: Keras 3 layers with ``keras.optimizers.SGD`` / ``Adam``
  (decomposed into ``AssignSubVariableOp``/``AssignAddVariableOp``).

``materialize=False`` builds everything inside a fresh ``tf.Graph`` that is
never run: variables exist (handles, shapes, dtypes) but stay uninitialised,
so a model of any size costs no weight memory.  Trace such a step inside
``step.context()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf
from tf_tofu.core.errors import TofuError

FLAVORS = ("tf", "keras")
OPTIMIZERS = ("sgd", "adam")
DTYPES = ("float32", "float64")


@dataclasses.dataclass
class TrainStep:
  """One model's training step, ready to trace.

  Attributes:
    name: model name with its sizes, e.g. ``"mlp(depth=2,width=8,batch=4)/tf/sgd"``.
    fn: the ``tf.function``; ``fn(*inputs)`` runs one step and returns the loss.
    input_signature: one ``tf.TensorSpec`` per input, every dim known.
    variables: the model's trainable variables (``tf.Variable``), in build order.
    optimizer_variables: the optimizer's own variables (slots, step counters).
    graph: the ``tf.Graph`` holding the variables when built with
      ``materialize=False`` (uninitialised, never run); None when eager.
    config: the size parameters the model was built with.
    input_ranges: per input, ``(low, high)`` for random example inputs
      (integer inputs draw ids in ``[low, high)``).
  """

  name: str
  fn: Any
  input_signature: tuple
  variables: tuple
  optimizer_variables: tuple
  graph: Optional[tf.Graph]
  config: dict
  input_ranges: tuple

  @contextlib.contextmanager
  def context(self) -> Iterator[None]:
    """The context to trace (or run) the step in: the model's graph, if any."""
    if self.graph is None:
      yield
    else:
      with self.graph.as_default():
        yield

  def example_inputs(self, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Random inputs matching the signature (ids in range for integer inputs)."""
    rng = np.random.default_rng(seed)
    out = []
    for spec, (lo, hi) in zip(self.input_signature, self.input_ranges):
      shape = tuple(spec.shape.as_list())
      if spec.dtype.is_integer:
        out.append(rng.integers(lo, hi, size=shape).astype(spec.dtype.as_numpy_dtype))
      else:
        out.append(rng.uniform(lo, hi, size=shape).astype(spec.dtype.as_numpy_dtype))
    return tuple(out)

  def weight_bytes(self) -> int:
    """Bytes the model's trainable weights would take if materialised."""
    return sum(int(np.prod(v.shape)) * v.dtype.size for v in self.variables)


def check_choice(what: str, value: str, allowed: Sequence[str]) -> None:
  """Raises ValueError naming ``what`` unless ``value`` is one of ``allowed``."""
  if value not in allowed:
    raise TofuError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")


@contextlib.contextmanager
def build_scope(materialize: bool) -> Iterator[Optional[tf.Graph]]:
  """Eager when ``materialize``, else a fresh graph whose variables stay uninitialised;
  Keras layers built in it start from :func:`seeded_keras_weights`."""
  if materialize:
    if not tf.executing_eagerly():
      raise RuntimeError("materialize=True needs eager execution (you are inside a graph)")
    with seeded_keras_weights():
      yield None
  else:
    graph = tf.Graph()
    with graph.as_default(), seeded_keras_weights():
      yield graph


@contextlib.contextmanager
def seeded_keras_weights(seed: int = 0) -> Iterator[None]:
  """Keras layers built in the block start from the same weights in every process.

  Keras 3 draws the seed of an initializer made without one (every layer's default)
  from Python's global ``random``, so a model's initial weights differed from process
  to process; the plain-TF models are seeded by variable name (:func:`glorot`).  The
  block seeds ``random`` with ``seed`` and gives the caller's state back on exit.
  """
  import random
  state = random.getstate()
  random.seed(seed)
  try:
    yield
  finally:
    random.setstate(state)


def glorot(shape: Sequence[int], fan_in: int, fan_out: int, name: str,
           dtype: str = "float32") -> tf.Variable:
  """A trainable variable with Glorot-uniform values (seeded by its name).

  The values are drawn in float32 and cast, so a float64 model starts from
  exactly the float32 model's weights.
  """
  limit = float(np.sqrt(6.0 / (fan_in + fan_out)))
  seed = [sum(ord(c) * (i + 1) for i, c in enumerate(name)) % (2**31 - 1), len(shape)]
  init = tf.random.stateless_uniform(list(shape), seed=seed, minval=-limit, maxval=limit)
  return tf.Variable(tf.cast(init, dtype), name=name, trainable=True)


def zeros(shape: Sequence[int], name: str, trainable: bool = True,
          dtype: str = "float32") -> tf.Variable:
  return tf.Variable(tf.zeros(list(shape), dtype), name=name, trainable=trainable)


def ones(shape: Sequence[int], name: str, trainable: bool = True,
         dtype: str = "float32") -> tf.Variable:
  return tf.Variable(tf.ones(list(shape), dtype), name=name, trainable=trainable)


def sparse_xent(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
  """Mean sparse softmax cross entropy over every leading position."""
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                       logits=logits))


class PlainSGD:
  """``v <- v - lr * g`` (``AssignSubVariableOp``; sparse gradients by ``ResourceScatterSub``)."""

  def __init__(self, learning_rate: float = 0.01):
    self.learning_rate = learning_rate
    self.variables: tuple = ()

  def build(self, variables: Sequence[tf.Variable]) -> None:
    del variables

  def apply(self, grads: Sequence[Any], variables: Sequence[tf.Variable]) -> None:
    with tf.name_scope("sgd"):
      for g, v in zip(grads, variables):
        if isinstance(g, tf.IndexedSlices):
          v.scatter_sub(tf.IndexedSlices(self.learning_rate * g.values, g.indices,
                                         g.dense_shape))
        else:
          v.assign_sub(self.learning_rate * g)


class PlainAdam:
  """Adam through the fused ``ResourceApplyAdam`` kernel (sparse gradients densified).

  Slots ``m``, ``v`` per variable; ``beta1^t`` and ``beta2^t`` as variables
  updated after the step, as ``tf.compat.v1.train.AdamOptimizer`` does.
  """

  def __init__(self, learning_rate: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
               epsilon: float = 1e-7):
    self.learning_rate, self.beta1, self.beta2, self.epsilon = (learning_rate, beta1, beta2,
                                                                epsilon)
    self.slots: dict = {}
    self.variables: tuple = ()

  def build(self, variables: Sequence[tf.Variable]) -> None:
    dtype = variables[0].dtype if variables else tf.float32
    with tf.name_scope("adam"):
      self.beta1_power = tf.Variable(tf.constant(self.beta1, dtype), name="beta1_power",
                                     trainable=False)
      self.beta2_power = tf.Variable(tf.constant(self.beta2, dtype), name="beta2_power",
                                     trainable=False)
      for v in variables:
        base = v.name.split(":")[0].replace("/", "_")
        self.slots[id(v)] = (tf.Variable(tf.zeros(v.shape, v.dtype), name=f"{base}_m",
                                         trainable=False),
                             tf.Variable(tf.zeros(v.shape, v.dtype), name=f"{base}_v",
                                         trainable=False))
    self.variables = (self.beta1_power, self.beta2_power) + tuple(
        s for pair in self.slots.values() for s in pair)

  def apply(self, grads: Sequence[Any], variables: Sequence[tf.Variable]) -> None:
    with tf.name_scope("adam"):
      updates = []
      for g, v in zip(grads, variables):
        if isinstance(g, tf.IndexedSlices):
          g = tf.convert_to_tensor(g)
        m, s = self.slots[id(v)]
        dt = v.dtype
        updates.append(tf.raw_ops.ResourceApplyAdam(
            var=v.handle, m=m.handle, v=s.handle, beta1_power=self.beta1_power,
            beta2_power=self.beta2_power, lr=tf.constant(self.learning_rate, dt),
            beta1=tf.constant(self.beta1, dt), beta2=tf.constant(self.beta2, dt),
            epsilon=tf.constant(self.epsilon, dt), grad=g))
      with tf.control_dependencies(updates):
        self.beta1_power.assign(self.beta1_power * self.beta1)
        self.beta2_power.assign(self.beta2_power * self.beta2)


def plain_optimizer(name: str):
  check_choice("optimizer", name, OPTIMIZERS)
  return PlainSGD() if name == "sgd" else PlainAdam()


def keras_optimizer(name: str):
  import keras
  check_choice("optimizer", name, OPTIMIZERS)
  return keras.optimizers.SGD(0.01) if name == "sgd" else keras.optimizers.Adam(1e-3)


def tf_variables(variables: Sequence[Any]) -> tuple:
  """The ``tf.Variable`` behind each (Keras or TF) variable."""
  out = []
  for v in variables:
    inner = getattr(v, "value", None)
    out.append(inner if isinstance(inner, tf.Variable) else v)
  return tuple(out)


def make_step(name: str, config: dict, signature: Sequence[tf.TensorSpec],
              input_ranges: Sequence[tuple], loss_fn: Callable[..., tf.Tensor],
              variables: Sequence[Any], optimizer: str, flavor: str,
              graph: Optional[tf.Graph], dtype: str = "float32") -> TrainStep:
  """Wraps ``loss_fn(*inputs)`` into a training step with the chosen optimizer.

  A float64 step is named with a ``/float64`` suffix.
  """
  variables = list(variables)
  if flavor == "keras":
    opt = keras_optimizer(optimizer)
    opt.build(variables)
    opt_vars = tf_variables(opt.variables)

    def apply(grads):
      opt.apply_gradients(zip(grads, variables))
  else:
    opt = plain_optimizer(optimizer)
    opt.build(variables)
    opt_vars = tuple(opt.variables)

    def apply(grads):
      opt.apply(grads, variables)

  def step(*inputs):
    with tf.GradientTape() as tape:
      loss = loss_fn(*inputs)
    grads = tape.gradient(loss, variables)
    apply(grads)
    return loss

  fn = tf.function(step, input_signature=list(signature), autograph=False)
  suffix = "" if dtype == "float32" else f"/{dtype}"
  return TrainStep(name=f"{name}/{flavor}/{optimizer}{suffix}", fn=fn, input_signature=tuple(signature),
                   variables=tf_variables(variables), optimizer_variables=opt_vars, graph=graph,
                   config=dict(config), input_ranges=tuple(input_ranges))


def check_dtype(dtype: str) -> str:
  """The float dtype name of a zoo model (``"float32"`` or ``"float64"``)."""
  check_choice("dtype", dtype, DTYPES)
  return dtype


def describe_config(model: str, config: dict) -> str:
  inner = ",".join(f"{k}={v}" for k, v in config.items())
  return f"{model}({inner})"
