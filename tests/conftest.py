"""Test order: the heaviest files first, so the two xdist workers finish together.

``--dist loadfile`` hands out whole files, and with ``--no-loadscope-reorder``
(pyproject.toml) in the order collected.  Longest-first is the classic
list-scheduling rule: a worker that starts a long file late cannot leave the
other idle for the length of that file at the end.  ``HEAVY`` lists the files
with the most worker-seconds in a measured run of the whole suite (junit
times, 2 workers); the rest keep pytest's order.  The order is a pure
function of the collected items, so every worker collects the same list, as
xdist requires.  A stale list only costs balance, never a test.
"""

HEAVY = (  # worker-seconds, descending, measured on a 2-core machine before the trims of 2026-12
    "tests/test_tofu_function.py",  # 224
    "tests/search/test_planners.py",  # 118
    "tests/layout/test_memory.py",  # 114
    "tests/test_cluster_run.py",  # 44
    "tests/cli/test_plan.py",  # 43
    "tests/search/test_onecut.py",  # 43
    "tests/models/test_keras_catalog.py",  # 39
    "tests/cli/test_rewrite.py",  # 36
    "tests/verify/test_random_steps.py",  # 35
    "tests/search/test_budget.py",  # 32
)


def pytest_collection_modifyitems(session, config, items):
  del session, config
  rank = {path: i for i, path in enumerate(HEAVY)}
  items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(HEAVY)))
