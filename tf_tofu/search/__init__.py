"""The communication-minimising partitioner (docs/method.md sections 6-9).

``planners.run(name, view, k, describer, options)`` plans a graph view with
Tofu's recursive one-cut DP or a baseline.  Modules, in the order they act:
``coarsen`` (tensor groups that share a state), ``onecut`` and ``dp`` (one
level's exact search), ``recursive`` (k-way over factor orders), ``evaluate``
(exact bytes of a whole plan), ``tofu`` and ``baselines`` (the level solvers),
``planners`` (them by name).
"""
