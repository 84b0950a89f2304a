"""Attention concentration at flow time kappa D^3 (docs/STUDY.md section 3.4): its curvature in D.

1 - min over queries of S[j*, j] at gradient-flow time tau = eta x steps = kappa D^3, fitted against D
(exp(-c D)) and against log D (a power law) through the same level statistics, compared by their
residual sums of squares with an interval from one bootstrap over seeds: a description of the
measured range. The law at larger D is the out-of-sample test (:mod:`.predict`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .fits import Fit, fit_levels, mean_stat, ols
from .scaling_laws import ATTENTION_RESOLUTION, FLOW_RESOLUTION, MIN_ATTENTION, FitRecord, flow_times, grid_rows
from .settings import Settings
from .stats import bootstrap_generator, t_interval


def rss(fit: Fit) -> float:
    """Residual sum of squares of a fitted line through its used level statistics."""
    xs, ys = fit.x[fit.used], fit.y[fit.used]
    return float(((ys - fit.intercept - fit.slope * xs) ** 2).sum()) if xs.size else math.nan


def boot_rss(fit: Fit, x: np.ndarray | None = None) -> np.ndarray:
    """RSS of each bootstrap resample's own line, against the fit's x or another ``x`` for the same
    levels (the same resamples then compare two laws)."""
    xs = fit.x[fit.used] if x is None else np.asarray(x, dtype=float)[fit.used]
    if not fit.boot_y.size:
        return np.empty(0)
    slope, intercept = ols(xs, fit.boot_y)
    return ((fit.boot_y - intercept[:, None] - slope[:, None] * xs[None]) ** 2).sum(axis=1)


def rest_at(c: pd.DataFrame, column: str, tau: float) -> tuple[float, str]:
    """(1 - value of ``column`` at flow time ``tau`` by log-log interpolation, why censored or '');
    ``c``: one seed's rows in step order."""
    if (c["status"] != "ok").any():
        return math.nan, "diverged"
    taus = flow_times(c)
    if tau > taus[-1]:
        return math.nan, f"flow time {tau:g} beyond the run's last {taus[-1]:g}"
    rest = _interp_log(taus, 1 - c[column].to_numpy(float), tau)
    if not np.isfinite(rest):
        return math.nan, "not recorded"
    flow = "algorithm" in c.columns and (c["algorithm"] == "flow").all()  # float64 throughout
    if rest < (FLOW_RESOLUTION if flow else ATTENTION_RESOLUTION):
        return math.nan, "below float64 resolution" if flow else "below float32 resolution"
    return rest, ""


