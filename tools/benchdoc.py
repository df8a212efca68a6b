"""Writes one benchmark's section of docs/benchmarks.md, keeping the others.

Each section sits between ``<!-- begin NAME -->`` and ``<!-- end NAME -->``
and starts with the command that produced it and the date.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
from typing import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
HEADER = ("# Benchmarks\n\n"
          "Every section below is written by the tool named in it; rerun that command to refresh it.\n"
          "Times are wall-clock on the machine named in the section; bytes are per training step.\n")


def _cpu() -> str:
  """The processor's model name (Linux), else the architecture: times depend on it."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return f"{platform.machine()} {line.split(':', 1)[1].strip()}"
  except OSError:
    pass
  return platform.machine()


def _pattern(name: str) -> re.Pattern:
  return re.compile(rf"<!-- begin {re.escape(name)} -->.*?<!-- end {re.escape(name)} -->\n", re.S)


def read_section(name: str) -> str:
  """The section ``name`` as it stands in docs/benchmarks.md ("" when there is none)."""
  text = open(DOC).read() if os.path.exists(DOC) else ""
  found = _pattern(name).search(text)
  return found.group(0) if found else ""


def write_section(name: str, command: str, body: str) -> None:
  text = open(DOC).read() if os.path.exists(DOC) else HEADER
  stamp = datetime.date.today().isoformat()
  machine = f"{_cpu()}, {os.cpu_count()} cores, Python {platform.python_version()}"
  section = (f"<!-- begin {name} -->\n## {name}\n\nCommand: `{command}` ({stamp}; {machine})\n\n"
             f"{body.rstrip()}\n<!-- end {name} -->\n")
  pattern = _pattern(name)
  text = pattern.sub(lambda _: section, text) if pattern.search(text) else (
      text.rstrip() + "\n\n" + section)
  os.makedirs(os.path.dirname(DOC), exist_ok=True)
  with open(DOC, "w") as f:
    f.write(text)


def run_in_own_process(script: str, args: Sequence[str], out_flag: str) -> str:
  """Runs ``python script *args --nowrite --<out_flag>=FILE`` (one model of a benchmark,
  in a process of its own, as a user plans one model) and returns what it wrote to FILE."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "out")
    subprocess.run([sys.executable, os.path.abspath(script), *args, "--nowrite",
                    f"--{out_flag}={out}"], check=True)
    with open(out) as f:
      return f.read()
