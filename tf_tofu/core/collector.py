"""Python's cyclic garbage collector, held back during bulk graph work.

Tracing, describing, planning, rewriting and importing a graph of 10^4 ops
allocate millions of objects that live until the work ends (op descriptions,
regions, pricing tables, protobuf nodes).  CPython collects its youngest
generation every ``threshold0`` net allocations (700 by default) and, every
``threshold1`` young collections, an older one; the oldest generation's
collection traverses every object of the process, TensorFlow's and Keras'
included.  Measured on the first partitioned call of Keras MobileNetV2
(Adam, k = 4): 3,370 young, 307 middle and 10 full collections took 5.2 s of
28 s, and freed next to nothing.

:func:`bulk` raises the young threshold to :data:`BULK_THRESHOLD` for the
block (the other two thresholds are kept) and restores the thresholds the
process had on exit, so the collector still runs, about
``BULK_THRESHOLD / 700`` times less often: reference cycles made in the
block are still reclaimed, at most ``BULK_THRESHOLD`` allocations later.
Blocks nest (an inner block leaves the threshold raised).
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

BULK_THRESHOLD = 100_000


@contextlib.contextmanager
def bulk() -> Iterator[None]:
  """Runs the block with the young-generation threshold at least :data:`BULK_THRESHOLD`."""
  saved = gc.get_threshold()
  gc.set_threshold(max(saved[0], BULK_THRESHOLD), *saved[1:])
  try:
    yield
  finally:
    gc.set_threshold(*saved)


__all__ = ["BULK_THRESHOLD", "bulk"]