def concentration_fits(traj: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """1 - min over queries of S[j*, j] at flow time kappa D^3, against D: exponential vs power law.

    For each d and kappa two lines through the same level statistics (the seeds' mean of
    log(1 - min attention)): the theorem's exponential law (against D) and a power law (against
    log D). Both have two parameters, so their residual sums of squares compare them directly (AIC
    would rank them the same way); :func:`law_comparison` turns the difference into a claim with an
    interval from the same bootstrap over seeds. Tables without the minimum (older runs) fall back
    to the mean over queries, and say so in the label.
    """
    records = []
    traj = grid_rows(traj)
    column = MIN_ATTENTION if MIN_ATTENTION in traj.columns else "attention_on_relevant"
    what = "min" if column == MIN_ATTENTION else "mean"
    for d, g in traj.groupby("d", sort=True):
        levels = sorted(g["D"].unique())
        for kappa in s.kappas:
            stats, seeds, pts = [], [], []
            for D in levels:
                tau = float(kappa) * D**3
                vals, cens = [], []
                for seed, c in g[g["D"] == D].sort_values("step").groupby("seed", sort=True):
                    rest, why = rest_at(c.drop_duplicates("step", keep="last"), column, tau)
                    vals.append(math.log(rest) if not why else math.nan)
                    cens.append(bool(why))
                    pts.append(
                        {
                            "level": D,
                            "x": float(D),
                            "y": vals[-1],
                            "censored": cens[-1],
                            "seed": int(seed),
                            "reason": why,
                            "flow_time": tau,
                        }
                    )
                stats.append(mean_stat(np.asarray(vals), np.asarray(cens)))
                seeds.append(len(vals))
            names = [f"D={D}" for D in levels]
            pts = pd.DataFrame(pts)
            for law, x in (("exponential", np.asarray(levels, float)), ("power", np.log(levels))):
                rng = bootstrap_generator(s.study_seed, "attention_concentration", int(d), float(kappa))
                fit = fit_levels(x, stats, seeds, n_boot=s.n_boot, rng=rng, names=names)
                records.append(
                    FitRecord(
                        "attention_concentration",
                        f"1 - {what} attention at flow time {kappa:g} D^3, {law} law",
                        {"d": int(d), "at": f"{kappa:g} D^3", "kappa": float(kappa), "law": law},
                        "D" if law == "exponential" else "log D",
                        f"log(1 - {what} attention)",
                        fit,
                        pts.assign(x=pts["x"] if law == "exponential" else np.log(pts["x"])),
                        descriptive=True,
                    )
                )
    return records


def law_comparison(records: list[FitRecord]) -> list[dict]:
    """Per (d, kappa): exponential vs power law of 1 - min attention in D (rows for the claims).

    Criterion: delta = RSS(power) - RSS(exponential) of the two lines through the same level means
    of log(1 - min attention) (equal parameter counts: RSS ranks them as AIC would), with a t
    interval from the same bootstrap resamples over seeds. 'exponential' if the interval lies above
    0, 'power law' if below, else 'undecided'; plus the exponential fit's slope (decay if < 0).
    """
    by = {}
    for r in records:
        if r.analysis == "attention_concentration":
            by.setdefault((r.group["d"], r.group["at"], r.group["kappa"]), {})[r.group["law"]] = r
    out = []
    for (d, at, kappa), laws in sorted(by.items()):
        exp_, pow_ = laws.get("exponential"), laws.get("power")
        if exp_ is None or pow_ is None:
            continue
        fe = exp_.fit
        delta = rss(pow_.fit) - rss(fe)
        boot = boot_rss(fe, np.log(fe.x)) - boot_rss(fe)
        k = int(fe.seeds[fe.used].min()) if fe.used.any() else 0
        low, high = t_interval(delta, boot, max(k - 1, 0)) if boot.size else (math.nan, math.nan)
        decision = (
            "exponential"
            if np.isfinite(low) and low > 0
            else "power law"
            if np.isfinite(high) and high < 0
            else "undecided"
        )
        out.append(
            {
                "d": d,
                "at": at,
                "kappa": kappa,
                "delta_rss": delta,
                "low": low,
                "high": high,
                "rss_exponential": rss(fe),
                "rss_power": rss(pow_.fit),
                "decision": decision,
                "exp_slope": fe.slope,
                "exp_low": fe.low,
                "exp_high": fe.high,
                "power_slope": pow_.fit.slope,
                "power_low": pow_.fit.low,
                "power_high": pow_.fit.high,
                "blocker": fe.blocker(),
                "fit": fe,
                "label": exp_.y_name,
            }
        )
    return out


def _interp_log(steps: np.ndarray, values: np.ndarray, at: float) -> float:
    """log-log interpolation of a positive curve at time ``at`` (NaN outside the recorded range)."""
    if at < steps[0] or at > steps[-1]:
        return math.nan
    pos = steps > 0
    if not pos.any() or at <= steps[pos][0]:  # before the first positive step: linear from the start
        return float(np.interp(at, steps, values))
    with np.errstate(divide="ignore"):
        return float(np.exp(np.interp(np.log(at), np.log(steps[pos]), np.log(np.clip(values[pos], 1e-300, None)))))
