"""What long work tells a person while it runs.

    with progress.phase("planning 10,211 ops over 4 devices"):
      ...
      progress.update("level 1 of 2: priced 4000/4259 op groups")

A phase still running after :data:`DELAY` seconds reports its name, then the
latest :func:`update` with the seconds since the phase began: at most once
every :data:`INTERVAL` seconds when updates come, and at least once every
:data:`HEARTBEAT` seconds while the phase runs (the latest update again, or
"still running"), so a long search is never silent for long.  When it ends it
reports how long it took.  Work that finishes sooner reports nothing, so quick
calls stay quiet.  Phases nest: an inner phase is shown indented under the
outer one, and only the innermost beats.

Where the lines go: through absl logging (``absl.logging.info``) whenever absl
would emit INFO records -- under ``absl.app.run`` (the ``tofu`` command) and
wherever a program has set absl's verbosity to INFO or finer -- so they carry
absl's time stamps and land in its log files; otherwise (a library call in a
program that has not configured absl, whose default shows warnings only) as
plain lines on stderr, flushed.  Each line is written once, on one channel.

On by default, in library use and on the command line.  Silence it with
``tf_tofu.set_verbose(False)`` or the environment variable
``TF_TOFU_VERBOSE=0``.

:func:`record` collects how long every phase took (shown or not, verbose or
not), for benchmarks that say where the time goes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time
from typing import Iterator, Optional

from absl import logging

DELAY = 2.0
INTERVAL = 1.0
HEARTBEAT = 5.0

_verbose: Optional[bool] = None
_lock = threading.Lock()
_stack: list["_Phase"] = []
_recorders: list[list["Timing"]] = []


@dataclasses.dataclass(frozen=True)
class Timing:
  """One finished phase: its name, how deeply it was nested (0 = outermost), seconds."""

  name: str
  depth: int
  seconds: float


def set_verbose(on: bool) -> None:
  """Shows (True) or hides (False) the progress of long work from now on."""
  global _verbose
  _verbose = bool(on)


def verbose() -> bool:
  """Whether progress is shown: :func:`set_verbose`, else ``TF_TOFU_VERBOSE`` (default on)."""
  if _verbose is not None:
    return _verbose
  return os.environ.get("TF_TOFU_VERBOSE", "1").strip().lower() not in ("0", "false", "no", "")


def _write(text: str) -> None:
  """One line, through absl logging when it emits INFO, else on stderr (module docstring)."""
  if logging.level_info():
    logging.info("%s", text)
  else:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class _Phase:
  """A running phase: shown after DELAY, then beats every HEARTBEAT while innermost."""

  def __init__(self, name: str, parent: Optional["_Phase"]):
    self.name = name
    self.parent = parent
    self.indent = "  " * (0 if parent is None else len(parent.indent) // 2 + 1)
    self.start = time.monotonic()
    self.shown = False
    self.last_write = 0.0
    self.latest = "still running"
    self.stopped = threading.Event()
    self.thread = threading.Thread(target=self._run, name=f"tf_tofu progress: {name}",
                                   daemon=True)

  def _run(self) -> None:
    if self.stopped.wait(DELAY):
      return
    with _lock:
      if self.stopped.is_set():  # ended while this thread waited for the lock
        return
      self._show()
    while not self.stopped.wait(min(HEARTBEAT, max(INTERVAL, 0.01))):
      with _lock:
        now = time.monotonic()
        if (not self.stopped.is_set() and _stack and _stack[-1] is self
            and now - self.last_write >= HEARTBEAT):
          self._line(now)

  def _show(self) -> None:
    if self.parent is not None:
      self.parent._show()  # an inner phase is shown under its outer one
    if not self.shown:
      self.shown = True
      self.last_write = time.monotonic()
      _write(f"tf_tofu: {self.indent}{self.name} ...")

  def _line(self, now: float) -> None:
    self.last_write = now
    _write(f"tf_tofu: {self.indent}  [{now - self.start:.0f} s] {self.latest}")

  def update(self, text: str) -> None:
    now = time.monotonic()
    with _lock:
      self.latest = text
      if self.shown and now - self.last_write >= INTERVAL:
        self._line(now)

  def end(self) -> None:
    self.stopped.set()
    with _lock:
      if self.shown:
        _write(f"tf_tofu: {self.indent}{self.name}: done in {time.monotonic() - self.start:.1f} s")


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
  """Runs the block as a named phase (module docstring); nothing is shown if it is quick."""
  show = verbose()
  if not show and not _recorders:
    yield
    return
  p = _Phase(name, _stack[-1] if _stack else None)
  depth = len(_stack)
  _stack.append(p)
  if show:
    p.thread.start()
  try:
    yield
  finally:
    p.end()
    _stack.remove(p)
    for timings in _recorders:
      timings.append(Timing(name, depth, time.monotonic() - p.start))


@contextlib.contextmanager
def record() -> Iterator[list[Timing]]:
  """Collects a :class:`Timing` per phase that ends inside the block, in the order they end."""
  timings: list[Timing] = []
  _recorders.append(timings)
  try:
    yield timings
  finally:
    _recorders.remove(timings)


def update(text: str) -> None:
  """Reports progress inside the innermost phase (shown only once that phase is)."""
  if _stack:
    _stack[-1].update(text)


__all__ = ["DELAY", "HEARTBEAT", "INTERVAL", "Timing", "phase", "record", "set_verbose",
           "update", "verbose"]
