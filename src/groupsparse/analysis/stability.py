"""What a practitioner's training does at large D (docs/STUDY.md section 6.4): the stability runs.

The closed-form kernel keeps the theorem's symmetric subspace (v2 = 0, W's cross blocks 0) exactly;
plain autograd keeps it only up to rounding, and a 1e-6 random start leaves it from the first step.
Per stability run (stab_<variant>_d<d>_D<D>, role scaling) and D: does training still reach the
theorem's solution at the run's last step? Rows with the main rows' intervals (the seeds' t
interval): the minimum over queries of S[j*, j] against the theorem's level 1 - exp(-c D) (the
smallest c of the config: the least demanding target), the mean attention on j*, |v2| / |v1|, the
cross blocks of W relative to the diagonal ones, the eval loss, and the paired difference of
log(1 - min attention) from the grid run (same tasks and seeds) at the same flow time eta x steps
(Adam, whose step size is no flow time: at the same step).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..config.seeding import numpy_generator
from ..study.runs import is_check_variant
from .concentration import rest_at
from .pipeline_power import mean_power
from .power import add_power
from .rows import claim_row
from .scaling_laws import MIN_ATTENTION, theorem_target, without_flow_time
from .settings import Settings
from .statements import About
from .stats import METRIC_RANGES, MIN_SEEDS, Prediction, mean_interval

NEEDED = ("v1_norm", "v2_norm", "W_ff_norm", "W_fp_norm", "W_pf_norm", "W_pp_norm", MIN_ATTENTION)


def _algorithm(g: pd.DataFrame) -> str:
    """The run's algorithm as its trajectory records it: population, batch (closed-form gradients) or autograd."""
    return str(g["algorithm"].iloc[0]) if "algorithm" in g.columns else "batch"


def _is_stability(variant: str) -> bool:
    return variant != "" and not is_check_variant(variant)


