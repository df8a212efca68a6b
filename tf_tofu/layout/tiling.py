"""From per-level decisions to per-device tiles: what every device holds and computes.

Devices ``0..k-1`` are numbered in mixed radix over the level factors
``(n_1, ..., n_L)``, level 1 most significant::

    device = ((w_1 * n_2 + w_2) * n_3 + w_3) ...

so the first cut separates ``{0..k/n_1-1}`` from the next ``k/n_1`` devices,
and so on.

*Tensors.*  A layout is one state per level.  The box that device ``(w_1..w_L)``
holds starts as the whole tensor; at level ``l`` a ``Cut(d)`` keeps block
``w_l`` of ``n_l`` of the current box along ``d`` and ``REP`` keeps the box.

*Ops.*  A strategy is one decision per level: the name of the index variable
to cut, ``"replicate"`` (every worker runs the whole sub-op) or ``"single"``
(an op left whole: it runs once, on device 0).  Level ``l`` cuts the sub-op
that level ``l - 1`` left to the worker: the op is re-described on the
worker's shapes (with the shard hook's attributes and shape inputs), the
variable is cut ``n_l`` ways, and regions are offset back to global
coordinates.  An output that is ``PARTIAL`` at any level is a partial sum on
the device; devices whose tiles differ only in such levels hold the addends.

The search prices plans with these tiles and the rewrite builds sub-ops from
them, so both see the same boxes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional, Sequence

import numpy as np

from tf_tofu.core.errors import TofuError
from tf_tofu.opdefs import analysis
from tf_tofu.opdefs.description import OpContext, TensorInfo, WorkerView
from tf_tofu.core.regions import Interval, Region, block
from tf_tofu.opdefs.registry import Describer, context_key, frozen_attrs
from tf_tofu.core.states import Cut, Partial, Rep, State

REPLICATE = "replicate"
SINGLE = "single"


class TilingError(TofuError):
  """A layout or strategy cannot be applied to this tensor or op."""


def device_coords(device: int, factors: Sequence[int]) -> tuple[int, ...]:
  """``(w_1, ..., w_L)`` of a device in mixed radix, level 1 most significant."""
  out = []
  for n in reversed(factors):
    device, w = divmod(device, n)
    out.append(w)
  return tuple(reversed(out))


@functools.lru_cache(maxsize=64)
def coords_table(factors: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
  """``device_coords(d, factors)`` for every device ``d``, computed once per ``factors``."""
  return tuple(device_coords(d, factors) for d in range(num_devices(factors)))


def device_index(coords: Sequence[int], factors: Sequence[int]) -> int:
  d = 0
  for w, n in zip(coords, factors):
    d = d * n + w
  return d


def num_devices(factors: Sequence[int]) -> int:
  return math.prod(factors)


def sub_block(iv: Interval, n: int, w: int) -> Interval:
  """Block ``w`` of ``n`` of an interval (canonical split of its length)."""
  lo, hi = block(iv.size, n, w)
  return Interval(iv.lo + lo, iv.lo + hi)


def held_region(shape: Sequence[int], layout: Sequence[State], factors: Sequence[int],
                device: int) -> Region:
  """The box of a tensor that ``device`` holds under ``layout``."""
  if len(layout) != len(factors):
    raise TilingError(f"layout {[str(s) for s in layout]} has {len(layout)} levels, the "
                      f"plan has {len(factors)}")
  ivs = [Interval(0, int(d)) for d in shape]
  for state, n, w in zip(layout, factors, device_coords(device, factors)):
    if isinstance(state, Cut):
      if state.dim >= len(ivs):
        raise TilingError(f"state {state} names a dim of a rank-{len(ivs)} tensor")
      ivs[state.dim] = sub_block(ivs[state.dim], n, w)
    elif not isinstance(state, Rep):
      raise TilingError(f"a tensor is stored cut or replicated, not {state}")
  return Region(tuple(ivs))


def held_regions(shape, layout, factors) -> tuple[Region, ...]:
  return tuple(held_region(shape, layout, factors, d) for d in range(num_devices(factors)))


@dataclasses.dataclass(frozen=True)
class Tile:
  """What one device computes of one op (``op_tiles`` lists them by device).

  ``inputs[i]`` is the global box of data input ``i`` the sub-op reads (None
  for a constant shape input), ``outputs[o]`` the global box of output ``o``
  it produces, ``partial_key[o]`` the worker indices at the levels where
  output ``o`` is partial (empty: the value is final), ``context`` the
  sub-op's own OpContext (shapes, attributes and constant inputs) and
  ``output_scale`` the factor its outputs must be multiplied by.
  """

  inputs: tuple[Optional[Region], ...]
  outputs: tuple[Region, ...]
  partial_key: tuple[tuple[int, ...], ...]
  context: OpContext
  output_scale: tuple[float, ...]


def _sub_context(ctx: OpContext, view, spec) -> OpContext:
  inputs = []
  for i, info in enumerate(ctx.inputs):
    if i in spec.meta_inputs:
      value = np.asarray(spec.meta_inputs[i])
      inputs.append(TensorInfo(tuple(value.shape), info.dtype, value))
    elif view.input_regions[i] is None:
      inputs.append(info)
    else:
      inputs.append(info.block(view.input_regions[i]))
  outputs = tuple(TensorInfo(r.shape, o.dtype) for r, o in zip(view.output_regions, ctx.outputs))
  attrs = dict(ctx.attrs)
  attrs.update(spec.attrs)
  sub = OpContext(name=ctx.name, op_type=ctx.op_type, attrs=attrs, inputs=tuple(inputs),
                  outputs=outputs)
  if not spec.attrs:  # the op's own attributes: their frozen form is the op's
    sub.__dict__["_frozen_attrs"] = frozen_attrs(ctx)
  return sub


@dataclasses.dataclass(frozen=True)
class Step:
  """One level of an op's recursion on one worker: the view and the sub-op it leaves."""

  view: Optional[WorkerView]          # None for 'replicate' (the worker runs it all)
  partial: tuple[bool, ...]           # per output: is it a partial sum at this level
  scale: Optional[tuple[float, ...]]  # the shard hook's output scale, if any
  context: OpContext                  # the sub-op left to the worker


