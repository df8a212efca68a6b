"""The fewest bytes per step within a per-device memory budget (a Lagrangian search).

Tofu stores every tensor cut (per-device memory about 1/k); storing some
tensor groups replicated can move fewer bytes (SoyBean), at the price of
memory.  Given a budget ``B`` (bytes per device), the search wants

    min_plan  bytes(plan)   subject to   peak(plan) <= B,

with ``peak`` the exact worst-device peak of ``tf_tofu.layout.memory``
(``layout.memory.schedule_peak``; what ``Plan.memory["worst"]`` reports).

**Method: Lagrangian relaxation with bisection on lambda.**  The peak is not
a sum over decisions, so it is relaxed into a per-group proxy and priced: for
a multiplier ``lambda >= 0`` every level of Tofu's recursion solves, exactly,

    min_x  d_l(x) + lambda / k x sum_g [x_g = rep] (n_l - 1) S_g,

``d_l`` the level's bytes and the sum the bytes that replicating group ``g``
(``S_g`` bytes in the level's sub-problem) adds to each device's final share
(``onecut.storage_factors``; in the level's units).  ``lambda = 0`` is
replication for free; ``lambda -> inf`` is Tofu's cut-only storage.  In
these searches a contraction (MatMul, Conv2D, their gradients) splits its
work (``onecut``'s "split work"): bytes do not count work repeated on every
device, and without that rule a large enough budget would make every device
run the whole step (0 bytes, k times the work).  The candidates, each priced
exactly (``evaluate``) and sized exactly (peak):

1. cut-only Tofu (``lambda = inf``, today's plan).  If its peak exceeds
   ``B``, :class:`TofuError` names that peak (the smallest the search finds:
   every group is cut) and the largest tensor shards per device;
2. ``lambda = 0`` (when it fits and moves 0 bytes, nothing can beat it: done);
3. bisection on ``log2 lambda`` over ``lambda_ref x 2^[-SPAN, SPAN]``,
   ``lambda_ref = (bytes_inf - bytes_0) / (peak_0 - peak_inf)`` (the average
   price of a byte of memory between the two ends), the ends standing for
   ``lambda = 0`` and ``inf``: up to ``BISECTION_STEPS`` times, the interval
   whose two plans' peaks differ most (by ratio; first on ties) is halved at
   its midpoint and the plan there found and sized.  A larger lambda gives
   fewer replicated bytes and more bytes moved, so halving where the peak
   jumps most fills in the trade-off curve where budgets tell plans apart;
   an interval narrower than ``MIN_OCTAVES`` or whose ends have equal peaks
   is not halved;
4. the rivals: datapar (the baseline that stores replicated), and with
   ``never_worse`` the cut-only baselines too (``planners.rivals``).

The plan returned is the candidate with the fewest bytes among those whose
exact peak is within ``B`` (ties: the lower peak, then the order above).
The bisection is steered by the plans' peaks, never by ``B``, so every budget
sees the same candidates (``frontier``).

**Guarantee.**  (a) The plan's estimated worst-device peak is within the
budget, exactly (no proxy is trusted); (b) it moves no more bytes than
cut-only Tofu, the ``lambda = 0`` plan and the rivals whenever they fit
(with an unlimited budget: than datapar and than cut-only Tofu); (c) the
bytes never grow as the budget grows (the candidates do not depend on it);
(d) deterministic, at most ``2 + BISECTION_STEPS`` Tofu searches plus the
rivals'.  It is not proven the fewest bytes of all plans within ``B``: the
proxy estimates the peak, and the levels are solved one after the other.
"""

from __future__ import annotations

import dataclasses
import fractions
import math
import re
from typing import Callable, Mapping, Optional, Union

from tf_tofu.core.errors import TofuError
from tf_tofu.core.plan import human_bytes
from tf_tofu.core import progress
from tf_tofu.graph.view import SearchGraph
from tf_tofu.layout import tiling
from tf_tofu.layout.memory import schedule_peak
from tf_tofu.opdefs.registry import Describer
from tf_tofu.search import recursive
from tf_tofu.search.memo import SearchMemo, plan_key
from tf_tofu.search.tofu import SearchOptions, level_solver

BISECTION_STEPS = 8
SPAN = 8.0          # octaves either side of lambda_ref
MIN_OCTAVES = 1 / 8  # narrowest interval the bisection halves

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.I)


