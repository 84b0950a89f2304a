"""Scaling laws (docs/STUDY.md sections 3 and 4): convergence time, attention concentration, sample complexity.

* convergence time: the first gradient-flow time tau = eta x steps at which a seed's minimum over
  queries of S[j*, j] reaches the theorem's target 1 - exp(-c D), its mean attention reaches
  0.5 / 0.9 / 0.99, or its eval loss falls under a target; log tau on log D, descriptive rates (the
  bound's constant: :mod:`.bound`);
* sample complexity: in :mod:`.sample_complexity`;
* attention concentration: log(1 - min attention) at flow time kappa D^3 against the laws in D
  (:mod:`.concentration`, the out-of-sample test :mod:`.predict`);
* batch as a measured factor, and the stability of the symmetric solution (:mod:`.claims`).

Every D^3-scaled time is a flow time: runs at another step size (a step size that shrinks with D)
compare in it, and at a fixed eta it is the steps times eta. Censored data are kept, not dropped: a
seed that never reaches a threshold is recorded with its last step as a lower bound and
``censored = True``; a fit level with censored data is left
out of that fit and the fit's verdict becomes "inconclusive" (leaving it out would bias the
slope, putting the bound in would too). The statistics live in :mod:`.stats`, the fits in :mod:`.fits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..io.files import InputError
from .fits import Fit, fit_levels, mean_stat
from .inputs import require_columns
from .settings import Settings
from .statements import About, claim_text
from .stats import CONFIDENCE, Prediction, bootstrap_generator, first_crossing, fmt_values, one_sided_low

ATTENTION_RESOLUTION = 1e-6  # 1 - mass below this is under float32 resolution: censored
FLOW_RESOLUTION = 1e-13  # the flow's r = 1 - min attention, read back from a float64 min attention


MIN_ATTENTION = "attention_min_on_relevant"  # min over queries of S[j*, j]: what the theorem bounds
# a crossing censored from above: the target lies below the start (a small D, a small c)
REACHED_AT_START = "already reached at the first recorded step"
POOLED_MIN = "attention_min_pooled"  # population mode's estimate of it (training/recording.py)
FLOW_TIME = "flow_time"  # tau = eta x steps, recorded by every run


def flow_times(g: pd.DataFrame) -> np.ndarray:
    """The flow times of a run's recorded rows (InputError for a table written before runs recorded them)."""
    if FLOW_TIME not in g.columns:
        raise InputError(
            "trajectory table has no flow_time column (written before runs recorded their step size): "
            "rerun its pretraining jobs"
        )
    return g[FLOW_TIME].to_numpy(float)


def without_flow_time(traj: pd.DataFrame) -> pd.Series:
    """Per row: trained by an adaptive optimizer (Adam), whose step size is no flow time (eta x steps
    means nothing for it); False for gradient descent, its flow and tables without an optimizer column."""
    if "optimizer" not in traj.columns:
        return pd.Series(False, traj.index)
    return ~traj["optimizer"].fillna("gd").isin(["gd", "flow"])  # gradient descent and its flow