def stability_by_D(traj: pd.DataFrame, s: Settings) -> list[dict]:
    rows = []
    if not all(c in traj.columns for c in NEEDED) or "variant" not in traj.columns:
        return rows
    scaled = traj[traj["role"] == "scaling"]
    if scaled.empty:
        return rows
    variants = scaled["variant"].fillna("").astype(str)
    grid = scaled[variants == ""]
    c = min(s.target_c)
    for run, g in scaled[variants.map(_is_stability)].groupby("run", sort=True):
        d, D, variant = int(g["d"].iloc[0]), int(g["D"].iloc[0]), str(g["variant"].iloc[0])
        last = g.sort_values("step").groupby("seed").tail(1)
        ok = last[last["status"] == "ok"]
        n_div = len(last) - len(ok)
        step = int(last["step"].max())
        blocker = (f"{n_div} seed(s) diverged" if n_div else "") or (
            f"{len(ok)} seed(s), need {MIN_SEEDS}" if len(ok) < MIN_SEEDS else ""
        )
        where = f"run {run} (variant {variant}): d = {d}, D = {D}, step {step}, {len(ok)} seed(s)"
        target = theorem_target(c, D)
        values = ok[MIN_ATTENTION].to_numpy(float)
        m, lo, hi = mean_interval(values, METRIC_RANGES[MIN_ATTENTION])
        pred = Prediction("greater", target)
        about = About(
            variant=variant,
            run=str(run),
            algorithm=_algorithm(g),
            batch=float(g["batch"].max()) if "batch" in g.columns else math.nan,
            eta=float(g["eta"].max()) if "eta" in g.columns else math.nan,
            d=float(d),
            D=float(D),
            c=float(c),
            replicates=float(len(ok)),
        )
        row = claim_row(
            "reaches_level",
            about,
            pred,
            m,
            lo,
            hi,
            blocker,
            where + f"; level 1 - exp(-{c:g} x {D}) = {target:.4g}",
            len(ok),
            "after T* ~ D^3 steps, S[j*, j] >= 1 - exp(-Theta(D)) for every query j",
        )
        ref = grid[(grid["d"] == d) & (grid["D"] == D)]
        # the alternative: the grid run's minimum over queries where this run stopped, linear between its
        # records; at the same flow time eta x steps (a variant at another step size takes other steps to
        # it), an adaptive optimizer (Adam, no flow time) at the same step
        adaptive = bool(without_flow_time(g).any())
        clock = "step" if adaptive or "flow_time" not in g.columns or "flow_time" not in ref.columns else "flow_time"
        until = float(last[clock].max())
        # a run at another step size ends up to one of its steps past the grid run's flow time (its step
        # count is rounded up): read the grid run's last record there
        slack = float(last["eta"].max()) if clock == "flow_time" and "eta" in last.columns else 0.0
        at_end = []
        for _, h in ref.sort_values("step").groupby("seed"):
            end = float(h[clock].max())
            at = min(until, end) if until <= end + slack else until  # beyond: no value (NaN)
            at_end.append(
                float(np.interp(at, h[clock].to_numpy(float), h[MIN_ATTENTION].to_numpy(float), right=np.nan))
            )
        finite = [v for v in at_end if np.isfinite(v)]
        closed = float(np.mean(finite)) if finite else math.nan
        x = values[np.isfinite(values)]
        se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
        alt = (f"the closed-form grid run's value at this {clock.replace('_', ' ')}", closed)
        rng = numpy_generator("pipeline-power", s.study_seed, row["claim"])
        sd = float(x.std(ddof=1)) if x.size > 1 else math.nan
        sim = mean_power(pred, closed, sd, x.size, METRIC_RANGES[MIN_ATTENTION], s.pipeline_power_simulations, rng)
        rows.append(add_power(row, pred, *alt, se, x.size - 1, s, pipeline=sim))
        cross = np.hypot(ok["W_fp_norm"], ok["W_pf_norm"]) / np.hypot(ok["W_ff_norm"], ok["W_pp_norm"])
        described = {
            "mean_attention": (ok["attention_on_relevant"], METRIC_RANGES["attention_on_relevant"]),
            "v2_ratio": (ok["v2_norm"] / ok["v1_norm"], (0.0, math.inf)),
            "W_cross_ratio": (cross, (0.0, math.inf)),
            "eval_loss": (ok["eval_loss"], METRIC_RANGES["eval_loss"]),
        }
        if len(ref):
            # paired at the same flow time eta x steps (a variant at another step size reaches it at another
            # step); an adaptive optimizer's step size is no flow time: Adam is paired at the same step
            diffs = []
            for seed, h in g.groupby("seed"):
                h = h.sort_values("step").drop_duplicates("step", keep="last")
                r = ref[ref["seed"] == seed].sort_values("step").drop_duplicates("step", keep="last")
                tau = float(h["flow_time"].iloc[-1])
                a, why_a = rest_at(h, MIN_ATTENTION, tau)
                if len(r) and adaptive:
                    last = int(h["step"].iloc[-1])
                    tau_ref = float(np.interp(last, r["step"].to_numpy(float), r["flow_time"].to_numpy(float)))
                    b, why_b = rest_at(r, MIN_ATTENTION, tau_ref) if last <= r["step"].max() else (math.nan, "beyond")
                elif len(r):
                    end = float(r["flow_time"].iloc[-1])  # up to one step past it: the grid run's last record
                    b, why_b = rest_at(r, MIN_ATTENTION, min(tau, end) if tau <= end + slack else tau)
                else:
                    b, why_b = math.nan, "no grid seed"
                diffs.append(math.log(a) - math.log(b) if not (why_a or why_b) else math.nan)
            described["rest_vs_grid_step" if adaptive else "rest_vs_grid_flow_time"] = (
                pd.Series(diffs),
                (-math.inf, math.inf),
            )
        for quantity, (values, bounds) in described.items():
            m, lo, hi = mean_interval(np.asarray(values, dtype=float), bounds)
            seeds = int(np.isfinite(np.asarray(values, dtype=float)).sum())
            row = claim_row(
                "last_step",
                replace(about, quantity=quantity, c=math.nan, replicates=float(seeds)),
                None,
                m,
                lo,
                hi,
                blocker,
                where,
                seeds,
                "the theorem's solution: attention on j*, v2 = 0, W's cross blocks 0, small loss",
            )
            row["verdict"], row["why"] = "descriptive", blocker or "measured with the seeds' t interval"
            rows.append(row)
    return rows
