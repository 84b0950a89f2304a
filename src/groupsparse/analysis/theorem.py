"""Claims on the theorem's own terms beyond the fits (docs/STUDY.md sections 3.4 and 6.4): concentration
over the measured D (its curvature, descriptive; the law at larger D is the out-of-sample test of
:mod:`.predict`), and the stability of the symmetric solution in the ablation runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .concentration import law_comparison
from .inputs import with_role
from .power import add_power
from .rows import claim_row
from .scaling_laws import FitRecord
from .settings import Settings
from .statements import About, grid_text
from .stats import MIN_SEEDS, Prediction, fmt_values, mean_interval


def concentration_claims(records: list[FitRecord], s: Settings) -> list[dict]:
    """Per (d, kappa): does 1 - min attention at flow time kappa D^3 fall exponentially in D?

    Two rows: the law (exponential vs power, by :func:`.scaling_laws.law_comparison`'s criterion)
    and the direction (the exponential fit's slope below 0: concentration sharpens with D).
    """
    rows = []
    for c in law_comparison(records):
        fe = c["fit"]
        config = (
            f"d = {c['d']}, flow time {c['at']}; levels {'; '.join(fe.names)}; seeds per level {fmt_values(fe.seeds)}; "
            f"{c['label']}: exponential slope {c['exp_slope']:.3g} [{c['exp_low']:.3g}, {c['exp_high']:.3g}]"
            " per unit D, "
            f"power exponent {c['power_slope']:.3g} [{c['power_low']:.3g}, {c['power_high']:.3g}]; "
            f"RSS exponential {c['rss_exponential']:.3g}, power {c['rss_power']:.3g}; decision: {c['decision']}"
        )
        about = About(
            d=float(c["d"]), kappa=float(c["kappa"]), D_grid=grid_text(fe.x), replicates=float(fe.seeds.min())
        )
        common = dict(config=config, n=int(fe.seeds.sum()))
        law = claim_row(
            "curvature",
            about,
            Prediction("greater", 0.0),
            c["delta_rss"],
            c["low"],
            c["high"],
            c["blocker"],
            theory="after T* ~ D^3 steps, 1 - S[j*, j] <= exp(-Theta(D)): log(1 - min attention) linear in D. "
            "RSS(power) - RSS(exponential) over the same level means (> 0: straighter against D)",
            **common,
        )
        law["verdict"] = "descriptive"
        law["why"] = (
            "the curvature of five level means over the measured D, not the law at large D: that is decided "
            "by the out-of-sample test (rule predict)"
        )
        rows.append(law)
        pred = Prediction("less", 0.0)
        row = claim_row(
            "falls_with_D",
            about,
            pred,
            c["exp_slope"],
            c["exp_low"],
            c["exp_high"],
            c["blocker"],
            theory="exp(-Theta(D)): slope of log(1 - min attention) on D below 0",
            **common,
        )
        se = float(np.std(fe.boot_slope, ddof=1)) if fe.boot_slope.size > 1 else math.nan
        alt = (f"the slope -c of exp(-c D) at the smallest c ({min(s.target_c):g})", -min(s.target_c))
        rows.append(add_power(row, pred, *alt, se, fe.dof, s))
    return rows


# growth rates are fitted in two windows of each run's recorded steps (fractions of its last step):
# the transient while attention forms, and the late phase near the end state
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
            ("stability_v2", "|v2| / |v1|"): g["v2_norm"] / g["v1_norm"],
            ("stability_W", "|W cross| / |W diagonal blocks|"): np.hypot(g["W_fp_norm"], g["W_pf_norm"])
            / np.hypot(g["W_ff_norm"], g["W_pp_norm"]),
        }
        variant = str(g["variant"].iloc[0]) if "variant" in g.columns else run
        for (statement, what), ratio in ratios.items():
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
                about = About(
                    run=str(run),
                    variant=variant,
                    window=window,
                    d=float(g["d"].iloc[0]),
                    D=float(g["D"].iloc[0]),
                    replicates=float(len(rates)),
                )
                rows.append(
                    claim_row(
                        statement,
                        about,
                        Prediction("less", 0.0),
                        m,
                        lo,
                        hi,
                        f"{len(rates)} seed(s), need {MIN_SEEDS}" if len(rates) < MIN_SEEDS else "",
                        f"run {run} (variant {variant}): growth rate of log({what}) per 1000 steps over steps "
                        f"{lo_frac:.2g}-{hi_frac:.2g} of the run; final {what} per seed: "
                        f"{', '.join(f'{v:.3g}' for v in finals)}",
                        len(rates),
                        "the theorem's solution has v2 = 0 and W_fp = W_pf = 0; stable if a perturbation decays",
                        "ablation",
                    )
                )
    return rows
