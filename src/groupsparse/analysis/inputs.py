"""The analysis' input tables: required columns, roles, final rows and transfer curves.

A run's role (task | scaling | ablation) and its varied settings (d, D, the ablation variant)
are columns of every table, written by the jobs from the run spec; nothing here parses run names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..io.files import InputError
from ..io.tables import ANALYSED_COLUMNS, check_columns
from ..transfer.methods import names_where

PRETRAINED_METHOD = "pretrained_finetune"
# both pretrained variants are held to the theory's d + D (the paper fine-tunes by SGD; with W
# frozen only v adapts, which is what the theory's downstream analysis needs to move)
PRETRAINED_METHODS = names_where(theory=True)  # the method modules that declare THEORY = True
BASELINE_METHOD = "logreg"


def require_columns(df: pd.DataFrame, kind: str) -> None:
    """InputError unless ``df`` has every column the analysis reads of a ``kind`` table (io.tables.ANALYSED_COLUMNS)."""
    check_columns(df, ANALYSED_COLUMNS[kind], f"{kind} table")


def with_role(df: pd.DataFrame, role: str) -> pd.DataFrame:
    """The rows of runs with this role."""
    check_columns(df, ("role",), "table")
    return df[df["role"] == role]


def without_role(df: pd.DataFrame, role: str) -> pd.DataFrame:
    check_columns(df, ("role",), "table")
    return df[df["role"] != role]


def final_rows(traj: pd.DataFrame) -> pd.DataFrame:
    """The last recorded row of each (run, seed): the end of training, or the last step before divergence."""
    return traj.sort_values("step").groupby(["run", "seed"], as_index=False).tail(1).sort_values(["run", "seed"])


def transfer_curves(transfer: pd.DataFrame, run: str, downstream: str, method: str):
    """(n grid, seeds, accuracy matrix seeds x n) of one method; failed fits are NaN."""
    require_columns(transfer, "transfer")
    g = transfer[(transfer["run"] == run) & (transfer["downstream"] == downstream) & (transfer["method"] == method)]
    dup = g.duplicated(["seed", "n"])
    if dup.any():
        r = g[dup].iloc[0]
        raise InputError(
            f"transfer table: run {run!r}, downstream {downstream!r}, method {method!r} has several rows "
            f"for seed {r['seed']}, n {r['n']} (tables from different configurations mixed?)"
        )
    acc = g["test_accuracy"].where(g["status"] == "ok")
    table = g.assign(acc=acc).pivot(index="seed", columns="n", values="acc").sort_index().sort_index(axis=1)
    return table.columns.to_numpy(dtype=float), table.index.to_numpy(), table.to_numpy(dtype=float)


def downstreams(transfer: pd.DataFrame, wanted: tuple[str, ...] | None) -> list[str]:
    """The downstream tasks to analyse (``None``: every one the table has)."""
    found = sorted(transfer["downstream"].astype(str).unique())
    if wanted is None:
        return found
    missing = [x for x in wanted if x not in found]
    if missing:
        raise InputError(f"transfer table: no downstream {missing[0]!r}; it has {', '.join(found)}")
    return list(wanted)


def few_sizes(grid: np.ndarray) -> tuple[int, ...]:
    """Smallest, middle and largest n of a grid (all of a grid of at most 3)."""
    if grid.size <= 3:
        return tuple(int(n) for n in grid)
    return tuple(int(n) for n in (grid[0], grid[grid.size // 2], grid[-1]))
