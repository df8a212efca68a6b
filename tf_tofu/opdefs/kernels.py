"""The bridge to TensorFlow: op contexts from graph ops, and running a kernel eagerly.

The same :func:`context_from_node_def` serves graph ingestion and the kernel
check, so a description sees an op exactly as it appears in a GraphDef.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.framework import op_def_registry

from tf_tofu.opdefs.description import OpContext, TensorInfo


def attr_to_python(value: attr_value_pb2.AttrValue) -> Any:
  """One AttrValue as a plain Python value (strings decoded, dtypes by name)."""
  kind = value.WhichOneof("value")
  if kind == "s":
    return value.s.decode("utf-8", errors="replace")
  if kind in ("i", "f", "b"):
    return getattr(value, kind)
  if kind == "type":
    return tf.as_dtype(value.type).name
  if kind == "shape":
    return None if value.shape.unknown_rank else [d.size for d in value.shape.dim]
  if kind == "tensor":
    return tf.make_ndarray(value.tensor)
  if kind == "func":
    return value.func.name
  if kind == "list":
    lst = value.list
    if lst.s:
      return [s.decode("utf-8", errors="replace") for s in lst.s]
    if lst.i:
      return list(lst.i)
    if lst.f:
      return list(lst.f)
    if lst.b:
      return list(lst.b)
    if lst.type:
      return [tf.as_dtype(t).name for t in lst.type]
    if lst.shape:
      return [[d.size for d in s.dim] for s in lst.shape]
    return []
  return None


def attrs_to_python(attrs: Mapping[str, attr_value_pb2.AttrValue],
                    parsed: Mapping[str, Any] = {}) -> dict[str, Any]:
  """Every attribute as :func:`attr_to_python` gives it; those in ``parsed`` are taken
  from there, already read."""
  return {k: parsed[k] if k in parsed else attr_to_python(v) for k, v in sorted(attrs.items())}


def context_from_node_def(node_def, inputs: Sequence[TensorInfo],
                          outputs: Sequence[TensorInfo] = (),
                          parsed: Mapping[str, Any] = {}) -> OpContext:
  """The :class:`OpContext` of one NodeDef whose input and output facts are known
  (``parsed``: attributes already read off this NodeDef, such as a Const's value as
  ingestion made it an array)."""
  return OpContext(name=node_def.name, op_type=node_def.op,
                   attrs=attrs_to_python(node_def.attr, parsed), inputs=tuple(inputs),
                   outputs=tuple(outputs))


def _inferred_attrs(op_def) -> set:
  """Attributes that raw_ops infers from the inputs (and rejects as keywords)."""
  out = set()
  for arg in op_def.input_arg:
    for key in (arg.type_attr, arg.number_attr, arg.type_list_attr):
      if key:
        out.add(key)
  return out


def input_groups(op_type: str, attrs: Mapping[str, Any], n_flat: int) -> list[tuple[str, int, bool]]:
  """``(arg name, count, is_list)`` for each input arg, matching the flat inputs."""
  op_def = op_def_registry.get(op_type)
  if op_def is None:
    raise ValueError(f"{op_type!r} is not a TensorFlow op type")
  groups = []
  for arg in op_def.input_arg:
    if arg.number_attr:
      groups.append((arg.name, int(attrs[arg.number_attr]), True))
    elif arg.type_list_attr:
      groups.append((arg.name, len(attrs[arg.type_list_attr]), True))
    else:
      groups.append((arg.name, 1, False))
  total = sum(c for _, c, _ in groups)
  if total != n_flat:
    raise ValueError(f"{op_type} takes {total} inputs with these attrs, got {n_flat}")
  return groups


# OpDef attribute names that tf.raw_ops spells differently.
_RAW_OP_ATTR_NAMES = {("Squeeze", "squeeze_dims"): "axis"}


def call_raw_op(op_type: str, grouped_inputs: Sequence[Any], attrs: Mapping[str, Any]):
  """Calls ``tf.raw_ops.<op_type>`` with one entry per input arg and OpDef-named attrs.

  tf.raw_ops takes keywords only and renames some inputs (Sum's
  ``reduction_indices`` is ``axis`` there); its parameters list the inputs
  first, in OpDef order, so inputs are matched by position.
  """
  op_def = op_def_registry.get(op_type)
  fn = getattr(tf.raw_ops, op_type)
  params = list(inspect.signature(fn).parameters)
  n_in = len(op_def.input_arg)
  if len(grouped_inputs) != n_in:
    raise ValueError(f"{op_type} takes {n_in} input args, got {len(grouped_inputs)}")
  kwargs = dict(zip(params[:n_in], grouped_inputs))
  inferred = _inferred_attrs(op_def)
  names = {a.name for a in op_def.attr}
  for k, v in attrs.items():
    if k in names and k not in inferred:
      kwargs[_RAW_OP_ATTR_NAMES.get((op_type, k), k)] = v
  return fn(**kwargs)


def run_op(op_type: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
  """Runs one TF kernel eagerly on the CPU and returns its outputs as numpy arrays."""
  grouped = []
  pos = 0
  for _, count, is_list in input_groups(op_type, attrs, len(inputs)):
    chunk = [tf.constant(x) for x in inputs[pos:pos + count]]
    grouped.append(chunk if is_list else chunk[0])
    pos += count
  with tf.device("/CPU:0"):
    result = call_raw_op(op_type, grouped, attrs)
  if isinstance(result, (tf.Tensor, tf.Variable)):
    return [result.numpy()]
  flat = []
  for r in (result if isinstance(result, (list, tuple)) else [result]):
    if isinstance(r, (list, tuple)):
      flat.extend(x.numpy() for x in r)
    elif r is not None:
      flat.append(r.numpy())
  return flat
