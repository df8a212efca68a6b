"""Value types every stage shares; this package imports no other part of tf_tofu.

* ``regions``: intervals, boxes and the canonical n-way block split;
* ``states``: the three states of a tensor at one level (cut, rep, partial);
* ``devices``: what ``devices=`` means (a count, or names; one device however
  spelled), and splitting the CPU into logical devices;
* ``plan``: :class:`Plan`, the one object that passes from the search to the
  rewrite: per-tensor layout per level, per-op strategy, predicted bytes; JSON.
"""