def theorem_quantity(traj: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """The trajectories with population-mode runs' min over queries read from their pooled estimate
    (scaling.analysis.population_min: pooled), every other run's as recorded."""
    if s.population_min != "pooled" or POOLED_MIN not in traj.columns or "algorithm" not in traj.columns:
        return traj
    pop = (traj["algorithm"] == "population").to_numpy() & np.isfinite(traj[POOLED_MIN].to_numpy(float))
    if not pop.any():
        return traj
    traj = traj.copy()
    traj.loc[pop, MIN_ATTENTION] = traj.loc[pop, POOLED_MIN]
    return traj


CROSSING_COLUMNS = [
    "run",
    "role",
    "variant",
    "d",
    "D",
    "batch",
    "seed",
    "quantity",
    "c",
    "threshold",
    "step",
    "flow_time",
    "eta",
    "censored",
    "reason",
    "last_step",
]


def theorem_target(c: float, D: int) -> float:
    """The theorem's D-dependent level 1 - exp(-c D) for the minimum over queries of S[j*, j]."""
    return 1.0 - math.exp(-c * D)


def crossing_times(
    traj: pd.DataFrame,
    thresholds=(0.5, 0.9, 0.99),
    loss_target: float | None = None,
    target_c=(),
) -> pd.DataFrame:
    """Per (run, seed): steps, and flow time eta x steps, until each target is first reached
    (:func:`.stats.first_crossing`).

    Targets: the theorem's, min over queries of S[j*, j] >= 1 - exp(-c D) for each c in
    ``target_c`` (quantity ``attention_min_on_relevant``, column c); and the fixed, descriptive
    ones, mean attention on j* >= each threshold and eval loss <= ``loss_target`` (c NaN).
    A censored step is the last recorded step, a lower bound; reason says why ("not reached
    within the budget" or "diverged at step s").
    """
    require_columns(traj, "trajectory")
    out = []
    for (run, seed), g in traj.sort_values("step").groupby(["run", "seed"], sort=True):
        g = g.drop_duplicates("step", keep="last")
        D = int(g["D"].iloc[0])
        goals = [("attention_on_relevant", math.nan, float(t), "up") for t in thresholds]
        if loss_target is not None:
            goals.append(("eval_loss", math.nan, float(loss_target), "down"))
        if MIN_ATTENTION in g.columns:
            goals += [(MIN_ATTENTION, float(c), theorem_target(float(c), D), "up") for c in target_c]
        steps = g["step"].to_numpy(dtype=float)
        eta = float(flow_times(g)[-1] / steps[-1]) if steps[-1] > 0 else math.nan  # a run's one step size
        diverged = (g["status"] != "ok").any()
        div_step = int(g["diverged_step"].iloc[-1]) if "diverged_step" in g.columns else -1
        for quantity, c, thr, direction in goals:
            t, reached = first_crossing(steps, g[quantity].to_numpy(dtype=float)[None], thr, direction=direction)
            at_start = bool(reached[0]) and t[0] <= steps[0]  # reached before any measurement: only an upper bound
            reason = (
                "" if reached[0] else f"diverged at step {div_step}" if diverged else "not reached within the budget"
            )
            reason = f"{REACHED_AT_START} {steps[0]:g}" if at_start else reason
            out.append(
                {
                    "run": run,
                    "role": str(g["role"].iloc[0]),
                    "variant": str(g["variant"].iloc[0]) if "variant" in g.columns else "",
                    "d": int(g["d"].iloc[0]),
                    "D": D,
                    "batch": int(g["batch"].iloc[0]) if "batch" in g.columns else -1,
                    "seed": int(seed),
                    "quantity": quantity,
                    "c": c,
                    "threshold": thr,
                    "step": float(t[0]),
                    "flow_time": eta * float(t[0]),
                    "eta": eta,
                    "censored": not bool(reached[0]) or at_start,
                    "reason": reason,
                    "last_step": float(steps[-1]),
                }
            )
    return pd.DataFrame(out, columns=CROSSING_COLUMNS)


def grid_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The scaling grid's own runs (variant ''), not the batch check's extra runs."""
    return df[df["variant"].fillna("").astype(str) == ""] if "variant" in df.columns else df


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
    statement: str = ""  # the claim it makes (analysis.statements), '' for none
    about: About | None = None  # the claim's typed columns
    theory: str = ""
    descriptive: bool = False  # a measured rate the theory does not bound: a claims row without a verdict

    @property
    def claim(self) -> str:
        """The claim's text ('' without one)."""
        return claim_text(self.statement, self.about) if self.statement else ""

    def row(self) -> dict:
        f = self.fit
        return {
            "role": "scaling",
            "analysis": self.analysis,
            "label": self.label,
            **{k: self.group.get(k) for k in GROUP_KEYS},
            "coefficient": "slope",
            "x": self.x_name,
            "y": self.y_name,
            "slope": f.slope,
            "intercept": f.intercept,
            "low": f.low,
            "high": f.high,
            "confidence": CONFIDENCE,
            "one_sided_low": one_sided_low(f.slope, f.boot_slope, f.dof),
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


GROUP_KEYS = ("d", "D", "method", "downstream", "quantity", "threshold", "c", "at", "law")


def convergence_time_fits(crossings: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """log tau (the flow time eta x steps) against log D at fixed d, with intervals and local slopes,
    over the grid's own runs (at a fixed eta the steps' slope).

    Every fit is a descriptive rate: for the theorem's targets (min over queries >= 1 - exp(-c D),
    one fit per c) T* = Theta(D^3) is a sufficient time, which a slope over a finite range cannot
    contradict (its constant is :func:`.bound.kappa_claims`); the fixed thresholds are not bounded.
    """
    records = []
    crossings = grid_rows(crossings)
    theorem = crossings["c"].notna()
    keyed = crossings.assign(key=np.where(theorem, crossings["c"], crossings["threshold"]))
    for (d, quantity, key), g in keyed.groupby(["d", "quantity", "key"], sort=True):
        levels = sorted(g["D"].unique())
        stats, seeds = [], []
        for D in levels:
            h = g[g["D"] == D].sort_values("seed")
            stats.append(mean_stat(np.log(h["flow_time"].clip(lower=1e-12)), h["censored"]))
            seeds.append(len(h))
        is_theorem = quantity == MIN_ATTENTION
        rng = bootstrap_generator(s.study_seed, "convergence_time", int(d), quantity, float(key))
        fit = fit_levels(np.log(levels), stats, seeds, n_boot=s.n_boot, rng=rng, names=[f"D={D}" for D in levels])
        if is_theorem:
            what, statement = f"min over queries of S[j*, j] >= 1 - exp(-{key:g} D)", "rate_level"
        elif quantity == "attention_on_relevant":
            what, statement = f"mean attention on j* >= {key:g}", "rate_attention"
        else:
            what, statement = f"eval loss <= {key:g}", "rate_loss"
        about = About(d=float(d), **({"c": float(key)} if is_theorem else {"target": float(key)}))
        about = replace(about, replicates=float(min(seeds)) if seeds else math.nan)
        g = g.sort_values(["D", "seed"])
        points = pd.DataFrame(
            {
                "level": g["D"],
                "x": np.log(g["D"].astype(float)),
                "y": np.log(g["flow_time"].clip(lower=1e-12)),
                "censored": g["censored"],
                "seed": g["seed"],
                "reason": g["reason"],
            }
        )
        group = {"d": int(d), "quantity": quantity} | ({"c": float(key)} if is_theorem else {"threshold": float(key)})
        records.append(
            FitRecord(
                "convergence_time",
                what,
                group,
                "log D",
                "log flow time",
                fit,
                points,
                None,
                statement=statement,
                about=about,
                theory=(
                    "after T* = Theta(D^3) steps, S[j*, j] >= 1 - exp(-Theta(D)) for every query j: a sufficient "
                    "time with a hidden constant, so a measured rate neither confirms nor refutes it (the bound's "
                    "constant kappa_c is its own claim)"
                    if is_theorem
                    else "the theorem bounds no fixed-threshold time: a measured rate, no verdict"
                ),
                descriptive=True,
            )
        )
    return records
