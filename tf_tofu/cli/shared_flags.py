"""The flags that several subcommands take, defined once.

absl allows one definition of a flag name per process, and a process may
load several subcommands (a test run, a notebook that imports them).  So
``--comm`` (``demo`` and ``rewrite``) and ``--out_dir`` (``demo`` and ``fuzz``)
are defined here, and each subcommand imports this module.  ``--out_dir``
has no default of its own: each subcommand names its own with
:func:`out_dir`.
"""

from __future__ import annotations

from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_enum("comm", "plain", ["plain", "collective"],
                  "Communication form: point-to-point pieces, or collectives.")
flags.DEFINE_string("out_dir", None, "Where the subcommand writes its files: demo's plan JSON "
                    "and pictures (default tofu_demo; '' for none), fuzz's reproduction "
                    "scripts of failures (default tofu_fuzz).")


def out_dir(default: str) -> str:
  """``--out_dir``, or ``default`` (the subcommand's own) when it was not given."""
  return default if FLAGS.out_dir is None else FLAGS.out_dir


__all__ = ["out_dir"]
