"""Verification of the whole pipeline against TensorFlow itself.

``equivalence``: a partitioned step against the unpartitioned one, in float64
at a fixed tolerance.  ``random_steps``: a generator of random training steps
(hypothesis strategies).  ``campaign``: the fuzz campaign behind ``tofu fuzz``.
"""
