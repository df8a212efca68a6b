"""One level's factor problem as an integer program, solved by HiGHS: an independent certificate.

For variables ``v`` with ``sizes[v]`` states and factors ``f`` (tables over
their scopes), with binary ``x[v, s]`` (variable ``v`` takes state ``s``) and
``w[f, e] >= 0`` (factor ``f`` is at entry ``e`` of its table):

    minimise   sum_f sum_e table_f[e] * w[f, e]
    subject to sum_s x[v, s] = 1                                   for every v
               sum_{e : e_i = s} w[f, e] = x[scope_f[i], s]         for every f, i, s

With ``x`` integral the second family leaves exactly one entry of each table
at 1 (the one every variable of its scope agrees with), so the optimum is
``min_x sum_f table_f[x_scope_f]``: the problem ``search.dp`` solves.  Only
``x`` is declared integer; HiGHS's branch and bound proves the optimum.  An
infinite entry (a forbidden combination: ``onecut``'s shared needs) is a
``w`` fixed at 0.
"""

from __future__ import annotations

from typing import Sequence

import highspy
import numpy as np


def solve(sizes: Sequence[int], factors) -> float:
  """The optimum of ``sum_f f.table[x_(f.scope)]`` over the states ``x`` (``dp.Factor``s)."""
  x_base = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
  n_cols = int(x_base[-1])
  w_base = []
  for f in factors:
    w_base.append(n_cols)
    n_cols += f.table.size
  cost = np.zeros(n_cols)
  rows: list[tuple[list[int], list[float]]] = []
  for v, size in enumerate(sizes):
    rows.append((list(range(x_base[v], x_base[v] + size)), [1.0] * size))
  upper = np.ones(n_cols)
  for f, base in zip(factors, w_base):
    table = f.table.ravel()
    allowed = np.isfinite(table)
    cost[base:base + f.table.size] = np.where(allowed, table, 0.0)
    upper[base:base + f.table.size] = allowed
    entries = np.indices(f.table.shape).reshape(len(f.scope), -1)
    for i, v in enumerate(f.scope):
      for s in range(sizes[v]):
        cols = (base + np.flatnonzero(entries[i] == s)).tolist()
        rows.append((cols + [int(x_base[v] + s)], [1.0] * (len(cols)) + [-1.0]))
  lp = highspy.HighsLp()
  lp.num_col_ = n_cols
  lp.num_row_ = len(rows)
  lp.col_cost_ = cost
  lp.col_lower_ = np.zeros(n_cols)
  lp.col_upper_ = upper
  lp.row_lower_ = np.array([1.0] * len(sizes) + [0.0] * (len(rows) - len(sizes)))
  lp.row_upper_ = lp.row_lower_.copy()
  lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
  starts, index, value = [0], [], []
  for cols, vals in rows:
    index.extend(cols)
    value.extend(vals)
    starts.append(len(index))
  lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
  lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
  lp.a_matrix_.value_ = np.array(value)
  lp.integrality_ = ([highspy.HighsVarType.kInteger] * int(x_base[-1])
                     + [highspy.HighsVarType.kContinuous] * (n_cols - int(x_base[-1])))
  h = highspy.Highs()
  h.setOptionValue("output_flag", False)
  h.setOptionValue("mip_rel_gap", 0.0)
  h.setOptionValue("mip_abs_gap", 0.0)
  h.passModel(lp)
  h.run()
  status = h.getModelStatus()
  if status != highspy.HighsModelStatus.kOptimal:
    raise AssertionError(f"HiGHS did not prove an optimum: {h.modelStatusToString(status)}")
  return float(h.getInfo().objective_function_value)
