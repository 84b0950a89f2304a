"""Summaries of the aggregated tables: per run, means over ok seeds with the study's one interval.

Rows whose status is not "ok" (diverged, failed, skipped) are counted separately and never
averaged into a mean. Intervals: :func:`.stats.mean_interval` (t interval over seeds, clipped to
the metric's range); samples needed: :func:`.stats.n_star` on the seed-mean curve with a
bootstrap-t interval in log n (:func:`.fits.mean_curve_crossing`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..config.seeding import numpy_generator
from ..io.tables import FINAL_METRICS
from .fits import mean_curve_crossing
from .stats import METRIC_RANGES, mean_interval, n_star, t_interval, widen

N_BOOT = 2000
TARGETS = (0.9, 0.95)


def _with_run(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """Group keys led by the run, its role, variant and varied settings, and data identity columns in ``df``."""
    return [k for k in ("run", "role", "variant", "d", "D", "task_name") if k in df] + keys


def _mean(frame: pd.DataFrame, col: str) -> float:
    return float(frame[col].mean()) if len(frame) else math.nan


# The paper model's read-out alignment per n (transfer.fitting.READOUT_COLUMNS): the fitted v1's cos with the
# downstream v* and with the pretraining v*, seed means with their interval; over the n grid, how far fine-tuning
# has turned v1 from the old direction to the new one (the protocol's mechanism, docs/STUDY.md section 4.6).
ALIGNMENT = ("cos_v1_new", "cos_v1_old")


def _alignment(ok: pd.DataFrame) -> dict:
    """{mean_<col>, <col>_ci_low, <col>_ci_high} for each ALIGNMENT column (NaN where the method has none)."""
    out = {}
    for col in ALIGNMENT:
        mean, lo, hi = mean_interval(ok[col].to_numpy(float) if col in ok else [], (-1.0, 1.0))
        out |= {f"mean_{col}": mean, f"{col}_ci_low": lo, f"{col}_ci_high": hi}
    return out


def transfer_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (run, downstream, method, n): mean test accuracy over ok seeds with a 95% interval, and the paper
    model's read-out alignment (:data:`ALIGNMENT`; NaN for the other methods)."""
    keys = _with_run(df, ["downstream", "method", "n"])
    rows = []
    for key, g in df.groupby(keys, sort=True):
        ok = g[g["status"] == "ok"]
        mean, lo, hi = mean_interval(ok["test_accuracy"].to_numpy(float), METRIC_RANGES["test_accuracy"])
        rows.append(
            dict(zip(keys, key))
            | {
                "mean_test_accuracy": mean,
                "ci_low": lo,
                "ci_high": hi,
                "mean_test_loss": _mean(ok, "test_loss"),
                "mean_train_accuracy": _mean(ok, "train_accuracy"),
                "mean_fit_seconds": _mean(ok, "fit_seconds"),
                "n_seeds_ok": int(len(ok)),
                "n_seeds_not_ok": int(len(g) - len(ok)),
                "statuses_not_ok": ",".join(sorted(set(g.loc[g["status"] != "ok", "status"]))),
            }
            | _alignment(ok)
        )
    out = pd.DataFrame(rows)
    if len(out):
        out["n"] = out["n"].astype("int64")
    return out


def n_needed_interval(sizes: np.ndarray, curves: np.ndarray, target: float, identity: tuple) -> tuple[float, float]:
    """Interval of n* of the seed-mean curve: bootstrap-t over seeds in log n.

    The high end is inf when some resample never reaches the target on the grid; the low end is 0
    when some resample reaches it already at the first n (only an upper bound is known there).
    """
    k = len(curves)
    if k < 2:
        return math.nan, math.nan
    rng = numpy_generator("bootstrap_n", *identity)
    idx = np.vstack([np.arange(k)[None], rng.integers(0, k, size=(N_BOOT, k))])
    logn, above, below = mean_curve_crossing(sizes, curves, target)(idx)
    if above[0]:
        return math.nan, math.inf
    lo, hi = t_interval(float(logn[0]), widen(logn[0], logn[1:], k), k - 1)
    lo, hi = math.exp(lo), math.exp(hi)
    return (0.0 if below.any() else lo), (math.inf if above.any() else hi)


def sample_complexity(df: pd.DataFrame, targets=TARGETS) -> pd.DataFrame:
    """Per (run, downstream, method, target): n needed, from the seed-mean curve,
    with an interval that resamples seeds (inf = not reached on the grid)."""
    rows = []
    keys = _with_run(df, ["downstream", "method"])
    for key, g in df[df["status"] == "ok"].groupby(keys, sort=True):
        curves = g.pivot_table(index="seed", columns="n", values="test_accuracy")
        curves = curves.dropna(axis=0)  # seeds with every n
        sizes = curves.columns.to_numpy(float)
        mat = curves.to_numpy(float)
        for target in targets:
            point = n_star(sizes, mat.mean(0), target) if len(mat) else math.nan
            lo, hi = n_needed_interval(sizes, mat, target, (*map(str, key), target))
            rows.append(
                dict(zip(keys, key))
                | {
                    "target_accuracy": target,
                    "n_needed": point,
                    "ci_low": float(lo),
                    "ci_high": float(hi),
                    "reached_on_grid": bool(np.isfinite(point)),
                    "n_seeds": int(len(mat)),
                    "max_n_on_grid": float(sizes.max()) if len(sizes) else math.nan,
                }
            )
    return pd.DataFrame(rows)


def pretrain_summary(traj: pd.DataFrame) -> pd.DataFrame:
    """Per run: final metrics (mean and 95% interval over ok seeds) and the diverged count."""
    rows = []
    last = traj.sort_values("step").groupby(["run", "seed"], sort=True).tail(1)
    for run, g in last.groupby("run", sort=True):
        ok = g[g["status"] == "ok"]
        row = {"run": run}
        row |= {k: g[k].iloc[0] for k in ("role", "variant") if k in g}
        row |= {
            "task_name": g["task_name"].iloc[0],
            "d": int(g["d"].iloc[0]),
            "D": int(g["D"].iloc[0]),
            "final_step": int(ok["step"].max()) if len(ok) else -1,
            "n_seeds_ok": int(len(ok)),
            "n_seeds_diverged": int((g["status"] == "diverged").sum()),
            "wall_seconds": float(g["wall_seconds"].max()) if "wall_seconds" in g else math.nan,
        }
        for m in FINAL_METRICS:
            if m not in ok:  # a table that lacks the column (an older job's)
                continue
            mean, lo, hi = mean_interval(ok[m].to_numpy(float), METRIC_RANGES[m])
            row |= {f"{m}_mean": mean, f"{m}_ci_low": lo, f"{m}_ci_high": hi}
        rows.append(row)
    return pd.DataFrame(rows)