def descend(ctx: OpContext, choice: str, n: int, w: int, describer: Describer,
            level: int = 1) -> Step:
  """Applies one level's decision to ``ctx`` and returns worker ``w``'s step.

  Where a worker's piece is too small for the chosen cut (an uneven split left
  it fewer than n elements on that variable), that worker runs its piece
  replicated at this level; the tiles, and so the priced and the sent bytes,
  say so.

  A step is a function of the context's key (an op's name is not part of it),
  so it is made once per (context key, decision, n, w) and kept in
  ``describer.steps``: the equal ops of repeated blocks, and the equal sub-ops
  of an even split, share their steps and their sub-op context objects.
  """
  key = (context_key(ctx), choice, n, w)
  step = describer.steps.get(key)
  if step is None:
    found = _cut(ctx, choice, n, describer, level)
    if found is None:
      step = _whole_step(ctx)
    else:
      step = _worker_step(ctx, *found, w)
      # Equal sub-ops (of other workers, ops or levels): one context object.
      shared = describer.sub_ops.setdefault(context_key(step.context), step.context)
      if shared is not step.context:
        step = dataclasses.replace(step, context=shared)
    describer.steps[key] = step
  return step


def _cut(ctx: OpContext, choice: str, n: int, describer: Describer, level: int):
  """``(semantics, strategy)`` of cutting ``choice`` n ways, or None where every
  worker runs the whole sub-op at this level (see :func:`descend`)."""
  if choice in (REPLICATE, SINGLE):
    return None
  sem, reason = describer(ctx)
  if sem is None:
    raise TilingError(f"op {ctx.name!r}: cannot cut {choice!r} at level {level}: {reason}")
  strat = describer.strategy(sem, choice, n)
  if strat is None:
    if any(v.name == choice for v in analysis.all_vars(sem)):
      # This worker's piece is too small (or unevenly shaped) for the cut that the
      # other workers make: it runs its piece replicated at this level.
      return None
    raise TilingError(
        f"op {ctx.name!r} ({ctx.op_type}): the op has no index variable {choice!r} at level "
        f"{level}; its variables are {[v.name for v in analysis.all_vars(sem)]}")
  return sem, strat


def _whole_step(ctx: OpContext) -> Step:
  return Step(None, tuple(False for _ in ctx.outputs), None, ctx)


def _worker_step(ctx: OpContext, sem, strat, w: int) -> Step:
  view = strat.workers[w]
  spec = sem.shard_spec(view)
  return Step(view, tuple(isinstance(st, Partial) for st in strat.outputs),
              None if spec.output_scale is None else tuple(spec.output_scale),
              _sub_context(ctx, view, spec))


