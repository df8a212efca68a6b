"""Layouts over the device hierarchy, shared by the search (to price) and the rewrite (to build).

* ``tiling``: device coordinates per level, the box each device holds of a
  tensor in a layout, and the tile (input and output boxes, sub-op) each
  device computes of an op under a strategy;
* ``transfers``: the pieces a conversion between what a device holds and what
  it needs moves, and their bytes (the cost model's table, exactly);
* ``guillotine``: the concat tree that assembles a box from parts that
  partition it;
* ``liveness``: per-device peak memory of a schedule;
* ``memory``: a plan's schedule, before any rewrite, and its peak per device.
"""
