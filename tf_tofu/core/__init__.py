"""Value types every stage shares: the device list and the Plan.

* ``devices``: what ``devices=`` means (a count, or names; one device however
  spelled), and splitting the CPU into logical devices;
* ``plan``: :class:`Plan`, the one object that passes from the search to the
  rewrite: per-tensor layout per level, per-op strategy, predicted bytes; JSON.
"""
