"""Claims on the theorem's own terms beyond the fits (docs/STUDY.md sections 3.4 and 6.4): exponential vs
power-law concentration, batch as a measured factor, stability of the symmetric solution."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .concentration import law_comparison
from .inputs import with_role
from .rows import _claim
from .scaling_laws import FitRecord
from .stats import MIN_SEEDS, Prediction, difference_interval, fmt_values, mean_interval


def concentration_claims(records: list[FitRecord]) -> list[dict]:
    """Per (d, kappa): does 1 - min attention at kappa D^3 steps fall exponentially in D?

    Two rows: the law (exponential vs power, by :func:`.scaling_laws.law_comparison`'s criterion)
    and the direction (the exponential fit's slope below 0: concentration sharpens with D).
    """
    rows = []
    for c in law_comparison(records):
        fe = c["fit"]
        config = (
            f"d = {c['d']}, steps {c['at']}; levels {'; '.join(fe.names)}; seeds per level {fmt_values(fe.seeds)}; "
            f"{c['label']}: exponential slope {c['exp_slope']:.3g} [{c['exp_low']:.3g}, {c['exp_high']:.3g}]"
            " per unit D, "
            f"power exponent {c['power_slope']:.3g} [{c['power_low']:.3g}, {c['power_high']:.3g}]; "
            f"RSS exponential {c['rss_exponential']:.3g}, power {c['rss_power']:.3g}; decision: {c['decision']}"
        )
        common = dict(
            config=config,
            analysis="attention_concentration",
            n=int(fe.seeds.sum()),
            settings={"d": c["d"]},
        )
        rows.append(
            _claim(
                f"1 - min attention at {c['at']} steps: exponential law in D fits better than a power law "
                f"(d = {c['d']})",
                "after T* ~ D^3 steps, 1 - S[j*, j] <= exp(-Theta(D)): log(1 - min attention) linear in D. "
                "Criterion: RSS(power) - RSS(exponential) over the same level means (> 0: exponential)",
                Prediction("greater", 0.0),
                c["delta_rss"],
                c["low"],
                c["high"],
                c["blocker"],
                **common,
            )
        )
        rows.append(
            _claim(
                f"1 - min attention at {c['at']} steps falls with D (d = {c['d']})",
                "exp(-Theta(D)): slope of log(1 - min attention) on D below 0",
                Prediction("less", 0.0),
                c["exp_slope"],
                c["exp_low"],
                c["exp_high"],
                c["blocker"],
                **common,
            )
        )
    return rows


BATCH_TOLERANCE = 0.2  # log steps: a batch effect's interval no wider than +-10% can confirm "no effect"


def batch_claims(crossings: pd.DataFrame) -> list[dict]:
    """Batch as a measured factor (docs/STUDY.md section 6.4): the batch check's runs against the grid's.

    For each (d, D) with runs at several batches (variant batch<b> beside the grid's own run), per
    target (the theorem's c and the fixed thresholds): log(steps at batch b / steps at the grid's
    batch), Welch interval over seeds; 'equal 0' holds if 0 lies inside an interval at most
    :data:`BATCH_TOLERANCE` wide (the times do not depend on the batch beyond their interval).
    """
    rows = []
    if not len(crossings) or "batch" not in crossings.columns:
        return rows
    scaled = crossings[crossings["role"] == "scaling"]
    checked = scaled[scaled["variant"].astype(str).str.startswith("batch")]
    for (d, D), g in scaled[scaled.set_index(["d", "D"]).index.isin(checked.set_index(["d", "D"]).index)].groupby(
        ["d", "D"], sort=True
    ):
        grid = g[g["variant"].astype(str) == ""]
        if not len(grid):
            continue
        ref_batch = int(grid["batch"].iloc[0])
        key = np.where(g["c"].notna(), "c=" + g["c"].astype(str), g["quantity"] + ">=" + g["threshold"].astype(str))
        g = g.assign(key=key)
        for _key, h in g.groupby("key", sort=True):
            ref = h[h["variant"].astype(str) == ""]
            means = {int(b): float(np.exp(np.log(x["step"]).mean())) for b, x in h.groupby("batch", sort=True)}
            extrapolated = _infinite_batch(means) if not h["censored"].any() else math.nan
            for b, x in h[h["variant"].astype(str) != ""].groupby("batch", sort=True):
                cens = bool(ref["censored"].any() or x["censored"].any())
                delta, lo, hi = difference_interval(np.log(x["step"]), np.log(ref["step"]))
                delta, lo, hi = (math.nan,) * 3 if cens else (delta, lo, hi)
                what = str(h["quantity"].iloc[0])
                target = (
                    f"min attention >= 1 - exp(-{float(h['c'].iloc[0]):g} D)"
                    if h["c"].notna().iloc[0]
                    else f"{what} {'<=' if what == 'eval_loss' else '>='} {float(h['threshold'].iloc[0]):g}"
                )
                rows.append(
                    _claim(
                        f"steps until {target} do not depend on the batch: {int(b)} vs {ref_batch} (d = {d}, D = {D})",
                        "the theorem is about population gradient descent; a batch only approximates it",
                        Prediction("equal", 0.0, BATCH_TOLERANCE),
                        delta,
                        lo,
                        hi,
                        "censored times" if cens else "",
                        f"d = {d}, D = {D}; measured = log(steps at batch {int(b)} / steps at batch {ref_batch}); "
                        "geometric-mean steps per batch: "
                        + ", ".join(f"{bb}: {m:.4g}" for bb, m in means.items())
                        + (
                            f"; extrapolated to an infinite batch (log steps linear in 1/batch): {extrapolated:.4g}"
                            if np.isfinite(extrapolated)
                            else ""
                        ),
                        "batch_check",
                        int(len(x)),
                        settings={"d": int(d), "D": int(D)},
                    )
                )
    return rows


# growth rates are fitted in two windows of each run's recorded steps (fractions of its last step):
# the transient while attention forms, and the late phase near the end state
def _infinite_batch(means: dict[int, float]) -> float:
    """Steps at 1/batch -> 0 (population gradient descent): log steps linear in 1/batch, from 3+ batches."""
    if len(means) < 3:
        return math.nan
    inv = np.array([1 / b for b in means])
    slope, intercept = np.polyfit(inv, np.log(list(means.values())), 1)
    return float(np.exp(intercept))


STABILITY_WINDOWS = {"early": (0.0, 1 / 3), "late": (0.5, 1.0)}


def stability_claims(traj: pd.DataFrame) -> list[dict]:
    """Is the theorem's solution (v2 = 0, W_fp = W_pf = 0) stable? (docs/STUDY.md section 6.4)

    For each ablation run that leaves the symmetric subspace at all (|v2| > 0 somewhere: a random
    start, i.i.d. batches, autograd rounding...), the growth rate per 1000 steps of the relative
    deviations |v2| / |v1| and sqrt(|W_fp|^2 + |W_pf|^2) / sqrt(|W_ff|^2 + |W_pp|^2): the OLS slope of
    their log against the step, per seed, in each window of :data:`STABILITY_WINDOWS`, then a t
    interval over seeds. 'less than 0' holds (a perturbation decays: stable) if the interval lies
    below 0, does not hold (it grows: unstable) if above.
    """
    rows = []
    need = ("v1_norm", "v2_norm", "W_ff_norm", "W_fp_norm", "W_pf_norm", "W_pp_norm")
    if not all(c in traj.columns for c in need):
        return rows
    for run, g in with_role(traj, "ablation").groupby("run", sort=True):
        if not (g["v2_norm"] > 0).any():
            continue  # never left the subspace (exactly symmetric run): nothing to measure
        g = g[g["status"] == "ok"]
        ratios = {
            "|v2| / |v1|": g["v2_norm"] / g["v1_norm"],
            "|W cross| / |W diagonal blocks|": np.hypot(g["W_fp_norm"], g["W_pf_norm"])
            / np.hypot(g["W_ff_norm"], g["W_pp_norm"]),
        }
        variant = str(g["variant"].iloc[0]) if "variant" in g.columns else run
        for what, ratio in ratios.items():
            per_seed = [h for _, h in g.assign(ratio=ratio).sort_values("step").groupby("seed", sort=True)]
            finals = [float(h["ratio"].iloc[-1]) for h in per_seed]
            for window, (lo_frac, hi_frac) in STABILITY_WINDOWS.items():
                rates = []
                for h in per_seed:
                    last = h["step"].max()
                    h = h[(h["step"] >= max(lo_frac * last, 1)) & (h["step"] <= hi_frac * last)]
                    h = h[(h["ratio"] > 0) & np.isfinite(h["ratio"])]
                    if len(h) >= 3:
                        x, y = h["step"].to_numpy(float), np.log(h["ratio"].to_numpy(float))
                        rates.append(1000 * float(np.polyfit(x, y, 1)[0]))
                m, lo, hi = mean_interval(rates)
                rows.append(
                    _claim(
                        f"the symmetric solution is stable: {what} does not grow, {window} phase ({run})",
                        "the theorem's solution has v2 = 0 and W_fp = W_pf = 0; stable if a perturbation decays",
                        Prediction("less", 0.0),
                        m,
                        lo,
                        hi,
                        f"{len(rates)} seed(s), need {MIN_SEEDS}" if len(rates) < MIN_SEEDS else "",
                        f"run {run} (variant {variant}): growth rate of log({what}) per 1000 steps over steps "
                        f"{lo_frac:.2g}-{hi_frac:.2g} of the run; final {what} per seed: "
                        f"{', '.join(f'{v:.3g}' for v in finals)}",
                        "stability",
                        len(rates),
                        "ablation",
                        run,
                        {"d": int(g["d"].iloc[0]), "D": int(g["D"].iloc[0])},
                    )
                )
    return rows
