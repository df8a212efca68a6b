"""Topology-aware choice of the factor order and of the device order.

The recursion (``search.recursive``) numbers the devices ``0..k-1`` in mixed
radix over the level factors ``(n_1, ..., n_L)`` (``layout.tiling.device_coords``)
and, for every order of k's prime factors, returns a plan whose exact bytes
are known per device pair: ``B[(i, j)]``, the bytes device index ``i`` sends
to index ``j`` (``evaluate.Evaluation.pair_bytes``).  A *device order* ``pi``
gives index ``i`` the device name ``pi(i)``.  Under a topology the predicted
communication time of the plan of factor order ``o`` run in device order
``pi`` is

    T(o, pi) = sum_c bytes_c(o, pi) / bw_c,
    bytes_c(o, pi) = sum over (i, j) with link_class(pi(i), pi(j)) = c of B_o[(i, j)],

summed exactly (``fractions.Fraction``), so ties are real ties.

*Device orders tried.*  The names in the order given (the identity), and,
when every task has the same number ``D`` of devices (``T`` tasks,
``T * D = k``, ``T > 1``, ``D > 1``), one order per set ``S`` of levels whose
factors multiply to ``T``: the device with coordinates ``w`` is device
``local(w)`` of task ``task(w)``, where ``task(w)`` is the mixed-radix number
of the coordinates ``w_l`` at the levels of ``S`` and ``local(w)`` that of the
other levels.  Two devices then share a task exactly when their coordinates
agree at every level of ``S``: the levels of ``S`` cross the network, the
others stay inside a task.  (Every such ``S`` exists, because the factors are
primes, and orders that give the same ``S`` give the same link classes.)

*Choice.*  The minimum of ``(T, total bytes, rank of o, rank of pi)`` over
the factor orders and their device orders.  **Guarantee**: among the plans of
Tofu's recursion for every factor order and every device order that puts
each level either wholly on the network or wholly inside the tasks, the plan
returned has the least exact predicted time.  The recursion therefore maps
its cheapest cuts onto the slowest link when that is fastest overall (the
paper's property).  With a single link class (every device in one task, or
one device per task) ``T = total bytes / bw``: the choice is the fewest bytes,
ties to the earlier order, names in the order given - exactly the choice
without a topology, so the plan is the same.  Each level's one-cut DP
minimises its own bytes whatever its link, so the bandwidths enter only this
choice.
"""

from __future__ import annotations

import dataclasses
import fractions
import itertools
import math
from typing import Mapping, Optional, Sequence

from tf_tofu.core.topology import Topology
from tf_tofu.layout.tiling import device_coords
from tf_tofu.search.recursive import SearchResult, level_notes


@dataclasses.dataclass(frozen=True)
class DeviceOrder:
  """Device names by index, and which levels the order puts on the network."""

  names: tuple[str, ...]
  network_levels: Optional[tuple[int, ...]]  # 0-based levels; None: no set of levels
  given: bool = False                        # the names in the order given

  def describe(self) -> str:
    given = "the devices in the order given" if self.given else "devices reordered"
    if self.network_levels is None:
      return given
    levels = ", ".join(str(l + 1) for l in self.network_levels)
    return f"level(s) {levels} across tasks, the others inside a task ({given})"


def _radix(values: Sequence[int], factors: Sequence[int]) -> int:
  out = 0
  for w, n in zip(values, factors):
    out = out * n + w
  return out


def device_orders(names: Sequence[str], factors: Sequence[int],
                  topology: Topology) -> list[DeviceOrder]:
  """The device orders tried for a plan of level ``factors`` (module docstring): the
  names as given first, then one per other set of levels that can cross the network."""
  names = tuple(names)
  groups = topology.groups(names)
  tasks, per_task = len(groups), len(groups[0])
  if tasks < 2 or per_task < 2 or any(len(g) != per_task for g in groups):
    return [DeviceOrder(names, None, given=True)]
  if math.prod(factors) != len(names):
    raise ValueError(f"factors {list(factors)} do not multiply to the {len(names)} devices")
  out = [DeviceOrder(names, None, given=True)]
  levels = range(len(factors))
  for size in range(1, len(factors)):
    for net in itertools.combinations(levels, size):
      if math.prod(factors[l] for l in net) != tasks:
        continue
      local = [l for l in levels if l not in net]
      order = []
      for i in range(len(names)):
        w = device_coords(i, factors)
        task = _radix([w[l] for l in net], [factors[l] for l in net])
        order.append(groups[task][_radix([w[l] for l in local], [factors[l] for l in local])])
      order = tuple(order)
      if order == names:
        out[0] = DeviceOrder(names, tuple(net), given=True)
      else:
        out.append(DeviceOrder(order, tuple(net)))
  return out


def link_bytes(pair_bytes: Mapping[tuple[int, int], int], names: Sequence[str],
               topology: Topology) -> dict[str, int]:
  """Bytes per link class: every ``(src, dst)`` index pair's bytes under the class of
  the link between ``names[src]`` and ``names[dst]``; classes in ``topology.classes``
  order, those with no bytes left out."""
  out: dict[str, int] = {}
  for (src, dst), b in pair_bytes.items():
    cls = topology.link_class(names[src], names[dst])
    out[cls] = out.get(cls, 0) + int(b)
  return {c: out[c] for c in topology.classes if out.get(c)}


def exact_seconds(bytes_by_class: Mapping[str, int], topology: Topology) -> fractions.Fraction:
  """``sum_c bytes_c / bw_c`` as an exact fraction (the bandwidths are floats, each exact)."""
  return sum((fractions.Fraction(int(b)) / fractions.Fraction(topology.bandwidth_of(c))
              for c, b in bytes_by_class.items()), fractions.Fraction(0))


def place(result: SearchResult, names: Sequence[str],
          topology: Topology) -> tuple[SearchResult, DeviceOrder]:
  """The factor order (among ``result.candidates``) and device order of least predicted
  time under ``topology`` (module docstring); the result keeps ``result``'s planner,
  search time and notes other than the per-level ones."""
  candidates = result.candidates or (result,)
  best, best_key = None, None
  for rank, cand in enumerate(candidates):
    for prank, order in enumerate(device_orders(names, cand.factors, topology)):
      by_class = link_bytes(cand.evaluation.pair_bytes, order.names, topology)
      key = (exact_seconds(by_class, topology), cand.evaluation.total_bytes, rank, prank)
      if best_key is None or key < best_key:
        best, best_key = (cand, order), key
  cand, order = best
  extra = tuple(n for n in result.notes if n not in level_notes(result.levels))
  chosen = dataclasses.replace(cand, found_by=result.found_by, seconds=result.seconds,
                               notes=tuple(cand.notes) + extra, candidates=result.candidates)
  if cand.factors == result.factors and cand.layouts is result.layouts:
    chosen = dataclasses.replace(result)  # the search's own pick: keep it untouched
  return chosen, order


__all__ = ["DeviceOrder", "device_orders", "exact_seconds", "link_bytes", "place"]