def parse_memory_budget(value: Union[None, int, float, str]) -> Optional[Union[int, float]]:
  """Bytes per device from an int, a float (``math.inf``: unlimited) or a string.

  Strings: a decimal number and a unit, ``"16GiB"`` = 16 x 2^30, ``"1.5GB"`` =
  1.5 x 10^9, ``"512MiB"``, ``"1000"`` (bytes); units B, KB/MB/GB/TB (powers of
  10), KiB/MiB/GiB/TiB (powers of 2), any case; ``"inf"``/``"unlimited"``.
  Parsed exactly (decimal fractions, no float rounding); a fraction of a byte
  is dropped.  None stays None (no budget).
  """
  if value is None:
    return None
  if isinstance(value, bool):
    raise TofuError(f"memory_budget={value!r}: give bytes (an int), math.inf or a string "
                    "like '16GiB'")
  if isinstance(value, (int, float)):
    if math.isnan(value) or value < 0:
      raise TofuError(f"memory_budget={value!r}: give a number of bytes >= 0")
    return value if isinstance(value, int) or math.isinf(value) else math.floor(value)
  if not isinstance(value, str):
    raise TofuError(f"memory_budget={value!r}: give bytes (an int) or a string like '16GiB'")
  if value.strip().lower() in ("inf", "unlimited"):
    return math.inf
  m = _BUDGET.match(value)
  unit = m.group(2).lower() if m else ""
  if not m or unit not in UNITS and unit != "":
    raise TofuError(f"memory_budget={value!r} is not a size: write a number and a unit, "
                    f"e.g. '16GiB', '512MiB', '1.5GB' (units {', '.join(_unit_names())}), "
                    "or 'unlimited'")
  return math.floor(fractions.Fraction(m.group(1)) * UNITS[unit or "b"])


def _unit_names() -> list[str]:
  return ["B"] + [u[0].upper() + u[1:-1] + "B" for u in UNITS if u != "b"]


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One plan the budget search tried: how it was found and its exact peak."""

  result: recursive.SearchResult
  peak: int
  label: str  # "cut-only", "lambda=...", or a rival planner's name

  @property
  def bytes(self) -> int:
    return self.result.evaluation.total_bytes


def exact_peak(graph: SearchGraph, result: recursive.SearchResult, describer: Describer) -> int:
  """The worst device's peak bytes of a search result (``tf_tofu.layout.memory``)."""
  return schedule_peak(graph, result.factors, result.layouts, result.strategies,
                       describer).worst


def largest_shards(graph: SearchGraph, result: recursive.SearchResult, top: int = 5) -> list[str]:
  """The ``top`` tensors with the largest block on any device under ``result``'s layouts."""
  sizes = []
  for t, layout in result.layouts.items():
    info = graph.tensors[t]
    blocks = tiling.held_regions(info.shape, layout, result.factors)
    sizes.append((max((b.volume for b in blocks if b is not None), default=0) * info.itemsize,
                  t, info.shape, layout))
  sizes.sort(key=lambda s: (-s[0], s[1]))
  return [f"{t} {list(shape)} [{'/'.join(map(str, layout)) or 'whole'}]: {human_bytes(b)}"
          for b, t, shape, layout in sizes[:top]]


def search(graph: SearchGraph, groups, k: int, describer: Describer, options: SearchOptions,
           rivals: Mapping[str, Callable], memo: Optional[SearchMemo] = None
           ) -> recursive.SearchResult:
  """The fewest-bytes plan within ``options.memory_budget`` (module docstring).

  Args:
    graph, groups, k, describer: as for ``recursive.search``.
    options: the search options; ``memory_budget`` is set.
    rivals: planner name -> level-solver factory ``(describer, options)`` of the
      baselines whose plans are candidates too.
    memo: work shared by the searches (``search.memo``; one is made if None).
  """
  tried = frontier(graph, groups, k, describer, options, rivals, memo)
  return pick(tried, options.memory_budget, graph)[0]