def op_tiles(ctx: OpContext, strategy: Sequence[str], factors: Sequence[int],
             describer: Describer) -> tuple[Optional[Tile], ...]:
  """Per device, the tile of the op (None where the device runs no part of it).

  The levels form a tree (a device is a path ``w_1..w_L``); every node's step
  comes from :func:`descend`, made once per context key, so children whose
  sub-ops are equal (an even split), and equal ops anywhere in the graph,
  share their cuts below: an op costs one description per distinct sub-op and
  level, not one per device and level.  Below a replicated level the ``n``
  subtrees are equal, and share their Tile objects.  The tiles' boxes come
  from the describer's ``regions.Pool``: equal boxes of any ops' tiles are one
  object.  The tiles are a function of the context's key, the strategy and the factors
  (not of the op's name), made once and kept in ``describer.tiles``: the exact count of
  a plan, its memory estimate and its rewrite share them, and so do the equal ops of
  repeated blocks.
  """
  key = (context_key(ctx), tuple(strategy), tuple(factors))
  got = describer.tiles.get(key)
  if got is None:
    got = describer.tiles[key] = _op_tiles(ctx, strategy, factors, describer)
  return got


def _op_tiles(ctx: OpContext, strategy: Sequence[str], factors: Sequence[int],
              describer: Describer) -> tuple[Optional[Tile], ...]:
  k = num_devices(factors)
  if len(strategy) != len(factors):
    raise TilingError(f"op {ctx.name!r}: strategy {list(strategy)} has {len(strategy)} levels, "
                      f"the plan has {len(factors)}")
  pool = describer.pool
  whole_in = tuple(None if _is_meta(ctx, describer, i) else pool.whole(t.shape)
                   for i, t in enumerate(ctx.inputs))
  whole_out = tuple(pool.whole(t.shape) for t in ctx.outputs)
  if SINGLE in strategy:
    if any(s != SINGLE for s in strategy):
      raise TilingError(f"op {ctx.name!r}: 'single' must hold at every level, got {list(strategy)}")
    tile = Tile(whole_in, whole_out, tuple(() for _ in whole_out), ctx,
                tuple(1.0 for _ in whole_out))
    return (tile,) + (None,) * (k - 1)
  walk = _TileWalk(strategy, factors, describer)
  walk.down(0, ctx, whole_in, whole_out, tuple(() for _ in whole_out),
            tuple(1.0 for _ in whole_out))
  return tuple(walk.tiles)


class _TileWalk:
  """One :func:`op_tiles` walk down the level tree, its tiles in device order.  A class,
  not a recursive closure: a closure that calls itself is a reference cycle, which would
  keep every walk's tiles and steps alive until the cyclic collector ran."""

  __slots__ = ("strategy", "factors", "describer", "pool", "tiles", "children")

  def __init__(self, strategy: Sequence[str], factors: Sequence[int], describer: Describer):
    self.strategy, self.factors, self.describer = strategy, factors, describer
    self.pool = describer.pool
    self.tiles: list[Tile] = []
    self.children: dict = {}  # (id of a sub-op's context, level) -> its n steps

  def down(self, level: int, cur: OpContext, ins, outs, keys: tuple, scale: tuple) -> None:
    tiles, pool = self.tiles, self.pool
    if level == len(self.factors):
      tiles.append(Tile(ins, outs, keys, cur, scale))
      return
    steps = self.children.get((id(cur), level))
    if steps is None:
      n = self.factors[level]
      steps = self.children[(id(cur), level)] = [
          descend(cur, self.strategy[level], n, w, self.describer, level + 1) for w in range(n)]
    if steps[0].view is None:  # every worker runs cur: n equal subtrees
      first = len(tiles)
      self.down(level + 1, cur, ins, outs, keys, scale)
      tiles.extend(tiles[first:] * (len(steps) - 1))
      return
    for w, step in enumerate(steps):
      self.down(level + 1, step.context,
                tuple(None if r is None else r if o is None else pool.offset(r, o)
                      for r, o in zip(step.view.input_regions, ins)),
                tuple(pool.offset(r, o) for r, o in zip(step.view.output_regions, outs)),
                tuple(key + (w,) if p else key for key, p in zip(keys, step.partial)),
                scale if step.scale is None else
                tuple(s * float(f) for s, f in zip(scale, step.scale)))


def _is_meta(ctx: OpContext, describer: Describer, i: int) -> bool:
  sem, _ = describer(ctx)
  return sem is not None and i in sem.meta_inputs and i not in sem.accessed_inputs
