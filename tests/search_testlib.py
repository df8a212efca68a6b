"""Small graphs for search tests, without going through full ingestion.

``graph_from_tf(g, ...)`` wraps a ``tf.Graph`` of placeholders, constants and
described ops into an object with the fields the search reads from a
TofuGraph (ops, tensors, variables, forward/backward links).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf

from tf_tofu.opdefs.description import TensorInfo
from tf_tofu.opdefs.kernels import context_from_node_def
from tf_tofu.opdefs.registry import Describer


@dataclasses.dataclass(frozen=True)
class FakeTensor:
  name: str
  shape: tuple
  dtype: str
  value: Optional[np.ndarray]


@dataclasses.dataclass(frozen=True)
class FakeOp:
  name: str
  op_type: str
  inputs: tuple
  outputs: tuple
  node_def: object
  semantics: object
  opaque_reason: Optional[str]
  control_inputs: tuple = ()


@dataclasses.dataclass
class FakeGraph:
  ops: dict
  tensors: dict
  variables: tuple = ()
  forward_op_of: dict = dataclasses.field(default_factory=dict)
  gradient_of: dict = dataclasses.field(default_factory=dict)
  control_outputs: tuple = ()


def graph_from_tf(g: tf.Graph) -> FakeGraph:
  describer = Describer()
  tensors, ops = {}, {}
  for op in g.get_operations():
    for t in op.outputs:
      value = tf.make_ndarray(op.get_attr("value")) if op.type == "Const" else None
      tensors[t.name] = FakeTensor(t.name, tuple(t.shape.as_list()), t.dtype.name, value)
  for op in g.get_operations():
    infos = [TensorInfo(tensors[t.name].shape, tensors[t.name].dtype, tensors[t.name].value)
             for t in op.inputs]
    outs = [TensorInfo(tensors[t.name].shape, tensors[t.name].dtype) for t in op.outputs]
    ctx = context_from_node_def(op.node_def, infos, outs)
    sem, reason = (None, None) if op.type in ("Placeholder", "Const") else describer(ctx)
    ops[op.name] = FakeOp(op.name, op.type, tuple(t.name for t in op.inputs),
                          tuple(t.name for t in op.outputs), op.node_def, sem, reason)
  return FakeGraph(ops=ops, tensors=tensors)


def random_graph(seed: int, max_ops: int = 8) -> FakeGraph:
  """A random DAG of MatMul / AddV2 / Relu / Tanh / Mul ops on 2-D float tensors."""
  rng = np.random.default_rng(seed)
  g = tf.Graph()
  with g.as_default():
    sizes = [int(s) for s in rng.choice([2, 3, 4, 6, 8], size=3)]
    x = tf.compat.v1.placeholder(tf.float32, (sizes[0], sizes[1]), name="x")
    pool = [x]
    for i in range(int(rng.integers(3, max_ops + 1))):
      a = pool[int(rng.integers(len(pool)))]
      kind = rng.choice(["matmul", "add", "relu", "tanh", "mul"])
      if kind == "matmul":
        w = tf.compat.v1.placeholder(tf.float32, (a.shape[1], int(rng.choice([2, 3, 4, 6]))),
                                     name=f"w{i}")
        pool.append(tf.raw_ops.MatMul(a=a, b=w, name=f"matmul{i}"))
      elif kind in ("add", "mul"):
        same = [t for t in pool if t.shape == a.shape]
        b = same[int(rng.integers(len(same)))]
        op = tf.raw_ops.AddV2 if kind == "add" else tf.raw_ops.Mul
        pool.append(op(x=a, y=b, name=f"{kind}{i}"))
      elif kind == "relu":
        pool.append(tf.raw_ops.Relu(features=a, name=f"relu{i}"))
      else:
        pool.append(tf.raw_ops.Tanh(x=a, name=f"tanh{i}"))
  return graph_from_tf(g)
