"""Scaling laws (STUDY.md sections 3 and 4): convergence time, attention concentration, sample complexity.

* convergence time: the first step at which a seed's attention mass on j* reaches
  0.5 / 0.9 / 0.99 (or its eval loss falls under a target), fitted as log T against log D;
* sample complexity: the smallest n at which a method's seed-mean test accuracy reaches a
  target, fitted as log n* against log(d + D) and log(d * D);
* attention concentration: log(1 - attention mass) against D.

Censored data are kept, not dropped: a seed that never reaches a threshold is recorded with
its last step as a lower bound and ``censored = True``; a fit level with censored data is left
out of that fit and the fit's verdict becomes "inconclusive" (leaving it out would bias the
slope, putting the bound in would too). The statistics live in :mod:`.stats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .inputs import (
    BASELINE_METHOD,
    PRETRAINED_METHOD,
    PRETRAINED_METHODS,
    TRAJECTORY_COLUMNS,
    check_columns,
    downstreams,
    transfer_curves,
    with_role,
)
from .stats import (
    CONFIDENCE,
    EXPONENT_TOLERANCE,
    Fit,
    Prediction,
    bootstrap_generator,
    curve_crossing_stat,
    first_crossing,
    fit_levels,
    fmt_values,
    mean_stat,
)

ATTENTION_RESOLUTION = 1e-6  # 1 - mass below this is under float32 resolution: censored


def crossing_times(traj: pd.DataFrame, thresholds=(0.5, 0.9, 0.99), loss_target: float | None = None) -> pd.DataFrame:
    """Per (run, seed): steps until attention on j* reaches each threshold, and eval loss <= target.

    Columns: run, d, D, seed, quantity, threshold, step, censored, reason, last_step.
    A censored step is the last recorded step, a lower bound; reason says why ("not reached
    within the budget" or "diverged at step s").
    """
    check_columns(traj, TRAJECTORY_COLUMNS, "trajectory table")
    goals = [("attention_on_relevant", float(t), "up") for t in thresholds]
    if loss_target is not None:
        goals.append(("eval_loss", float(loss_target), "down"))
    out = []
    for (run, seed), g in traj.sort_values("step").groupby(["run", "seed"], sort=True):
        g = g.drop_duplicates("step", keep="last")
        steps = g["step"].to_numpy(dtype=float)
        diverged = (g["status"] != "ok").any()
        div_step = int(g["diverged_step"].iloc[-1]) if "diverged_step" in g.columns else -1
        for quantity, thr, direction in goals:
            t, reached = first_crossing(steps, g[quantity].to_numpy(dtype=float)[None], thr, direction=direction)
            at_start = bool(reached[0]) and t[0] <= steps[0]  # reached before any measurement: only an upper bound
            reason = (
                "" if reached[0] else f"diverged at step {div_step}" if diverged else "not reached within the budget"
            )
            reason = f"already reached at the first recorded step {steps[0]:g}" if at_start else reason
            out.append(
                {
                    "run": run,
                    "role": str(g["role"].iloc[0]),
                    "d": int(g["d"].iloc[0]),
                    "D": int(g["D"].iloc[0]),
                    "seed": int(seed),
                    "quantity": quantity,
                    "threshold": thr,
                    "step": float(t[0]),
                    "censored": not bool(reached[0]) or at_start,
                    "reason": reason,
                    "last_step": float(steps[-1]),
                }
            )
    return pd.DataFrame(
        out,
        columns=["run", "role", "d", "D", "seed", "quantity", "threshold", "step", "censored", "reason", "last_step"],
    )


@dataclass
class FitRecord:
    """One fitted relation, what it is about, and the observations behind it."""

    analysis: str  # convergence_time | sample_complexity | attention_concentration
    label: str  # e.g. "attention >= 0.9", "accuracy >= 0.8"
    group: dict  # fixed settings: d, method, downstream, target...
    x_name: str  # e.g. "log D"
    y_name: str  # e.g. "log steps"
    fit: Fit
    points: pd.DataFrame  # per seed (or per level) observations: x, y, censored, level
    prediction: Prediction | None = None
    claim: str = ""
    theory: str = ""

    def row(self) -> dict:
        f = self.fit
        return {
            "role": "scaling",
            "analysis": self.analysis,
            "label": self.label,
            **{k: self.group.get(k) for k in GROUP_KEYS},
            "x": self.x_name,
            "y": self.y_name,
            "slope": f.slope,
            "intercept": f.intercept,
            "low": f.low,
            "high": f.high,
            "confidence": CONFIDENCE,
            "r2": f.r2,
            "local_slopes": fmt_values(np.round(f.local_slopes(), 4)),
            "n_levels": f.n_levels,
            "n_levels_censored": int(f.censored.sum()),
            "levels": "; ".join(f.names),
            "seeds_min": int(f.seeds.min()) if f.seeds.size else 0,
            "bootstrap": int(f.boot_slope.size),
            "bootstrap_valid": f.valid_fraction,
            "usable": f.blocker() == "",
            "blocker": f.blocker(),
        }


GROUP_KEYS = ("d", "D", "method", "downstream", "quantity", "threshold", "at")


@dataclass(frozen=True)
class Settings:
    thresholds: tuple[float, ...] = (0.5, 0.9, 0.99)
    loss_target: float | None = 0.3
    accuracy_targets: tuple[float, ...] = (0.8, 0.9)
    methods: tuple[str, ...] = (PRETRAINED_METHOD, BASELINE_METHOD)
    downstream: tuple[str, ...] | None = ("transfer",)  # None: every downstream (incl. negative_control)
    near_one: float = 0.9  # "near 1" for final attention and cos(v1, v*)
    baseline: str = "ablation_none"
    ablation_sizes: tuple[int, ...] | None = None  # None: smallest, middle and largest n of the grid
    ablation_methods: tuple[str, ...] = (PRETRAINED_METHOD,)
    n_boot: int = 2000
    study_seed: int = 0


def convergence_time_fits(crossings: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """log T against log D at fixed d, per quantity and threshold; beside the theory's D^3."""
    records = []
    for (d, quantity, thr), g in crossings.groupby(["d", "quantity", "threshold"], sort=True):
        levels = sorted(g["D"].unique())
        stats, seeds = [], []
        for D in levels:
            h = g[g["D"] == D].sort_values("seed")
            stats.append(mean_stat(np.log(h["step"].clip(lower=1e-12)), h["censored"]))
            seeds.append(len(h))
        rng = bootstrap_generator(s.study_seed, "convergence_time", int(d), quantity, float(thr))
        fit = fit_levels(np.log(levels), stats, seeds, n_boot=s.n_boot, rng=rng, names=[f"D={D}" for D in levels])
        what = f"attention on j* >= {thr:g}" if quantity == "attention_on_relevant" else f"eval loss <= {thr:g}"
        g = g.sort_values(["D", "seed"])
        points = pd.DataFrame(
            {
                "level": g["D"],
                "x": np.log(g["D"].astype(float)),
                "y": np.log(g["step"].clip(lower=1e-12)),
                "censored": g["censored"],
                "seed": g["seed"],
                "reason": g["reason"],
            }
        )
        records.append(
            FitRecord(
                "convergence_time",
                what,
                {"d": int(d), "quantity": quantity, "threshold": float(thr)},
                "log D",
                "log steps",
                fit,
                points,
                Prediction("equal", 3.0, EXPONENT_TOLERANCE),
                claim=f"steps until {what} grow like D^3 (d = {d})",
                theory="T* = Theta(D^3): slope of log T on log D = 3",
            )
        )
    return records


def concentration_fits(traj: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """log(1 - attention mass on j*) against D at fixed d (theory: 1 - mass <= exp(-Theta(D))).

    Measured twice: at the end of each run, and at steps proportional to the theory's T* ~ D^3
    (step t_max (D / D_max)^3, t_max the shortest run's last step), since GD keeps sharpening
    attention and a fixed budget favours small D. Only the latter is a claim.
    """
    records = []
    for d, g in traj.groupby("d", sort=True):
        levels = sorted(g["D"].unique())
        t_max = float(g.groupby("run")["step"].max().min())
        for at in ("final", "D^3-scaled step"):
            stats, seeds, pts = [], [], []
            for D in levels:
                h = g[g["D"] == D]
                vals, cens, seed_ids = [], [], []
                for seed, c in h.sort_values("step").groupby("seed", sort=True):
                    c = c.drop_duplicates("step", keep="last")
                    ok = (c["status"] == "ok").all()
                    if at == "final":
                        step = float(c["step"].iloc[-1]) if ok else math.nan
                        rest = float(1 - c["attention_on_relevant"].iloc[-1])
                    else:
                        step = t_max * (D / levels[-1]) ** 3
                        rest = (
                            _interp_log(c["step"].to_numpy(float), 1 - c["attention_on_relevant"].to_numpy(float), step)
                            if ok
                            else math.nan
                        )
                    below = np.isfinite(rest) and rest < ATTENTION_RESOLUTION
                    vals.append(np.log(max(rest, ATTENTION_RESOLUTION)) if np.isfinite(rest) else np.nan)
                    cens.append(bool(below or not ok or not np.isfinite(rest)))
                    seed_ids.append(int(seed))
                    pts.append(
                        {
                            "level": D,
                            "x": float(D),
                            "y": vals[-1],
                            "censored": cens[-1],
                            "seed": int(seed),
                            "reason": "diverged" if not ok else ("below float32 resolution" if below else ""),
                            "step": step,
                        }
                    )
                stats.append(mean_stat(np.asarray(vals), np.asarray(cens)))
                seeds.append(len(vals))
            rng = bootstrap_generator(s.study_seed, "attention_concentration", int(d), at)
            fit = fit_levels(
                np.asarray(levels, dtype=float),
                stats,
                seeds,
                n_boot=s.n_boot,
                rng=rng,
                names=[f"D={D}" for D in levels],
            )
            claim = (
                f"1 - attention mass on j* falls exponentially in D at steps ~ D^3 (d = {d})" if at != "final" else ""
            )
            records.append(
                FitRecord(
                    "attention_concentration",
                    f"1 - mass at {at}",
                    {"d": int(d), "at": at},
                    "D",
                    "log(1 - mass)",
                    fit,
                    pd.DataFrame(pts),
                    Prediction("less", 0.0) if claim else None,
                    claim=claim,
                    theory="after T* ~ D^3 steps, 1 - S[j*, j] <= exp(-Theta(D)): slope of log(1 - mass) on D < 0",
                )
            )
    return records


def _interp_log(steps: np.ndarray, values: np.ndarray, at: float) -> float:
    """log-log interpolation of a positive curve at step ``at`` (NaN outside the recorded range)."""
    if at < steps[0] or at > steps[-1]:
        return math.nan
    pos = steps > 0
    if not pos.any() or at <= steps[pos][0]:  # before the first positive step: linear from the start
        return float(np.interp(at, steps, values))
    with np.errstate(divide="ignore"):
        return float(np.exp(np.interp(np.log(at), np.log(steps[pos]), np.log(np.clip(values[pos], 1e-300, None)))))


REGRESSORS = {"d+D": lambda d, D: d + D, "d*D": lambda d, D: d * D}
EXPECTED_REGRESSOR = {m: "d+D" for m in PRETRAINED_METHODS} | {BASELINE_METHOD: "d*D"}


def sample_complexity_fits(transfer: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """log n* against log(d + D) and log(d * D), per downstream, method and target accuracy."""
    scaled = with_role(transfer, "scaling")
    records = []
    configs = scaled[["run", "d", "D"]].drop_duplicates().sort_values(["d", "D"]).to_numpy().tolist()
    for downstream in downstreams(transfer, s.downstream) if len(scaled) else []:
        for method in s.methods:
            for target in s.accuracy_targets:
                for reg, fn in REGRESSORS.items():
                    stats, seeds, xs, pts, names = [], [], [], [], []
                    for run, d, D in configs:
                        grid, seed_ids, curves = transfer_curves(scaled, run, downstream, method)
                        if not seed_ids.size:
                            continue
                        stat = curve_crossing_stat(grid, curves, target)
                        stats.append(stat)
                        seeds.append(seed_ids.size)
                        xs.append(math.log(fn(d, D)))
                        names.append(f"d={d}, D={D}")
                        v, c = stat(np.arange(seed_ids.size)[None])
                        pts.append(
                            {
                                "level": f"d={d}, D={D}",
                                "d": d,
                                "D": D,
                                "x": xs[-1],
                                "y": float(v[0]),
                                "censored": bool(c[0]),
                                "seed": -1,
                                "reason": f"never reached within n <= {grid.max():g}" if c[0] else "",
                            }
                        )
                    if not stats:
                        continue
                    rng = bootstrap_generator(s.study_seed, "sample_complexity", downstream, method, float(target), reg)
                    fit = fit_levels(np.asarray(xs), stats, seeds, n_boot=s.n_boot, rng=rng, names=names)
                    expected = EXPECTED_REGRESSOR.get(method) == reg
                    theory = (
                        "test error O((d + D) log^2 n / n): n* ~ d + D (slope 1, a little under from log^2 n)"
                        if method in PRETRAINED_METHODS
                        else "vectorised logistic regression needs n* ~ d D"
                    )
                    records.append(
                        FitRecord(
                            "sample_complexity",
                            f"accuracy >= {target:g}",
                            {"method": method, "downstream": downstream, "threshold": float(target)},
                            f"log({reg})",
                            "log n*",
                            fit,
                            pd.DataFrame(pts),
                            Prediction("equal", 1.0, EXPONENT_TOLERANCE) if expected else None,
                            claim=(
                                f"{method}: samples for accuracy {target:g} grow like {reg} (downstream {downstream})"
                                if expected
                                else ""
                            ),
                            theory=theory,
                        )
                    )
    return records
