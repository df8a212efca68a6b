"""A fuzz campaign: many random training steps through the whole pipeline.

    result = campaign.run(examples=2000, seed=0, out_dir="tofu_fuzz")
    print(result.summary())          # "2000 tried, 0 failed"

Examples are drawn by hypothesis from :func:`random_steps.step_specs` with a
fixed seed (the same seed gives the same examples), each checked by
:func:`random_steps.check`.  Every failing example is shrunk
(:func:`random_steps.shrink`) and written to ``out_dir`` as a standalone
reproduction script, ``fuzz_failure_<n>.py``.  The process needs at least
``max_k`` logical devices (``tofu fuzz`` splits the CPU into 8).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Optional

from tf_tofu.verify import random_steps


@dataclasses.dataclass(frozen=True)
class Result:
  """What a campaign found."""

  tried: int
  failed: int
  seconds: float
  seed: int
  reproductions: tuple[str, ...]    # paths of the reproduction scripts written
  by_kind: tuple[tuple[str, int], ...]  # failure kind -> examples

  def summary(self) -> str:
    return f"{self.tried} tried, {self.failed} failed"


def run(examples: int, seed: int, out_dir: Optional[str] = None, max_k: int = 8,
        shrink_budget: int = 40, max_reproductions: int = 10,
        progress: Callable[[str], None] = print, progress_every: int = 50) -> Result:
  """Runs ``examples`` random steps; shrinks and writes up to ``max_reproductions``
  failures (the first of each failure kind first)."""
  from hypothesis import HealthCheck, Phase, given, settings
  from hypothesis import seed as hypothesis_seed

  failures: list[tuple[random_steps.StepSpec, list[str]]] = []
  count = [0]
  t0 = time.perf_counter()

  @hypothesis_seed(seed)
  @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
            suppress_health_check=list(HealthCheck))
  @given(random_steps.step_specs(max_k=max_k))
  def one(spec):
    count[0] += 1
    found = random_steps.check(spec)
    if found:
      failures.append((spec, found))
      progress(f"fuzz: example {count[0]} failed: {found[0]}")
    if count[0] % progress_every == 0:
      progress(f"fuzz: {count[0]}/{examples} tried, {len(failures)} failed, "
               f"{time.perf_counter() - t0:.0f} s")

  one()
  kinds: dict[str, int] = {}
  for _, found in failures:
    kinds[random_steps.failure_kind(found)] = kinds.get(random_steps.failure_kind(found), 0) + 1
  written = []
  if failures and out_dir:
    os.makedirs(out_dir, exist_ok=True)
    firsts = {}
    for spec, found in failures:
      firsts.setdefault(random_steps.failure_kind(found), (spec, found))
    chosen = list(firsts.values()) + [f for f in failures if f not in firsts.values()]
    for n, (spec, found) in enumerate(chosen[:max_reproductions]):
      small = random_steps.shrink(spec, budget=shrink_budget)
      path = os.path.join(out_dir, f"fuzz_failure_{n}.py")
      with open(path, "w") as f:
        f.write(random_steps.reproduction_script(small, random_steps.check(small) or found))
      written.append(path)
      progress(f"fuzz: wrote {path}")
  return Result(tried=count[0], failed=len(failures), seconds=time.perf_counter() - t0,
                seed=seed, reproductions=tuple(written), by_kind=tuple(sorted(kinds.items())))
