"""Random training steps for fuzzing the whole pipeline: a spec, its step, its check.

A :class:`StepSpec` is a small, JSON-serialisable description of a float64
training step: an input kind (``dense`` ``(B, F)``, ``image`` ``(B, H, W, C)``,
``tokens`` ``(B, S)`` ids), a chain of blocks drawn from the described ops
(matmul, batched matmul / einsum, conv, depthwise conv, pooling, element-wise
ops with broadcasting, reductions, reshape / transpose / concat / slice /
gather, softmax, layer norm, batch norm, residual adds), a loss (sparse or
dense softmax cross entropy, squared error), an optimizer (SGD, momentum,
Adam), and the partition request (k, planner, comm form and, for ``tofu``,
whether ``never_worse`` runs the rivals and the exact improvement pass, and
whether ``needs_once`` prices each level on its exact bytes).
Dims are drawn small and often do not divide k or are smaller than k.

:func:`build_step` turns a spec into a ``tf.function`` with its variables and
inputs; :func:`check` runs trace -> plan -> rewrite -> two partitioned steps
on logical devices and lists every failed property:

* losses and every variable equal the unpartitioned run (float64, the fixed
  bound of :mod:`tf_tofu.verify.equivalence`);
* the bytes counted in the rewritten GraphDef equal the plan's prediction;
* every node sits on a device of the plan;
* with ``needs_once`` (and not ``never_worse``), a plan of one level that
  priced its shared needs once has objective == predicted bytes: the level's
  objective is then its exact bytes (``search.onecut``, "Shared needs").

:func:`step_specs` is the hypothesis strategy; :func:`shrink` makes a
failing spec smaller while it keeps failing the same way.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable, Optional

import numpy as np

OPTIMIZERS = ("sgd", "momentum", "adam")
LOSSES = ("sparse_xent", "xent", "mse")
DENSE_BLOCKS = ("matmul", "bias_relu", "tanh", "sigmoid", "scale", "center", "layer_norm",
                "concat_self", "slice", "batch_matmul", "transpose_twice", "residual", "softmax")
IMAGE_BLOCKS = ("conv", "depthwise", "max_pool", "avg_pool", "batch_norm", "relu",
                "image_residual")
TOKEN_BLOCKS = ("attention", "layer_norm3", "ffn3")
INPUTS = ("dense", "image", "tokens")


@dataclasses.dataclass(frozen=True)
class Block:
  """One layer of a random step: an op family and its small integer parameters."""

  kind: str
  size: int = 0       # output width / channels / slice length
  kernel: int = 1     # conv / pool window
  stride: int = 1
  padding: str = "SAME"


@dataclasses.dataclass(frozen=True)
class StepSpec:
  """A random training step and the partition asked of it (see the module docstring)."""

  input: str
  batch: int
  dims: tuple[int, ...]          # dense: (F,); image: (H, W, C); tokens: (S, D, vocab)
  blocks: tuple[Block, ...]
  classes: int
  loss: str
  optimizer: str
  k: int
  planner: str
  comm: str
  seed: int = 0
  never_worse: bool = False      # tofu only: rivals and the exact improvement pass
  needs_once: bool = False       # tofu only: shared needs priced once per level

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "StepSpec":
    d = json.loads(text)
    d["dims"] = tuple(d["dims"])
    d["blocks"] = tuple(Block(**b) for b in d["blocks"])
    return cls(**d)


# ---------------------------------------------------------------------------- building


class _Builder:
  """Variables and the forward function of a spec (float64, seeded)."""

  def __init__(self, spec: StepSpec):
    import tensorflow as tf
    self.tf = tf
    self.spec = spec
    self.rng = np.random.default_rng(spec.seed)
    self.variables: list = []

  def var(self, shape, scale: Optional[float] = None, value: Optional[float] = None):
    tf = self.tf
    if value is not None:
      init = np.full(shape, value, np.float64)
    else:
      fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else int(shape[0])
      s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
      init = self.rng.uniform(-s, s, size=shape)
    v = tf.Variable(init, dtype=tf.float64, name=f"v{len(self.variables)}")
    self.variables.append(v)
    return v

  def weights(self, owner) -> Callable:
    """``w(name, shape, scale=None, value=None)`` for one block: a variable made on the
    first trace (shapes are known only then) and the same variable on every later one."""
    made: dict = {}

    def w(name, shape, scale=None, value=None):
      if name not in made:
        made[name] = self.var(shape, scale, value)
      return made[name]
    return w

  def layers(self) -> list[Callable]:
    """Each block as a function of its input tensor (traced twice: weights made once)."""
    return [getattr(self, f"_{b.kind}")(b, self.weights(i))
            for i, b in enumerate(self.spec.blocks)]

  def _width(self, h):
    return int(h.shape[-1])

  # dense (B, F)
  def _matmul(self, b, w):
    return lambda h: self.tf.matmul(h, w("w", [self._width(h), b.size]))

  def _bias_relu(self, b, w):
    return lambda h: self.tf.nn.relu(self.tf.nn.bias_add(h, w("b", [self._width(h)], scale=0.5)))

  def _tanh(self, b, w):
    return self.tf.tanh

  def _sigmoid(self, b, w):
    return self.tf.sigmoid

  def _relu(self, b, w):
    return self.tf.nn.relu

  def _scale(self, b, w):  # broadcasting multiply by a per-feature weight
    return lambda h: h * w("s", [self._width(h)], scale=1.0)

  def _center(self, b, w):
    return lambda h: h - self.tf.reduce_mean(h, axis=-1, keepdims=True)

  def _norm(self, h, axes, w):
    tf = self.tf
    gamma = w("g", [self._width(h)], value=1.0)
    beta = w("b", [self._width(h)], value=0.0)
    mean, var = tf.nn.moments(h, axes=axes, keepdims=True)
    return (h - mean) * tf.math.rsqrt(var + 1e-3) * gamma + beta

  def _layer_norm(self, b, w):
    return lambda h: self._norm(h, [-1], w)

  def _layer_norm3(self, b, w):
    return self._layer_norm(b, w)

  def _batch_norm(self, b, w):
    return lambda h: self._norm(h, [0, 1, 2], w)

  def _concat_self(self, b, w):
    return lambda h: self.tf.concat([h, self.tf.sin(h)], axis=-1)

  def _slice(self, b, w):
    def f(h):
      width = self._width(h)
      n = max(1, min(b.size, width))
      start = (width - n) // 2
      return h[:, start:start + n]
    return f

  def _batch_matmul(self, b, w):
    def f(h):  # (B, F) -> (B, F//g, g) x (g, size) -> (B, F//g * size)
      tf = self.tf
      width = self._width(h)
      g = 2 if width % 2 == 0 else 1
      y = tf.einsum("bfg,gs->bfs", tf.reshape(h, [-1, width // g, g]), w("w", [g, b.size]))
      return tf.reshape(y, [-1, (width // g) * b.size])
    return f

  def _transpose_twice(self, b, w):
    return lambda h: self.tf.transpose(self.tf.transpose(h) * 0.5 + 0.25)

  def _softmax(self, b, w):
    return lambda h: self.tf.nn.softmax(h, axis=-1)

  def _residual(self, b, w):
    width = self._width
    return lambda h: h + self.tf.tanh(self.tf.matmul(h, w("w", [width(h), width(h)])))

  # image (B, H, W, C)
  def _conv(self, b, w):
    return lambda h: self.tf.nn.conv2d(h, w("w", [b.kernel, b.kernel, self._width(h), b.size]),
                                       strides=b.stride, padding=b.padding)

  def _depthwise(self, b, w):
    return lambda h: self.tf.nn.depthwise_conv2d(
        h, w("w", [b.kernel, b.kernel, self._width(h), 1]), strides=[1, b.stride, b.stride, 1],
        padding=b.padding)

  def _max_pool(self, b, w):
    return lambda h: self.tf.nn.max_pool2d(h, b.kernel, b.stride, b.padding)

  def _avg_pool(self, b, w):
    return lambda h: self.tf.nn.avg_pool2d(h, b.kernel, b.stride, b.padding)

  def _image_residual(self, b, w):
    width = self._width
    return lambda h: h + self.tf.nn.relu(self.tf.nn.conv2d(
        h, w("w", [1, 1, width(h), width(h)]), 1, "SAME"))

  # tokens (B, S, D)
  def _attention(self, b, w):
    def f(h):
      tf = self.tf
      d = self._width(h)
      q, k, v = (tf.einsum("bsd,de->bse", h, w(n, [d, d])) for n in "qkv")
      att = tf.nn.softmax(tf.einsum("bsd,btd->bst", q, k) / np.sqrt(d), axis=-1)
      return h + tf.einsum("bst,btd->bsd", att, v)
    return f

  def _ffn3(self, b, w):
    def f(h):
      tf = self.tf
      d = self._width(h)
      inner = tf.nn.gelu(tf.einsum("bsd,df->bsf", h, w("w1", [d, b.size])))
      return h + tf.einsum("bsf,fd->bsd", inner, w("w2", [b.size, d]))
    return f


def build_step(spec: StepSpec):
  """``(step, inputs, variables)``: a float64 ``tf.function`` training step returning the
  loss, two batches of inputs, and every variable it trains."""
  import tensorflow as tf
  from tf_tofu.models import common
  b = _Builder(spec)
  rng = np.random.default_rng(spec.seed + 1)
  bsz = spec.batch
  if spec.input == "dense":
    x_spec = tf.TensorSpec([bsz, spec.dims[0]], tf.float64)
  elif spec.input == "image":
    x_spec = tf.TensorSpec([bsz, *spec.dims], tf.float64)
  else:
    x_spec = tf.TensorSpec([bsz, spec.dims[0]], tf.int32)
  y_spec = (tf.TensorSpec([bsz], tf.int32) if spec.loss == "sparse_xent"
            else tf.TensorSpec([bsz, spec.classes], tf.float64))
  layers = b.layers()
  emb = b.var([spec.dims[2], spec.dims[1]], scale=1.0) if spec.input == "tokens" else None
  head = b.weights("head")

  def forward(x):
    h = tf.gather(emb, x) if emb is not None else x
    for layer in layers:
      h = layer(h)
    if spec.input != "dense":  # pool the spatial / sequence dims away
      h = tf.reduce_mean(h, axis=list(range(1, len(h.shape) - 1)))
    return tf.matmul(h, head("w", [int(h.shape[-1]), spec.classes]))

  def loss_fn(x, y):
    logits = forward(x)
    if spec.loss == "sparse_xent":
      return common.sparse_xent(y, logits)
    if spec.loss == "xent":
      return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return tf.reduce_mean(tf.square(logits - y))

  # Build the variables once (the optimizer's slots need them all), in a throwaway trace.
  tf.function(loss_fn, autograph=False).get_concrete_function(x_spec, y_spec)
  variables = list(b.variables)
  opt = _optimizer(spec.optimizer, variables)

  def step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(x, y)
    opt.apply(tape.gradient(loss, variables), variables)
    return loss

  fn = tf.function(step, input_signature=[x_spec, y_spec], autograph=False)
  inputs = []
  for _ in range(2):
    if spec.input == "tokens":
      x = rng.integers(0, spec.dims[2], size=x_spec.shape.as_list()).astype(np.int32)
    else:
      x = rng.uniform(-1, 1, size=x_spec.shape.as_list())
    if spec.loss == "sparse_xent":
      y = rng.integers(0, spec.classes, size=[bsz]).astype(np.int32)
    elif spec.loss == "xent":
      y = rng.dirichlet(np.ones(spec.classes), size=bsz)
    else:
      y = rng.normal(size=[bsz, spec.classes])
    inputs.append((x, y))
  return fn, inputs, variables + list(opt.variables)


class _Momentum:
  """Heavy-ball momentum through the fused ``ResourceApplyMomentum`` kernel."""

  def __init__(self, variables, lr: float = 0.05, momentum: float = 0.9):
    import tensorflow as tf
    self.lr, self.momentum = lr, momentum
    self.accum = {id(v): tf.Variable(tf.zeros(v.shape, v.dtype), name="accum")
                  for v in variables}
    self.variables = tuple(self.accum.values())

  def apply(self, grads, variables):
    import tensorflow as tf
    for g, v in zip(grads, variables):
      tf.raw_ops.ResourceApplyMomentum(
          var=v.handle, accum=self.accum[id(v)].handle, lr=tf.constant(self.lr, v.dtype),
          grad=tf.convert_to_tensor(g), momentum=tf.constant(self.momentum, v.dtype))


def _optimizer(name: str, variables):
  from tf_tofu.models import common
  if name == "momentum":
    return _Momentum(variables)
  opt = common.PlainSGD(0.05) if name == "sgd" else common.PlainAdam(0.01)
  opt.build(variables)
  return opt


# ---------------------------------------------------------------------------- checking


def check(spec: StepSpec) -> list[str]:
  """Runs the pipeline on ``spec``; returns the failed properties (empty: all held).

  Needs at least ``spec.k`` logical devices.  An exception anywhere in the
  pipeline is a failure, reported with its type and message.
  """
  import tf_tofu
  from tf_tofu.verify import equivalence
  try:
    fn, inputs, _ = build_step(spec)
    ref = equivalence.Reference(fn, inputs)
    f = tf_tofu.function(fn, devices=spec.k, planner=spec.planner, comm=spec.comm,
                         never_worse=spec.never_worse, needs_once=spec.needs_once)
    xs = inputs[0]
    plan = f.plan(*xs)
    p = f.partitioned(*xs)
    failures = []
    counted = tf_tofu.count_transfer_bytes(p.graph_def)
    if counted != plan.total_bytes:
      failures.append(f"bytes: counted {counted} != predicted {plan.total_bytes}")
    devices = set(p.devices)
    off = [n.name for n in p.graph_def.node if n.device not in devices]
    if off:
      failures.append(f"placement: {len(off)} nodes off the plan's devices, e.g. {off[0]!r}")
    once = [lvl["needs"] == "once" for lvl in plan.level_search]
    if (spec.needs_once and not spec.never_worse and once == [True]
        and plan.objective != plan.total_bytes):
      failures.append(f"objective: one level priced once, objective {plan.objective:,.0f} B "
                      f"!= predicted {plan.total_bytes:,} B")
    failures += [f"numerics: {m}" for m in ref.compare(f)]
    return failures
  except Exception as e:  # every pipeline error is a finding
    return [f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"]


def failure_kind(failures: list[str]) -> str:
  """The class of a failure list (what :func:`shrink` preserves): its first word and,
  for errors, the exception type."""
  if not failures:
    return ""
  first = failures[0]
  return ":".join(first.split(":")[:2]) if first.startswith("error") else first.split(":")[0]


def _smaller(spec: StepSpec):
  """Candidate simplifications of a spec, simplest first."""
  rep = dataclasses.replace
  for i in range(len(spec.blocks)):
    yield rep(spec, blocks=spec.blocks[:i] + spec.blocks[i + 1:])
  if spec.k > 2:
    yield rep(spec, k=2)
  if spec.never_worse:
    yield rep(spec, never_worse=False)
  if spec.needs_once:
    yield rep(spec, needs_once=False)
  if spec.planner != "tofu":
    yield rep(spec, planner="tofu")
  if spec.comm != "plain":
    yield rep(spec, comm="plain")
  if spec.optimizer != "sgd":
    yield rep(spec, optimizer="sgd")
  if spec.loss != "sparse_xent":
    yield rep(spec, loss="sparse_xent")
  if spec.batch > 1:
    yield rep(spec, batch=max(1, spec.batch // 2))
  if spec.classes > 2:
    yield rep(spec, classes=2)
  for i, d in enumerate(spec.dims):
    if d > 1 and not (spec.input == "tokens" and i == 2 and d <= 2):
      yield rep(spec, dims=spec.dims[:i] + (max(1, d // 2),) + spec.dims[i + 1:])
  for i, b in enumerate(spec.blocks):
    for smaller in (rep(b, size=max(1, b.size // 2)), rep(b, kernel=1), rep(b, stride=1),
                    rep(b, padding="SAME")):
      if smaller != b:
        yield rep(spec, blocks=spec.blocks[:i] + (smaller,) + spec.blocks[i + 1:])


def shrink(spec: StepSpec, run: Callable[[StepSpec], list[str]] = check,
           budget: int = 60) -> StepSpec:
  """Greedily simplifies a failing spec while it fails with the same :func:`failure_kind`
  (at most ``budget`` further runs)."""
  kind = failure_kind(run(spec))
  if not kind:
    return spec
  changed = True
  while changed and budget > 0:
    changed = False
    for cand in _smaller(spec):
      budget -= 1
      if _valid(cand) and failure_kind(run(cand)) == kind:
        spec, changed = cand, True
        break
      if budget <= 0:
        break
  return spec


def _valid(spec: StepSpec) -> bool:
  """Whether every block's window fits the spatial size it meets (VALID padding)."""
  if spec.input != "image":
    return True
  h, w = spec.dims[0], spec.dims[1]
  for b in spec.blocks:
    if b.kind in ("conv", "depthwise", "max_pool", "avg_pool"):
      if b.padding == "VALID":
        if b.kernel > min(h, w):
          return False
        h, w = (h - b.kernel) // b.stride + 1, (w - b.kernel) // b.stride + 1
      else:
        h, w = -(-h // b.stride), -(-w // b.stride)
  return True


# ---------------------------------------------------------------------------- hypothesis


def step_specs(max_k: int = 8):
  """The hypothesis strategy of :class:`StepSpec` (k in 2..``max_k``)."""
  from hypothesis import strategies as st
  from tf_tofu.search import planners
  planner_names = tuple(sorted(planners.PLANNERS))

  def blocks_for(kind):
    names = {"dense": DENSE_BLOCKS, "image": IMAGE_BLOCKS, "tokens": TOKEN_BLOCKS}[kind]
    return st.lists(st.builds(Block, kind=st.sampled_from(names), size=st.integers(1, 9),
                              kernel=st.integers(1, 3), stride=st.integers(1, 2),
                              padding=st.sampled_from(["SAME", "VALID"])),
                    min_size=1, max_size=4).map(tuple)

  @st.composite
  def spec(draw):
    kind = draw(st.sampled_from(INPUTS))
    if kind == "dense":
      dims = (draw(st.integers(1, 12)),)
    elif kind == "image":
      dims = (draw(st.integers(3, 9)), draw(st.integers(3, 9)), draw(st.integers(1, 6)))
    else:
      dims = (draw(st.integers(1, 7)), draw(st.integers(1, 9)), draw(st.integers(2, 11)))
    s = StepSpec(input=kind, batch=draw(st.integers(1, 9)), dims=dims,
                 blocks=draw(blocks_for(kind)), classes=draw(st.integers(2, 7)),
                 loss=draw(st.sampled_from(LOSSES)), optimizer=draw(st.sampled_from(OPTIMIZERS)),
                 k=draw(st.integers(2, max_k)), planner=draw(st.sampled_from(planner_names)),
                 comm=draw(st.sampled_from(["plain", "collective"])),
                 seed=draw(st.integers(0, 2**16)))
    if s.planner == "tofu":
      s = dataclasses.replace(s, never_worse=draw(st.booleans()),
                              needs_once=draw(st.booleans()))
    return s

  return spec().filter(_valid)


def reproduction_script(spec: StepSpec, failures: list[str]) -> str:
  """A standalone Python script that rebuilds ``spec`` and prints what fails."""
  lines = "\n".join(f"#   {f}" for f in failures)
  return f'''"""A tf_tofu fuzz failure, reproduced standalone.

Failed properties when found:
{lines}
"""
import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 8)
tf.config.set_soft_device_placement(False)

from tf_tofu.verify import random_steps

SPEC = random_steps.StepSpec.from_json({spec.to_json()!r})
failures = random_steps.check(SPEC)
print("\\n".join(failures) or "no failure: fixed")
raise SystemExit(1 if failures else 0)
'''
