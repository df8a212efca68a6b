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

Planning Keras InceptionV3 (batch 128, k = 8), with only the young threshold
raised: 156 young collections took 0.3-0.5 s, 14 middle ones 0.4-0.5 s and one
full collection 0.6-1.0 s of 8-10 s.  Objects that survive a young collection
are the work's own long-lived state; scanning them again and again frees
nothing.

:func:`bulk` raises the young threshold to :data:`BULK_THRESHOLD` and the
middle one to :data:`BULK_MIDDLE` for the block (the oldest is kept) and
restores the thresholds the process had on exit.  Young collections still run,
about ``BULK_THRESHOLD / 700`` times less often, so reference cycles made and
dropped in the block are reclaimed at most ``BULK_THRESHOLD`` allocations
later; what survives one waits in the middle generation until the block ends
(the process's next collections after it).  Blocks nest (an inner block leaves
the thresholds raised); a higher threshold of the process is kept.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

BULK_THRESHOLD = 100_000
BULK_MIDDLE = 1_000


@contextlib.contextmanager
def bulk() -> Iterator[None]:
  """Runs the block with the young threshold at least :data:`BULK_THRESHOLD` and the
  middle one at least :data:`BULK_MIDDLE`."""
  saved = gc.get_threshold()
  gc.set_threshold(max(saved[0], BULK_THRESHOLD), max(saved[1], BULK_MIDDLE), *saved[2:])
  try:
    yield
  finally:
    gc.set_threshold(*saved)


__all__ = ["BULK_MIDDLE", "BULK_THRESHOLD", "bulk"]
