"""What ``tofu plan`` and ``tofu rewrite`` read, and how they write: shared flags and checks.

Inputs, one of:

* ``--graph=FILE`` (a GraphDef, ``.pb`` binary or ``.pbtxt`` text) with
  ``--feeds=x=32x784,labels=32`` (placeholder = shape, dims joined by ``x``;
  ``name=`` for a scalar), ``--fetches=loss`` and optionally
  ``--targets=train_op`` (ops that must run: the updates);
* ``--saved_model=DIR`` with ``--signature`` (default ``serving_default``);
  its variables are loaded, so a rewrite can carry their values.

Outputs are checked before any work and written atomically (a temporary
file or directory beside the target, then renamed).  Never over an input: a
path equal to an input, inside an input SavedModel, or containing an input is
refused.  An existing output is replaced only with ``--overwrite``, and an
existing directory only when tofu wrote it (it holds the ``OUTPUT_MARKER``
file that every directory output of tofu carries).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable

from absl import flags

from tf_tofu.core.errors import TofuError
from tf_tofu.graph.ingest import IngestError

FLAGS = flags.FLAGS
flags.DEFINE_string("graph", None, "A GraphDef file (.pb binary or .pbtxt text).")
flags.DEFINE_list("feeds", [], "For --graph: placeholders with their shapes, e.g. "
                  "x=32x784,labels=32 (name= for a scalar).")
flags.DEFINE_list("fetches", [], "For --graph: tensors to compute, the loss first.")
flags.DEFINE_list("targets", [], "For --graph: ops that must run although nothing fetched "
                  "needs them (the train op); default every variable update fed by the feeds.")
flags.DEFINE_string("saved_model", None, "A SavedModel directory.")
flags.DEFINE_string("signature", "serving_default", "For --saved_model: the signature.")
flags.DEFINE_bool("overwrite", False, "Replace outputs that exist already (a directory only "
                  "when tofu wrote it).")

OUTPUT_MARKER = ".tofu-output"


class UsageError(TofuError):
  """A command line that cannot be carried out, with what to do instead."""


def parse_feeds(items) -> dict[str, tuple[int, ...] | None]:
  """``["x=32x784", "k=", "y"]`` -> ``{"x": (32, 784), "k": (), "y": None}``.

  A name without ``=`` keeps the placeholder's own shape (None).
  """
  out = {}
  for item in items:
    name, sep, dims = item.partition("=")
    if not name:
      raise UsageError(f"--feeds entry {item!r} must be name=shape, e.g. x=32x784, or a "
                       "placeholder name alone to keep its own shape")
    if not sep:
      out[name] = None
      continue
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


def _inside(path: str, folder: str) -> bool:
  return path.startswith(folder.rstrip(os.sep) + os.sep)


def check_output(path: str, flag: str, directory: bool = False, log_dir: bool = False) -> str:
  """``path`` made absolute, after every check that can fail before work starts.

  Refused: an input, a path inside an input, a path that contains an input;
  an existing path without ``--overwrite``; an existing directory that tofu
  did not write (no ``OUTPUT_MARKER``); a file output that is a directory
  (or the reverse); a parent folder that cannot be written.  A ``log_dir``
  (TensorBoard's) is a directory that may exist: files are added to it.
  """
  if not path:
    raise UsageError(f"{flag} is empty")
  out = os.path.realpath(path)
  for p in (os.path.realpath(q) for q in input_paths()):
    if out == p or _inside(out, p):
      raise UsageError(f"{flag}={path!r} would overwrite the input {p!r}; choose another path")
    if _inside(p, out):
      raise UsageError(f"{flag}={path!r} contains the input {p!r} and would replace it; "
                       "choose another path")
  if os.path.lexists(out):
    if os.path.isdir(out) != directory:
      kind = "a directory" if os.path.isdir(out) else "a file"
      raise UsageError(f"{flag}={path!r} is {kind}; give a path for a "
                       f"{'directory' if directory else 'file'}")
    if log_dir:
      return out
    if not FLAGS.overwrite:
      raise UsageError(f"{flag}={path!r} exists; pass --overwrite to replace it, or choose "
                       "another path")
    if directory and not os.path.isfile(os.path.join(out, OUTPUT_MARKER)):
      raise UsageError(f"{flag}={path!r} is a directory tofu did not write; it is never "
                       "replaced: choose another path")
  parent = os.path.dirname(out)
  existing = parent
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
    raise UsageError(f"{flag}={path!r}: cannot write in {existing!r}")
  return out


def write_atomically(path: str, write: Callable[[str], None], directory: bool = False) -> None:
  """Calls ``write(tmp)`` on a temporary path beside ``path``, then renames it into place.

  ``path`` must have passed :func:`check_output`.  A directory gets the
  ``OUTPUT_MARKER`` file; an existing directory is replaced only if it has one.
  """
  parent = os.path.dirname(path) or "."
  os.makedirs(parent, exist_ok=True)
  if directory:
    tmp = tempfile.mkdtemp(prefix=".tofu-", dir=parent)
    try:
      os.rmdir(tmp)
      write(tmp)
      with open(os.path.join(tmp, OUTPUT_MARKER), "w") as f:
        f.write("written by tofu; `tofu ... --overwrite` may replace this directory\n")
      if os.path.exists(path):
        if not os.path.isfile(os.path.join(path, OUTPUT_MARKER)):
          raise UsageError(f"{path!r} is a directory tofu did not write; not replaced")
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


def write_text_atomically(path: str, text: str) -> None:
  """:func:`write_atomically` of a text file."""
  def write(tmp: str) -> None:
    with open(tmp, "w") as f:
      f.write(text)
  write_atomically(path, write)


def fail(e: Exception) -> int:
  """Prints a usage or input error the way a TF tool does and returns the exit status."""
  import sys
  print(f"tofu: error: {e}", file=sys.stderr)
  return 2 if isinstance(e, UsageError) else 1


ERRORS = (UsageError, IngestError)
