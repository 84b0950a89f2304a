"""Ablations (docs/STUDY.md section 4): each variant's final metrics and transfer accuracy beside the baseline."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..io.files import InputError
from .inputs import (
    PRETRAINED_METHOD,
    downstreams,
    few_sizes,
    final_rows,
    require_columns,
    transfer_curves,
    with_role,
)
from .stats import METRIC_RANGES, difference_interval, mean_interval

ABLATION_METHODS = (PRETRAINED_METHOD,)  # the method the ablation table compares across variants
FINAL_METRICS = ("attention_on_relevant", "eval_loss", "eval_accuracy", "cos_v1_vstar")


def ablation_table(traj: pd.DataFrame, transfer: pd.DataFrame | None, s) -> pd.DataFrame:
    """Each ablation's final metrics and transfer accuracy at a few n, beside the baseline run.

    Columns: run, role, ablation (the variant's name), metric, method, n, mean, low, high, n_seeds,
    n_diverged, baseline_mean, delta, delta_low, delta_high (delta = ablation - baseline, Welch's t
    interval; intervals clipped to the metric's range). ``s``: the analysis' :class:`.settings.Settings`.
    """
    cols = [
        "run",
        "role",
        "ablation",
        "metric",
        "method",
        "n",
        "mean",
        "low",
        "high",
        "n_seeds",
        "n_diverged",
        "baseline_mean",
        "delta",
        "delta_low",
        "delta_high",
    ]
    ablations = with_role(traj, "ablation")
    runs = sorted(ablations["run"].astype(str).unique())
    if not runs:
        return pd.DataFrame(columns=cols)
    if s.baseline not in runs and s.baseline not in set(traj["run"]):
        raise InputError(
            f"ablations: baseline run {s.baseline!r} is not among the trajectory tables' runs "
            f"({', '.join(sorted(map(str, traj['run'].unique())))})"
        )
    last = final_rows(traj)
    variant = {r: (v or r) for r, v in zip(last["run"], last["variant"] if "variant" in last else last["run"])}
    role = dict(zip(last["run"], last["role"]))
    samples: dict[tuple, tuple[np.ndarray, int]] = {}
    for run in [s.baseline] + [r for r in runs if r != s.baseline]:
        g = last[last["run"] == run]
        ok = g[g["status"] == "ok"]
        for metric in FINAL_METRICS:
            samples[(run, metric, "", -1)] = (ok[metric].to_numpy(float), len(g) - len(ok))
    if transfer is not None and len(transfer):
        require_columns(transfer, "transfer")
        downstream = downstreams(transfer, s.downstream)[0]
        base_grid = transfer[(transfer["run"] == s.baseline)]["n"].unique()
        sizes = s.ablation_sizes or few_sizes(np.sort(base_grid))
        for run in [s.baseline] + [r for r in runs if r != s.baseline]:
            for method in ABLATION_METHODS:
                grid, seed_ids, curves = transfer_curves(transfer, run, downstream, method)
                for n in sizes:
                    vals = curves[:, list(grid).index(n)] if n in grid else np.empty(0)
                    samples[(run, "test_accuracy", method, int(n))] = (vals, int(np.isnan(vals).sum()))
    rows = []
    for (run, metric, method, n), (vals, n_bad) in samples.items():
        bounds = METRIC_RANGES[metric]
        m, lo, hi = mean_interval(vals, bounds)
        base_vals = samples.get((s.baseline, metric, method, n), (np.empty(0), 0))[0]
        base_vals = base_vals[np.isfinite(base_vals)]
        va = vals[np.isfinite(vals)]
        if va.size and base_vals.size:
            delta, dlo, dhi = difference_interval(va, base_vals, bounds)
            bmean = float(base_vals.mean())
        else:
            delta = dlo = dhi = bmean = math.nan
        rows.append(
            {
                "run": run,
                "role": role.get(run, ""),
                "ablation": variant.get(run, run),
                "metric": metric,
                "method": method,
                "n": n,
                "mean": m,
                "low": lo,
                "high": hi,
                "n_seeds": int(va.size),
                "n_diverged": int(n_bad),
                "baseline_mean": bmean,
                "delta": delta,
                "delta_low": float(dlo),
                "delta_high": float(dhi),
            }
        )
    return pd.DataFrame(rows, columns=cols)
