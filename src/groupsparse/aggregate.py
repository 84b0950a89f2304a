"""Concatenate per-job tables and summarise them with bootstrap intervals over seeds.

Rows whose status is not "ok" (diverged, failed, skipped) are counted separately and
never averaged into a mean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .seeding import numpy_generator

N_BOOT = 2000
TARGETS = (0.9, 0.95)


def bootstrap_ci(values, identity: tuple, level: float = 0.95, n_boot: int = N_BOOT,
                 stat=np.mean) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over ``values`` (seeded by ``identity``)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) == 1:
        return float(x[0]), float(x[0])
    rng = numpy_generator("bootstrap", *identity)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    stats = stat(x[idx], axis=1)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def n_to_reach(sizes, accuracy, target: float) -> float:
    """Smallest n at which the accuracy curve reaches ``target``, linear in log n between
    grid points; inf if never reached on the grid (censored), the first n if reached there."""
    sizes = np.asarray(sizes, dtype=float)
    acc = np.asarray(accuracy, dtype=float)
    order = np.argsort(sizes)
    sizes, acc = sizes[order], acc[order]
    above = np.nonzero(acc >= target)[0]
    if len(above) == 0:
        return float("inf")
    k = above[0]
    if k == 0:
        return float(sizes[0])
    a0, a1 = acc[k - 1], acc[k]
    t = (target - a0) / (a1 - a0) if a1 != a0 else 1.0
    return float(np.exp(np.log(sizes[k - 1]) + t * (np.log(sizes[k]) - np.log(sizes[k - 1]))))


def _with_run(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """Group keys led by the run (and data identity) columns present in ``df``."""
    return [k for k in ("run", "task_name") if k in df] + keys


def transfer_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (task_name, downstream, method, n): mean test accuracy over ok seeds with a 95% interval."""
    keys = _with_run(df, ["downstream", "method", "n"])
    rows = []
    for key, g in df.groupby(keys, sort=True):
        ok = g[g["status"] == "ok"]
        acc = ok["test_accuracy"].to_numpy(float)
        lo, hi = bootstrap_ci(acc, tuple(str(k) for k in key))
        rows.append(dict(zip(keys, key)) | {
            "mean_test_accuracy": float(np.mean(acc)) if len(acc) else float("nan"),
            "ci_low": lo, "ci_high": hi,
            "mean_test_loss": float(ok["test_loss"].mean()) if len(ok) else float("nan"),
            "mean_train_accuracy": float(ok["train_accuracy"].mean()) if len(ok) else float("nan"),
            "mean_fit_seconds": float(ok["fit_seconds"].mean()) if len(ok) else float("nan"),
            "n_seeds_ok": int(len(ok)),
            "n_seeds_not_ok": int(len(g) - len(ok)),
            "statuses_not_ok": ",".join(sorted(set(g.loc[g["status"] != "ok", "status"]))),
        })
    out = pd.DataFrame(rows)
    if len(out):
        out["n"] = out["n"].astype("int64")
    return out


def sample_complexity(df: pd.DataFrame, targets=TARGETS) -> pd.DataFrame:
    """Per (task_name, downstream, method, target): n needed, from the seed-mean curve,
    with a bootstrap interval that resamples seeds (inf = not reached on the grid)."""
    rows = []
    keys = _with_run(df, ["downstream", "method"])
    for key, g in df[df["status"] == "ok"].groupby(keys, sort=True):
        curves = g.pivot_table(index="seed", columns="n", values="test_accuracy")
        curves = curves.dropna(axis=0)  # seeds with every n
        sizes = curves.columns.to_numpy(float)
        mat = curves.to_numpy(float)
        for target in targets:
            point = n_to_reach(sizes, mat.mean(0), target) if len(mat) else float("nan")
            if len(mat) >= 2:
                rng = numpy_generator("bootstrap_n", *map(str, key), target)
                boot = [n_to_reach(sizes, mat[rng.integers(0, len(mat), len(mat))].mean(0), target)
                        for _ in range(500)]
                lo, hi = np.quantile(boot, [0.025, 0.975])
            else:
                lo = hi = point
            rows.append(dict(zip(keys, key)) | {
                "target_accuracy": target, "n_needed": point, "ci_low": float(lo), "ci_high": float(hi),
                "reached_on_grid": bool(np.isfinite(point)), "n_seeds": int(len(mat)),
                "max_n_on_grid": float(sizes.max()) if len(sizes) else float("nan")})
    return pd.DataFrame(rows)


FINAL_METRICS = ("eval_loss", "eval_accuracy", "attention_on_relevant", "cos_v1_vstar", "v1_norm", "v2_norm",
                 "W_ff_norm", "W_fp_norm", "W_pf_norm", "W_pp_norm")


def pretrain_summary(traj: pd.DataFrame) -> pd.DataFrame:
    """Per run: final metrics (mean and 95% interval over ok seeds) and the diverged count."""
    rows = []
    last = traj.sort_values("step").groupby(["run", "seed"], sort=True).tail(1)
    for run, g in last.groupby("run", sort=True):
        ok = g[g["status"] == "ok"]
        row = {"run": run, "task_name": g["task_name"].iloc[0], "d": int(g["d"].iloc[0]), "D": int(g["D"].iloc[0]),
               "final_step": int(ok["step"].max()) if len(ok) else -1,
               "n_seeds_ok": int(len(ok)), "n_seeds_diverged": int((g["status"] == "diverged").sum()),
               "wall_seconds": float(g["wall_seconds"].max()) if "wall_seconds" in g else float("nan")}
        for m in FINAL_METRICS:
            vals = ok[m].to_numpy(float)
            lo, hi = bootstrap_ci(vals, (run, m))
            row |= {f"{m}_mean": float(np.mean(vals)) if len(vals) else float("nan"),
                    f"{m}_ci_low": lo, f"{m}_ci_high": hi}
        rows.append(row)
    return pd.DataFrame(rows)
