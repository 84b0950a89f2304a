"""The claims table (STUDY.md section 6): each claim of the theory, its measurement and its verdict.

Verdicts come from :func:`.stats.verdict`, never from hand; :func:`analyse` runs every analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .ablations import ablation_table
from .inputs import (
    BASELINE_METHOD,
    PRETRAINED_METHOD,
    PRETRAINED_METHODS,
    TRAJECTORY_COLUMNS,
    TRANSFER_COLUMNS,
    check_columns,
    downstreams,
    final_rows,
    transfer_curves,
    with_role,
    without_role,
)
from .scaling_laws import (
    FitRecord,
    Settings,
    concentration_fits,
    convergence_time_fits,
    crossing_times,
    law_comparison,
    sample_complexity_fits,
)
from .stats import (
    CONFIDENCE,
    METRIC_RANGES,
    MIN_SEEDS,
    Prediction,
    bootstrap_generator,
    difference_interval,
    fmt_values,
    mean_curve_crossing,
    mean_interval,
    t_interval,
    verdict,
    widen,
)


def _claim(
    claim: str,
    theory: str,
    pred: Prediction | None,
    measured: float,
    low: float,
    high: float,
    blocker: str,
    config: str,
    analysis: str,
    n: int,
    role: str = "scaling",
    run: str = "",
    settings: dict | None = None,
) -> dict:
    """One claims-table row; ``settings``: the varied settings it is about (d, D; NaN where a fit spans them)."""
    v, why = verdict(pred, low, high, blocker=blocker) if pred else ("inconclusive", "no prediction")
    return {
        "claim": claim,
        "theory": theory,
        "prediction": _pred_text(pred),
        "predicted_value": pred.value if pred else math.nan,
        "measured": measured,
        "low": low,
        "high": high,
        "confidence": CONFIDENCE,
        "verdict": v,
        "why": why,
        "n": n,
        "config": config,
        "analysis": analysis,
        "role": role,
        "run": run,
        "d": (settings or {}).get("d", math.nan),
        "D": (settings or {}).get("D", math.nan),
    }


def _pred_text(pred: Prediction | None) -> str:
    if pred is None:
        return ""
    if pred.kind == "equal":
        width = f" (interval at most {pred.tolerance:g} wide)" if math.isfinite(pred.tolerance) else ""
        return f"= {pred.value:g}{width}"
    return f"{'>' if pred.kind == 'greater' else '<'} {pred.value:g}"


def final_state_claims(traj: pd.DataFrame, s: Settings) -> list[dict]:
    """Attention on j* and cos(v1, v*) near 1 at the end of pretraining, per non-ablation run."""
    rows = []
    last = final_rows(without_role(traj, "ablation"))
    for run, g in last.groupby("run", sort=True):
        ok = g[g["status"] == "ok"]
        n_div = len(g) - len(ok)
        config = (
            f"run {run}: d = {int(g['d'].iloc[0])}, D = {int(g['D'].iloc[0])}, step {int(g['step'].max())}, "
            f"{len(ok)} seed(s)" + (f", {n_div} diverged" if n_div else "")
        )
        for col, what, theory in (
            (
                "attention_on_relevant",
                "mean attention mass on j*",
                "after pretraining, S[j*, j] >= 1 - exp(-Theta(D)) for every query j",
            ),
            ("cos_v1_vstar", "cos(v1, v*)", "after pretraining, v1 aligns with v*"),
        ):
            m, lo, hi = mean_interval(ok[col].to_numpy(float), METRIC_RANGES[col])
            blocker = (f"{n_div} seed(s) diverged" if n_div else "") or (
                f"{len(ok)} seed(s), need {MIN_SEEDS}" if len(ok) < MIN_SEEDS else ""
            )
            rows.append(
                _claim(
                    f"{what} near 1 after pretraining ({run})",
                    theory,
                    Prediction("greater", s.near_one),
                    m,
                    lo,
                    hi,
                    blocker,
                    config,
                    "final_state",
                    len(ok),
                    str(g["role"].iloc[0]),
                    run,
                    {"d": int(g["d"].iloc[0]), "D": int(g["D"].iloc[0])},
                )
            )
    return rows


def sample_gap_claims(transfer: pd.DataFrame, s: Settings) -> list[dict]:
    """log(n*_logreg / n*_pretrained) > 0 per run, downstream and target (paired bootstrap over seeds).

    A method that never reaches the target has n* > n_max, one that reaches it at the first n
    has n* <= n_min: the bound is used, and the side of the interval it leaves unknown is set
    to infinity, so censoring can only widen the interval.
    """
    rows = []
    if not len(transfer):
        return rows
    check_columns(transfer, TRANSFER_COLUMNS, "transfer table")
    for downstream in downstreams(transfer, s.downstream):
        for run in sorted(without_role(transfer, "ablation")["run"].unique()):
            base = transfer_curves(transfer, run, downstream, BASELINE_METHOD)
            for method in PRETRAINED_METHODS:
                pre = transfer_curves(transfer, run, downstream, method)
                common = np.intersect1d(pre[1], base[1])
                if not common.size:
                    continue
                d, D, role = (transfer.loc[transfer["run"] == run, k].iloc[0] for k in ("d", "D", "role"))
                d, D = int(d), int(D)
                pick = lambda c, common=common: c[2][np.searchsorted(c[1], common)]
                for target in s.accuracy_targets:
                    rng = bootstrap_generator(
                        s.study_seed,
                        "sample_gap",
                        run,
                        downstream,
                        float(target),
                        *(() if method == PRETRAINED_METHOD else (method,)),
                    )
                    idx = np.vstack(
                        [np.arange(common.size)[None], rng.integers(0, common.size, size=(s.n_boot, common.size))]
                    )
                    lp, pre_above, pre_below = mean_curve_crossing(pre[0], pick(pre), target)(idx)
                    lb, base_above, base_below = mean_curve_crossing(base[0], pick(base), target)(idx)
                    gap = lb - lp
                    lo, hi = t_interval(float(gap[0]), widen(gap[0], gap[1:], common.size), common.size - 1)
                    # the true gap is smaller where pretrained's n* or logreg's is only bounded that way
                    lo = -math.inf if (pre_above | base_below).any() else lo
                    hi = math.inf if (pre_below | base_above).any() else hi
                    blocker = ("neither method reaches the target" if pre_above[0] and base_above[0] else "") or (
                        f"{common.size} seed(s), need {MIN_SEEDS}" if common.size < MIN_SEEDS else ""
                    )
                    rows.append(
                        _claim(
                            f"{method} needs fewer samples than logreg for accuracy {target:g} ({run}, {downstream})",
                            "n* ~ d + D for the pretrained transformer vs d D for logistic regression on vec(X)",
                            Prediction("greater", 0.0),
                            float(gap[0]),
                            lo,
                            hi,
                            blocker,
                            f"run {run}: d = {d}, D = {D}, downstream {downstream}; "
                            "measured = log(n*_logreg / n*_pretrained)"
                            + (" (pretrained never reaches it: measured is an upper bound)" if pre_above[0] else "")
                            + (
                                " (pretrained reaches it at the first n: measured is a lower bound)"
                                if pre_below[0]
                                else ""
                            )
                            + (" (logreg never reaches it: measured is a lower bound)" if base_above[0] else "")
                            + (
                                " (logreg reaches it at the first n: measured is an upper bound)"
                                if base_below[0]
                                else ""
                            ),
                            "sample_gap",
                            int(common.size),
                            role,
                            run,
                            {"d": d, "D": D},
                        )
                    )
    return rows


def fit_claims(records: list[FitRecord]) -> list[dict]:
    rows = []
    for r in records:
        if not r.claim:
            continue
        f = r.fit
        config = (
            ", ".join(f"{k} = {v}" for k, v in r.group.items()) + f"; levels {'; '.join(f.names)}; "
            f"seeds per level {fmt_values(f.seeds)}; local slopes {fmt_values(np.round(f.local_slopes(), 3))}; "
            f"two-sided {CONFIDENCE:.0%} interval [{f.low:.3g}, {f.high:.3g}]"
        )
        one_sided = r.prediction is not None and r.prediction.kind == "at_most"
        row = _claim(
            r.claim,
            r.theory,
            r.prediction,
            f.slope,
            f.one_sided_low() if one_sided else f.low,
            math.inf if one_sided else f.high,
            f.blocker(),
            config,
            r.analysis,
            int(f.seeds.sum()),
            settings={k: r.group[k] for k in ("d", "D") if k in r.group},
        )
        if r.descriptive:
            row["verdict"] = "descriptive"
            row["why"] = "a measured rate (exponent with its interval and local slopes); no verdict on the theorem"
            row["low"], row["high"] = f.low, f.high
        rows.append(row)
    return rows


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
    """Batch as a measured factor (STUDY.md section 6.4): the batch check's runs against the grid's.

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
    """Is the theorem's solution (v2 = 0, W_fp = W_pf = 0) stable? (STUDY.md section 6.4)

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


@dataclass
class Analysis:
    fits: list[FitRecord]
    claims: pd.DataFrame
    ablations: pd.DataFrame
    crossings: pd.DataFrame

    def fits_table(self) -> pd.DataFrame:
        return pd.DataFrame([r.row() for r in self.fits])

    def points_table(self) -> pd.DataFrame:
        cols = [
            "role",
            "analysis",
            "label",
            "group",
            "level",
            "seed",
            "x_name",
            "x",
            "y_name",
            "y",
            "censored",
            "reason",
        ]
        frames = [
            r.points.assign(
                level=r.points["level"].astype(str),
                role="scaling",
                analysis=r.analysis,
                label=r.label,
                x_name=r.x_name,
                y_name=r.y_name,
                group=", ".join(f"{k}={v}" for k, v in r.group.items()),
            )[cols]
            for r in self.fits
        ]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


CLAIM_COLUMNS = [
    "claim",
    "theory",
    "prediction",
    "predicted_value",
    "measured",
    "low",
    "high",
    "confidence",
    "verdict",
    "why",
    "n",
    "config",
    "analysis",
    "role",
    "run",
    "d",
    "D",
]


def analyse(traj: pd.DataFrame, transfer: pd.DataFrame | None, s: Settings | None = None) -> Analysis:
    """Fits, claims (with verdicts by :func:`verdict`) and the ablation table from the input tables."""
    s = s or Settings()
    check_columns(traj, TRAJECTORY_COLUMNS, "trajectory table")
    transfer = transfer if transfer is not None else pd.DataFrame(columns=TRANSFER_COLUMNS)
    scaled = with_role(traj, "scaling")
    crossings = crossing_times(scaled, s.thresholds, s.loss_target, s.target_c) if len(scaled) else pd.DataFrame()
    records = (
        (convergence_time_fits(crossings, s) if len(crossings) else [])
        + (concentration_fits(scaled, s) if len(scaled) else [])
        + sample_complexity_fits(transfer, s)
    )
    claims = (
        fit_claims(records)
        + concentration_claims(records)
        + batch_claims(crossings)
        + stability_claims(traj)
        + final_state_claims(traj, s)
        + sample_gap_claims(transfer, s)
    )
    return Analysis(records, pd.DataFrame(claims, columns=CLAIM_COLUMNS), ablation_table(traj, transfer, s), crossings)
