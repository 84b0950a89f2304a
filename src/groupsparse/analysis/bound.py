"""The theorem's sufficient time with its constant, and the population limit (docs/STUDY.md section 3.4).

* kappa_c: T* = Theta(D^3) is an upper bound with a hidden constant. What the measured D can say
  about it is the constant it needs there: kappa_c = max over D of T_c(D) / D^3, T_c(D) the
  geometric mean over seeds of the steps until min_j S[j*, j] >= 1 - exp(-c D). Its interval is the
  t interval (k - 1 degrees of freedom) of the mean log steps at the level where the maximum is
  reached, divided by D^3 there (coverage: tests/unit/test_theorem_coverage.py).
* The population limit: the theorem is about population gradient descent; the batch check runs
  the grid's tasks at several batches, paired by seed. Per seed, a headline quantity (log steps to
  the theorem's target; log(1 - min attention) at kappa D^3) is fitted linearly in 1/batch and read
  at 1/batch = 0; the seeds' intercepts get the t interval (paired: the seed's own data in each).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .predict import rest_values
from .rows import claim_row
from .scaling_laws import MIN_ATTENTION, grid_rows
from .settings import Settings
from .stats import MIN_SEEDS, mean_interval


def _post_hoc(s: Settings) -> str:
    return " (c chosen after seeing data)" if s.target_c_post_hoc else " (c fixed before the data)"


def _batches(df: pd.DataFrame) -> str:
    """Which batch the numbers are at (the grid's own)."""
    if "batch" not in df.columns:
        return "batch not recorded"
    values = sorted({int(b) for b in df["batch"].dropna()})
    return f"at batch {', '.join(map(str, values))}"


def kappa_claims(crossings: pd.DataFrame, s: Settings) -> list[dict]:
    """Per d and c: kappa_c = max over D of T_c(D) / D^3, with an interval; a bound's wording."""
    rows = []
    if not len(crossings):
        return rows
    cr = grid_rows(crossings)
    cr = cr[(cr["quantity"] == MIN_ATTENTION) & (cr["role"] == "scaling")]
    for (d, c), g in cr.groupby(["d", "c"], sort=True):
        levels = []
        for D, h in g.groupby("D", sort=True):
            logs = np.log(h["step"].to_numpy(float)) - 3 * math.log(D)
            m, lo, hi = mean_interval(logs)
            levels.append((int(D), m, lo, hi, bool(h["censored"].any()), len(h)))
        censored = [f"D={D}" for D, *_, cens, _ in levels if cens]
        D_max = max(D for D, *_ in levels)
        top = max(levels, key=lambda L: L[1])
        D_top, m, lo, hi, _, k = top
        blocker = f"level(s) {', '.join(censored)} censored: kappa is at least their bound" if censored else ""
        blocker = blocker or (f"{k} seed(s) at D = {D_top}, need {MIN_SEEDS}" if k < MIN_SEEDS else "")
        ratios = ", ".join(f"D={D}: {math.exp(v):.3g}" for D, v, *_ in levels)
        batch = _batches(g)
        still = (
            f"; the largest ratio is at the largest D ({D_top}): the constant may still grow with D"
            if D_top == D_max
            else f"; largest at D = {D_top}, below it at D = {D_max}"
        )
        row = _descriptive_log_row(
            f"min attention reaches 1 - exp(-{c:g} D) within kappa D^3 steps for every D <= {D_max} (d = {d})"
            + _post_hoc(s),
            "T* = Theta(D^3): a sufficient time with a hidden constant; the measured D give the constant they need",
            (m, lo, hi),
            blocker,
            f"d = {d}, c = {c:g}{_post_hoc(s)}, {batch}; T_c(D) / D^3 (geometric mean over seeds) per level: {ratios}; "
            f"interval: the seeds' t interval at D = {D_top}",
            "bound_constant",
            int(sum(L[-1] for L in levels)),
            {"d": int(d)},
        )
        row["why"] = blocker or (
            f"reached within kappa D^3 steps for every D <= {D_max}, kappa = {math.exp(m):.3g} "
            f"[{math.exp(lo):.3g}, {math.exp(hi):.3g}]{still}"
        )
        rows.append(row)
    return rows


def infinite_batch(inv_batch: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Per row of Y (seeds x batches): the intercept of the least-squares line of Y on 1/batch."""
    x = np.asarray(inv_batch, dtype=float)
    xc = x - x.mean()
    slope = (Y - Y.mean(axis=-1, keepdims=True)) @ xc / (xc @ xc)
    return Y.mean(axis=-1) - slope * x.mean()


def _batch_quantities(traj: pd.DataFrame, crossings: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """Per (d, D, batch, seed): the headline quantities, long format (quantity, value, censored)."""
    frames = []
    scaled = traj[(traj["role"] == "scaling")]
    batch_runs = scaled[scaled["variant"].fillna("").astype(str).str.match(r"^(batch\d+)?$")]
    if "batch" not in batch_runs.columns:
        return pd.DataFrame()
    for (variant, batch), g in batch_runs.groupby(["variant", "batch"], sort=True):
        v = rest_values(g.assign(variant=""), s.kappas)
        v = v.assign(batch=int(batch), quantity=[f"1 - min attention at {k:g} D^3 steps" for k in v["kappa"]])
        v = v.assign(value=v["log_rest"], censored=~np.isfinite(v["log_rest"]), grid=not str(variant))
        frames.append(v[["d", "D", "batch", "seed", "quantity", "value", "censored", "grid"]])
    if len(crossings):
        cr = crossings[(crossings["role"] == "scaling") & (crossings["quantity"] == MIN_ATTENTION)]
        cr = cr[cr["variant"].fillna("").astype(str).str.match(r"^(batch\d+)?$")]
        frames.append(
            pd.DataFrame(
                {
                    "d": cr["d"],
                    "D": cr["D"],
                    "batch": cr["batch"],
                    "seed": cr["seed"],
                    "quantity": [f"steps until min attention >= 1 - exp(-{c:g} D)" for c in cr["c"]],
                    "value": np.log(cr["step"].to_numpy(float)),
                    "censored": cr["censored"].to_numpy(bool),
                    "grid": (cr["variant"].fillna("").astype(str) == "").to_numpy(bool),
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def population_limits(traj: pd.DataFrame, crossings: pd.DataFrame, s: Settings) -> list[dict]:
    """At every (d, D) with 3+ batches, per headline quantity: the batches used and left out, each
    batch's geometric mean, and the limit at batch -> infinity (log scale, paired by seed), or why
    there is none (``blocked``)."""
    out = []
    q = _batch_quantities(traj, crossings, s)
    if not len(q):
        return out
    # A batch at which some seed never reaches the theorem's smallest target (or diverges) is not
    # an approximation of population GD but a different dynamics (at D >= 24, eta = 0.5, small
    # batches blow up): the extrapolation leaves it out, and says so.
    first = f"steps until min attention >= 1 - exp(-{min(s.target_c):g} D)"
    failed = q[(q["quantity"] == first) & q["censored"]][["d", "D", "batch"]]
    scaled = traj[(traj["role"] == "scaling") & traj["variant"].fillna("").astype(str).str.match(r"^(batch\d+)?$")]
    if "status" in scaled.columns and "batch" in scaled.columns:
        failed = pd.concat([failed, scaled.loc[scaled["status"] == "diverged", ["d", "D", "batch"]]])
    unstable = {(int(d), int(D)): sorted({int(b) for b in h["batch"]}) for (d, D), h in failed.groupby(["d", "D"])}
    for (d, D, what), g in q.groupby(["d", "D", "quantity"], sort=True):
        left_out = unstable.get((int(d), int(D)), [])
        if len(g["batch"].unique()) < 3:
            continue
        g = g[~g["batch"].isin(left_out)]
        batches = sorted(g["batch"].unique())
        grid_batches = sorted({int(b) for b in g.loc[g["grid"].astype(bool), "batch"]})
        item = {"d": int(d), "D": int(D), "quantity": what, "batches": batches, "left_out": left_out}
        if len(batches) < 3:
            out.append(item | {"blocked": "fewer than 3 usable batches"})
            continue
        wide = g.pivot(index="seed", columns="batch", values="value").reindex(columns=batches).dropna()
        cens = bool(g["censored"].any())
        if cens or len(wide) < 2:
            out.append(item | {"blocked": "censored seeds" if cens else f"{len(wide)} seed(s) with every batch"})
            continue
        Y = wide[batches].to_numpy(float)
        grid_b = grid_batches[0] if grid_batches else max(batches)
        item |= {
            "blocked": "",
            "limit": mean_interval(infinite_batch(1.0 / np.asarray(batches, float), Y)),
            "grid_batch": grid_b,
            "diff": mean_interval(Y[:, batches.index(grid_b)] - infinite_batch(1.0 / np.asarray(batches, float), Y)),
            "log_means": {int(b): float(np.mean(wide[b])) for b in batches},
            "n": int(len(wide)),
        }
        out.append(item)
    return out


def population_claims(traj: pd.DataFrame, crossings: pd.DataFrame, s: Settings) -> list[dict]:
    """At every (d, D) with 3+ batches: each headline quantity at batch -> infinity, paired by seed."""
    rows = []
    for item in population_limits(traj, crossings, s):
        d, D, what, batches, left_out = (item[k] for k in ("d", "D", "quantity", "batches", "left_out"))
        note = (
            f"; batches {', '.join(map(str, left_out))} left out (a seed never reached 1 - exp(-{min(s.target_c):g} D)"
            " or diverged there)"
            if left_out
            else ""
        )
        if item["blocked"]:
            why = item["blocked"] + (note if item["blocked"].startswith("fewer") else "")
            rows.append(_blocked_row(what, d, D, batches, why))
            continue
        (m, lo, hi), diff, grid_b, means = item["limit"], item["diff"], item["grid_batch"], item["log_means"]
        per_batch = "; ".join(f"batch {b}: {math.exp(means[b]):.4g}" for b in batches)
        row = _descriptive_log_row(
            f"{what} at batch -> infinity (population gradient descent; d = {d}, D = {D})",
            "the theorem is about population gradient descent; a batch only approximates it",
            (m, lo, hi),
            "",
            f"d = {d}, D = {D}; per seed, log value linear in 1/batch over batches {', '.join(map(str, batches))}, "
            f"read at 1/batch = 0; t interval over {item['n']} seeds (paired: each seed's own line); geometric means "
            f"{per_batch}; batch {grid_b} minus the limit (log): {diff[0]:.3g} [{diff[1]:.3g}, {diff[2]:.3g}]{note}",
            "population_limit",
            item["n"],
            {"d": d, "D": D},
        )
        row["why"] = (
            f"at batch -> infinity {math.exp(m):.4g} [{math.exp(lo):.4g}, {math.exp(hi):.4g}]; at batch {grid_b} "
            f"{math.exp(means[grid_b]):.4g}"
        )
        rows.append(row)
    return rows


def _descriptive_log_row(claim, theory, log_interval, blocker, config, analysis, n, settings) -> dict:
    """A claims row for a quantity estimated on the log scale (a constant, a limit): the interval back
    on the natural scale, verdict "descriptive" (no prediction to test), or "inconclusive" if blocked."""
    m, lo, hi = (math.exp(v) if np.isfinite(v) else math.nan for v in log_interval)
    row = claim_row(claim, theory, None, m, lo, hi, blocker, config, analysis, n, settings=settings)
    row["verdict"] = "inconclusive" if blocker else "descriptive"
    return row


def _blocked_row(what: str, d: int, D: int, batches: list[int], why: str) -> dict:
    row = claim_row(
        f"{what} at batch -> infinity (population gradient descent; d = {d}, D = {D})",
        "the theorem is about population gradient descent; a batch only approximates it",
        None,
        math.nan,
        math.nan,
        math.nan,
        why,
        f"d = {d}, D = {D}; batches {', '.join(map(str, batches))}",
        "population_limit",
        0,
        settings={"d": d, "D": D},
    )
    row["verdict"], row["why"] = "inconclusive", why
    return row