def frontier(graph: SearchGraph, groups, k: int, describer: Describer, options: SearchOptions,
             rivals: Mapping[str, Callable], memo: Optional[SearchMemo] = None
             ) -> list[Candidate]:
  """Every candidate of the budget search, in the order of the module docstring.

  The first is cut-only Tofu; ``options.memory_budget`` only decides whether
  the search stops early (a budget below cut-only Tofu's peak, or a plan of 0
  bytes that fits).
  """
  budget = options.memory_budget
  plain = dataclasses.replace(options, memory_budget=None)
  memo = memo if memo is not None else SearchMemo(describer)
  tried: list[Candidate] = []
  peaks: dict = {}  # plan -> exact peak: lambdas and rivals often find the same plan

  def run(label: str, solver, found_by: str = "tofu") -> Candidate:
    progress.update(f"memory budget {show_budget(budget)}: {label}")
    result = recursive.search(graph, groups, k, describer, solver, memo=memo)
    result = dataclasses.replace(result, found_by=found_by)
    plan = plan_key(result.factors, result.layouts, result.strategies)
    if plan not in peaks:
      peaks[plan] = exact_peak(graph, result, describer)
    tried.append(Candidate(result, peaks[plan], label))
    return tried[-1]

  cut = run("cut-only", level_solver(describer, plain))
  if cut.peak > budget:
    return tried
  free = run("lambda=0", level_solver(describer, plain, storage_price=0.0))
  if free.peak <= budget and free.bytes == 0:
    return tried
  if free.bytes < cut.bytes:
    _bisect(cut, free, lambda lam: run(f"lambda={lam:.6g}", level_solver(
        describer, plain, storage_price=lam / k)))
  for name, factory in rivals.items():
    run(name, factory(describer, plain), found_by=name)
  return tried


def show_budget(budget: float) -> str:
  """``"16.0 GiB (17179869184 B)"``, or ``"unlimited"``."""
  return "unlimited" if math.isinf(budget) else f"{human_bytes(budget)} ({int(budget)} B)"


def _bisect(cut: Candidate, free: Candidate, run: Callable[[float], Candidate]) -> None:
  """Halves, ``BISECTION_STEPS`` times, the ``log2 lambda`` interval whose ends' peaks
  differ most (module docstring); ``free`` and ``cut`` stand at the bracket's ends."""
  ref = math.log2((cut.bytes - free.bytes) / max(free.peak - cut.peak, 1))
  ends = [(ref - SPAN, free), (ref + SPAN, cut)]  # sorted by lambda
  for _ in range(BISECTION_STEPS):
    gaps = [(math.log(max(a.peak, 1) / max(b.peak, 1)), -i) for i, ((la, a), (lb, b))
            in enumerate(zip(ends, ends[1:])) if lb - la > MIN_OCTAVES and a.peak != b.peak]
    if not gaps:
      return
    i = -max(gaps)[1]
    mid = (ends[i][0] + ends[i + 1][0]) / 2
    ends.insert(i + 1, (mid, run(2.0 ** mid)))


def pick(tried: list[Candidate], budget: float,
         graph: SearchGraph) -> tuple[recursive.SearchResult, int]:
  """The fewest-bytes candidate within ``budget`` (ties: lower peak, earlier), as the
  search's result and its exact peak; TofuError when none fits (``tried[0]`` is cut-only
  Tofu, the smallest peak the search finds)."""
  cut = tried[0]
  fits = [(c.bytes, c.peak, i) for i, c in enumerate(tried) if c.peak <= budget]
  if not fits:
    raise TofuError(
        f"memory budget {show_budget(budget)} per device is below the smallest peak the "
        f"search finds, {human_bytes(cut.peak)} ({cut.peak} B) on the worst of "
        f"{tiling.num_devices(cut.result.factors)} devices with every tensor group cut "
        "(Tofu's plan); the largest tensors per device: "
        + "; ".join(largest_shards(graph, cut.result))
        + ". Raise the budget, use more devices or a smaller batch")
  best = tried[min(fits)[2]]
  seconds = sum(c.result.seconds for c in tried)
  if best is cut:
    return dataclasses.replace(cut.result, seconds=seconds), cut.peak
  note = (f"memory budget {show_budget(budget)}: the {best.label} search's plan (peak "
          f"{human_bytes(best.peak)}) moves {best.bytes:,} B per step; Tofu's cut-only plan "
          f"{cut.bytes:,} B (peak {human_bytes(cut.peak)}); {len(tried)} plans tried")
  proof = best.result if best.result.found_by == "tofu" else cut.result
  return dataclasses.replace(best.result, seconds=seconds, proven_optimal=proof.proven_optimal,
                             level_search=proof.level_search,
                             notes=best.result.notes + (note,)), best.peak
