"""What ``tofu plan`` and ``tofu rewrite`` read, and how they write: shared flags and checks.

Inputs, one of:

* ``--graph=FILE`` (a GraphDef, ``.pb`` binary or ``.pbtxt`` text) with
  ``--feeds=x=32x784,labels=32`` (placeholder = shape, dims joined by ``x``;
  ``name=`` for a scalar), ``--fetches=loss`` and optionally
  ``--targets=train_op`` (ops that must run: the updates);
* ``--saved_model=DIR`` with ``--signature`` (default ``serving_default``);
  its variables are loaded, so a rewrite can carry their values.

Outputs are written atomically (a temporary file or directory beside the
target, then renamed) and never over an input: a path equal to an input, or
inside an input SavedModel, is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

from absl import flags

from tf_tofu.ingest_tf import IngestError

FLAGS = flags.FLAGS
flags.DEFINE_string("graph", None, "A GraphDef file (.pb binary or .pbtxt text).")
flags.DEFINE_list("feeds", [], "For --graph: placeholders with their shapes, e.g. "
                  "x=32x784,labels=32 (name= for a scalar).")
flags.DEFINE_list("fetches", [], "For --graph: tensors to compute, the loss first.")
flags.DEFINE_list("targets", [], "For --graph: ops that must run although nothing fetched "
                  "needs them (the train op); default every variable update fed by the feeds.")
flags.DEFINE_string("saved_model", None, "A SavedModel directory.")
flags.DEFINE_string("signature", "serving_default", "For --saved_model: the signature.")


class UsageError(ValueError):
  """A command line that cannot be carried out, with what to do instead."""


def parse_feeds(items) -> dict[str, tuple[int, ...]]:
  """``["x=32x784", "k="]`` -> ``{"x": (32, 784), "k": ()}``."""
  out = {}
  for item in items:
    name, sep, dims = item.partition("=")
    if not sep or not name:
      raise UsageError(f"--feeds entry {item!r} must be name=shape, e.g. x=32x784")
    try:
      out[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
    except ValueError:
      raise UsageError(f"--feeds entry {item!r}: the shape must be integers joined by 'x'"
                       ) from None
  return out


def input_paths() -> list[str]:
  return [os.path.abspath(p) for p in (FLAGS.graph, FLAGS.saved_model) if p]


def load_graph():
  """The TofuGraph the flags name (IngestError / UsageError with the fix otherwise)."""
  from tf_tofu.graph import TofuGraph
  if bool(FLAGS.graph) == bool(FLAGS.saved_model):
    raise UsageError("give exactly one of --graph=FILE (with --feeds, --fetches) or "
                     "--saved_model=DIR (with --signature)")
  if FLAGS.saved_model:
    if not os.path.isdir(FLAGS.saved_model):
      raise UsageError(f"--saved_model={FLAGS.saved_model!r} is not a directory")
    return TofuGraph.from_saved_model(FLAGS.saved_model, signature=FLAGS.signature)
  if not os.path.isfile(FLAGS.graph):
    raise UsageError(f"--graph={FLAGS.graph!r}: no such file")
  if not FLAGS.fetches:
    raise UsageError("--graph needs --fetches (the loss first), e.g. --fetches=loss")
  return TofuGraph.from_graph_def(FLAGS.graph, feeds=parse_feeds(FLAGS.feeds),
                                  fetches=FLAGS.fetches, control_outputs=FLAGS.targets)


def check_output(path: str, flag: str) -> str:
  """``path`` made absolute; refused when it is an input or lies inside one."""
  if not path:
    raise UsageError(f"{flag} is empty")
  out = os.path.abspath(path)
  for p in input_paths():
    if out == p or out.startswith(p.rstrip(os.sep) + os.sep):
      raise UsageError(f"{flag}={path!r} would overwrite the input {p!r}; choose another path")
  return out


def write_atomically(path: str, write: Callable[[str], None], directory: bool = False) -> None:
  """Calls ``write(tmp)`` on a temporary path beside ``path``, then renames it into place."""
  parent = os.path.dirname(path) or "."
  os.makedirs(parent, exist_ok=True)
  if directory:
    tmp = tempfile.mkdtemp(prefix=".tofu-", dir=parent)
    try:
      os.rmdir(tmp)
      write(tmp)
      if os.path.exists(path):
        shutil.rmtree(path)
      os.replace(tmp, path)
    finally:
      if os.path.exists(tmp):
        shutil.rmtree(tmp, ignore_errors=True)
    return
  fd, tmp = tempfile.mkstemp(prefix=".tofu-", dir=parent)
  os.close(fd)
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it owner-only; outputs are ordinary files
  try:
    write(tmp)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def fail(e: Exception) -> int:
  """Prints a usage or input error the way a TF tool does and returns the exit status."""
  import sys
  print(f"tofu: error: {e}", file=sys.stderr)
  return 2 if isinstance(e, UsageError) else 1


ERRORS = (UsageError, IngestError)
