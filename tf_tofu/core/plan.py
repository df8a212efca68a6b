"""The Plan: what the search decided, what it will cost, and how to read it.

A Plan is the only object that passes from the search to the rewrite.  It
holds, for ``k = n_1 * ... * n_L`` devices:

* ``layouts[tensor]`` - the tensor's state at every level (``cut(d)`` or ``rep``);
* ``strategies[op]`` - the op's decision at every level (an index variable to
  cut, ``replicate``, or ``single`` for an op left whole on device 0);
* the predicted bytes per step: in total, per level, per op group and per
  conversion (exactly what the rewrite sends, ``search.evaluate``);
* the per-level choices with the runner-up's cost, whether each level's DP was
  exact (``proven_optimal``), and notes (ops left whole and why);
* ``level_search``: per level of Tofu's recursion (the search ``proven_optimal``
  speaks of), the workers ``n``, whether its DP was ``exact``, the DP ``width``,
  the tensor groups ``fixed`` by the fallback, the ``gap_bound``: how many
  bytes the level's cost may be above its optimum (0 when exact;
  ``search.dp.lower_bound``), and ``needs``: how its objective priced a need
  several op groups make, once (its exact bytes) or per op group
  (``search.onecut``, "Shared needs"; plans saved before say per op group).
  Empty for a baseline planner;
* ``found_by``: the planner whose search produced the layouts (for ``tofu``,
  its recursion or, when one moves fewer bytes, a baseline's:
  ``search.planners``, "never worse than a baseline"; a note says when the
  exact improvement pass then moved some of them, ``search.improve``);
* ``memory``: the estimated peak bytes per device (worst, the ideal single
  device / k, their ratio, per device), from the graph and the plan alone
  (``tf_tofu.layout.memory``, equal to the liveness of the plain rewrite);
* under a topology (``tf_tofu.core.topology``): ``link_bytes``, the predicted
  bytes per link class (``"local"`` inside a task, ``"network"`` between
  tasks; exact, from every piece's two devices), ``bandwidth`` (bytes/s per
  class) and ``comm_time = sum_c link_bytes[c] / bandwidth[c]``, the
  predicted communication time per step; ``placement`` says which levels the
  device order puts across tasks (``search.topology_search``).  Plans saved
  before these fields load with them empty.

It round-trips through JSON: a plan saved, edited and loaded applies the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tf_tofu.core.errors import TofuError
from tf_tofu.core.states import State, state_from_str

FORMAT = "tf_tofu.plan/1"


def graph_signature(graph) -> str:
  """A fingerprint of the ops and tensor shapes a plan is for."""
  h = hashlib.sha256()
  for op in graph.ops:
    h.update(f"{op.name}|{op.op_type}|{','.join(t or '' for t in op.inputs)}|".encode())
    for t in op.outputs:
      h.update(f"{t}:{graph.tensors[t].shape}:{graph.tensors[t].dtype};".encode())
  return h.hexdigest()[:16]


class PlanError(TofuError):
  """A plan that cannot be read, or does not belong to the graph it is applied to."""


def _check_devices(devices: Sequence[str]) -> None:
  """PlanError unless ``devices`` are device names, each once (however spelled)."""
  from tf_tofu.core import devices as devices_lib
  if not devices:
    raise PlanError("the plan names no device")
  try:
    devices_lib.resolve(list(devices))
  except (TypeError, ValueError) as e:
    raise PlanError(f"the plan's devices: {e}") from None


@dataclasses.dataclass(frozen=True, repr=False)
class Plan:
  """A partition plan; see the module docstring.  Immutable: an edited or re-priced plan is
  a new Plan (``dataclasses.replace``).  ``memory``: the per-device peak-memory estimate
  of the plan (``tf_tofu.layout.memory.plan_memory``; ``tf_tofu.plan`` fills it), shown
  by ``report``."""

  planner: str
  devices: tuple[str, ...]
  factors: tuple[int, ...]
  layouts: dict[str, tuple[State, ...]]
  strategies: dict[str, tuple[str, ...]]
  total_bytes: int
  level_bytes: tuple[int, ...]
  op_bytes: dict[str, int]
  conversions: tuple[dict, ...]
  choices: dict[str, tuple[dict, ...]]
  op_groups: dict[str, tuple[str, ...]]
  objective: float
  proven_optimal: bool
  notes: tuple[str, ...]
  graph_signature: str
  search_seconds: float = 0.0   # in the report, not in the JSON (same input, same file)
  found_by: str = ""            # "" = the planner itself
  memory: Optional[Mapping[str, Any]] = None
  link_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)
  bandwidth: Mapping[str, float] = dataclasses.field(default_factory=dict)
  comm_time: Optional[float] = None   # predicted communication time per step, in seconds
  placement: str = ""
  level_search: tuple[dict, ...] = ()

  def __repr__(self) -> str:
    return (f"Plan({self.planner}, {self.k} devices, {self.total_bytes} B/step, "
            f"{len(self.layouts)} tensors, {len(self.strategies)} ops, "
            f"proven_optimal={self.proven_optimal})")

  @property
  def k(self) -> int:
    return len(self.devices)

  # ------------------------------------------------------------------ JSON

  def to_dict(self) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "planner": self.planner,
        "devices": list(self.devices),
        "factors": list(self.factors),
        "graph_signature": self.graph_signature,
        "total_bytes": self.total_bytes,
        "level_bytes": list(self.level_bytes),
        "objective": self.objective,
        "proven_optimal": self.proven_optimal,
        "notes": list(self.notes),
        "found_by": self.found_by or self.planner,
        "memory": dict(self.memory) if self.memory else None,
        "link_bytes": dict(self.link_bytes),
        "bandwidth": dict(self.bandwidth),
        "comm_time": self.comm_time,
        "placement": self.placement,
        "level_search": [dict(lvl) for lvl in self.level_search],
        "layouts": {t: [str(s) for s in v] for t, v in sorted(self.layouts.items())},
        "strategies": {o: list(v) for o, v in sorted(self.strategies.items())},
        "op_bytes": dict(sorted(self.op_bytes.items())),
        "op_groups": {g: list(v) for g, v in sorted(self.op_groups.items())},
        "choices": {o: list(v) for o, v in sorted(self.choices.items())},
        "conversions": list(self.conversions),
    }

  def to_json(self, indent: Optional[int] = 1) -> str:
    return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
    if d.get("format") != FORMAT:
      raise PlanError(f"not a tf_tofu plan (format {d.get('format')!r}, expected {FORMAT!r})")
    try:
      devices = tuple(str(x) for x in d["devices"])
      _check_devices(devices)
      factors = tuple(int(x) for x in d["factors"])
      if int(np.prod(factors, dtype=np.int64)) != len(devices) or any(f < 2 for f in factors):
        raise PlanError(f"factors {list(factors)} do not multiply to the {len(devices)} "
                        "devices (each factor >= 2)")
      layouts = {t: tuple(state_from_str(s) for s in v) for t, v in d["layouts"].items()}
      strategies = {o: tuple(str(s) for s in v) for o, v in d["strategies"].items()}
      for name, v in list(layouts.items()) + list(strategies.items()):
        if len(v) != len(factors):
          raise PlanError(f"{name!r} has {len(v)} levels, the plan has {len(factors)}")
      return cls(planner=str(d["planner"]), devices=devices, factors=factors,
                 layouts=layouts, strategies=strategies, total_bytes=int(d["total_bytes"]),
                 level_bytes=tuple(int(x) for x in d["level_bytes"]),
                 op_bytes={k: int(v) for k, v in d["op_bytes"].items()},
                 conversions=tuple(d["conversions"]),
                 choices={k: tuple(v) for k, v in d["choices"].items()},
                 op_groups={k: tuple(v) for k, v in d["op_groups"].items()},
                 objective=float(d["objective"]), proven_optimal=bool(d["proven_optimal"]),
                 notes=tuple(d["notes"]), graph_signature=str(d["graph_signature"]),
                 found_by=str(d.get("found_by", d["planner"])), memory=d.get("memory"),
                 link_bytes={str(k): int(v) for k, v in (d.get("link_bytes") or {}).items()},
                 bandwidth={str(k): float(v) for k, v in (d.get("bandwidth") or {}).items()},
                 comm_time=(None if d.get("comm_time") is None
                               else float(d["comm_time"])),
                 placement=str(d.get("placement") or ""),
                 level_search=tuple(_level_entry(lvl) for lvl in d.get("level_search") or ()))
    except (KeyError, TypeError, ValueError) as e:
      if isinstance(e, PlanError):
        raise
      raise PlanError(f"malformed plan JSON: {type(e).__name__}: {e}") from e

  @classmethod
  def from_json(cls, text: str) -> "Plan":
    try:
      d = json.loads(text)
    except json.JSONDecodeError as e:
      raise PlanError(f"plan JSON does not parse: {e}") from e
    return cls.from_dict(d)

  def check_matches(self, graph) -> None:
    """Raises PlanError when this plan was made for a different graph."""
    sig = graph_signature(graph)
    if sig != self.graph_signature:
      missing = sorted(set(self.strategies) - {o.name for o in graph.ops})[:3]
      raise PlanError(f"the plan was made for another graph (signature {self.graph_signature}, "
                      f"this graph's is {sig}{'; ops not in this graph: ' + str(missing) if missing else ''}); "
                      "plan this graph again")

  # ---------------------------------------------------------------- report

  def report(self, top: int = 12, memory: Optional[Mapping[str, Any]] = None) -> str:
    """A readable summary: totals, op groups with their strategies, largest conversions,
    and the per-device peak-memory estimate (``memory``, else the plan's own)."""
    memory = memory or self.memory
    lines = [
        f"tf_tofu plan ({self.planner}) for {self.k} devices, levels {' x '.join(map(str, self.factors)) or '-'}",
        f"  predicted bytes per step: {human_bytes(self.total_bytes)} ({self.total_bytes} B); per level: "
        + ", ".join(human_bytes(b) for b in self.level_bytes),
        f"  search objective (sum over levels of groups x one-cut cost): {human_bytes(self.objective)}",
        f"  proven optimal per level: {'yes' if self.proven_optimal else 'no (fallback or heuristic planner)'}"
        f"; search time {self.search_seconds:.2f} s",
        f"  found by: {self.found_by or self.planner}",
    ]
    for i, lvl in enumerate(self.level_search):
      lines.append(f"  level {i + 1} (n={lvl['n']}): " + (
          f"exact, DP width {lvl['width']}" if lvl["exact"] else
          f"not exact ({lvl['fixed']} tensor groups fixed by coordinate descent), DP width "
          f"{lvl['width']}; within {human_bytes(lvl['gap_bound'])} of the level's optimum")
          + ("" if lvl["needs"] == "per op group" else f"; shared needs priced {lvl['needs']}"))
    if self.link_bytes or self.comm_time is not None:
      lines.append("  bytes per link class: " + (", ".join(
          f"{c} {human_bytes(b)} ({b} B)" for c, b in self.link_bytes.items()) or "none")
          + (f"; predicted communication {self.comm_time * 1e3:.3f} ms per step at "
             + ", ".join(f"{c} {bw / 1e9:g} GB/s" for c, bw in self.bandwidth.items())
             if self.comm_time is not None else ""))
    if self.placement:
      lines.append(f"  device order: {self.placement}")
    if memory:
      lines.append(f"  peak memory per device (estimate): worst {human_bytes(memory['worst'])}, "
                   f"ideal {human_bytes(memory['ideal'])} (single device / k), ratio "
                   f"{memory['ratio']:.2f}")
    rows = []
    for group, members in self.op_groups.items():
      b = sum(self.op_bytes.get(m, 0) for m in members)
      lead = group if group in self.strategies else members[0]
      ch = self.choices.get(lead, ())
      alt = ", ".join(
          f"{c['next_best']} (+{human_bytes(c['next_best_cost'] - c['cost'])})" if c.get("next_best") else "-"
          for c in ch)
      rows.append((b, group, len(members), "/".join(self.strategies.get(lead, ())), alt))
    rows.sort(key=lambda r: (-r[0], r[1]))
    lines.append("")
    lines.append(f"  {'op group':<44} {'ops':>4} {'bytes':>10}  {'strategy per level':<22} next best per level")
    for b, group, count, strat, alt in rows[:top]:
      lines.append(f"  {group[:44]:<44} {count:>4} {human_bytes(b):>10}  {strat[:22]:<22} {alt}")
    if len(rows) > top:
      rest = sum(r[0] for r in rows[top:])
      lines.append(f"  ... {len(rows) - top} more groups, {human_bytes(rest)}")
    lines.append("")
    lines.append("  largest conversions:")
    for c in sorted(self.conversions, key=lambda c: (-c["bytes"], c["tensor"]))[:top]:
      lines.append(f"    {human_bytes(c['bytes']):>10}  {c['tensor']} ({c['what'][:60]}); per level "
                   + ", ".join(human_bytes(x) for x in c["level_bytes"]))
    for note in self.notes[:top]:
      lines.append(f"  note: {note}")
    if len(self.notes) > top:
      lines.append(f"  ... {len(self.notes) - top} more notes")
    return "\n".join(lines)


def _level_entry(d: Mapping[str, Any]) -> dict:
  """One ``level_search`` entry of plan JSON, typed."""
  return dict(n=int(d["n"]), exact=bool(d["exact"]), width=int(d["width"]),
              fixed=int(d["fixed"]), gap_bound=float(d["gap_bound"]),
              needs=str(d.get("needs", "per op group")))


def human_bytes(b: float) -> str:
  """``1536`` -> ``"1.5 KiB"``: bytes in binary units (whole bytes below 1 KiB)."""
  b = float(b)
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if abs(b) < 1024 or unit == "TiB":
      return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
    b /= 1024
  return f"{b:.1f} TiB"


def priced_fields(evaluation) -> dict[str, Any]:
  """The Plan fields an exact evaluation (``search.evaluate.Evaluation``) fills: total and
  per-level bytes, bytes per op, and the conversions, largest first."""
  conversions = tuple({"tensor": c.tensor, "what": c.what, "bytes": c.bytes,
                       "level_bytes": list(c.level_bytes)}
                      for c in sorted(evaluation.conversions, key=lambda c: (-c.bytes, c.tensor)))
  return dict(total_bytes=int(evaluation.total_bytes),
              level_bytes=tuple(int(b) for b in evaluation.level_bytes),
              op_bytes=dict(evaluation.op_bytes), conversions=conversions)


def link_fields(link_bytes: Mapping[str, int], bandwidth: Mapping[str, float],
                placement: str = "") -> dict[str, Any]:
  """The Plan's link fields: bytes per class, bandwidths (bytes/s) of the classes of the
  plan's links, and ``comm_time = sum_c bytes_c / bandwidth_c``."""
  used = {c: float(bw) for c, bw in bandwidth.items()}
  seconds = sum(b / used[c] for c, b in link_bytes.items())
  return dict(link_bytes=dict(link_bytes), bandwidth=used, comm_time=float(seconds),
              placement=placement)


def plan_from_search(result, graph, planner: str, devices: Sequence[str],
                     links: Optional[Mapping[str, Any]] = None) -> Plan:
  """Packs a ``recursive.SearchResult`` into a Plan (``links``: :func:`link_fields`)."""
  groups: dict[str, list[str]] = {}
  for op in graph.ops:
    if op.kind in ("compute", "single"):
      lead = graph.forward_op_of.get(op.name, op.name)
      groups.setdefault(lead, []).append(op.name)
  choices = {}
  for name in result.strategies:
    choices[name] = tuple(
        {"strategy": lvl.choices[name].strategy, "cost": lvl.choices[name].cost,
         "next_best": lvl.choices[name].next_best, "next_best_cost": lvl.choices[name].next_best_cost}
        for lvl in result.levels)
  notes = [f"op {op.name!r} ({op.op_type}) is left whole on device 0: {op.reason}"
           for op in graph.ops if op.kind == "single"] + list(result.notes)
  return Plan(planner=planner, devices=tuple(devices), factors=tuple(result.factors),
              layouts=dict(result.layouts), strategies=dict(result.strategies),
              **priced_fields(result.evaluation), choices=choices, op_groups={g: tuple(m) for g, m in groups.items()},
              objective=float(result.objective),
              proven_optimal=bool(result.proven_optimal and planner == "tofu"),
              notes=tuple(notes), graph_signature=graph_signature(graph),
              search_seconds=result.seconds, found_by=result.found_by or planner,
              level_search=tuple(result.level_search) if planner == "tofu" else (),
              **dict(links or {}))
