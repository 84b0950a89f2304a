"""The claims table (docs/STUDY.md section 6): each claim of the theory, its measurement and its verdict.

Verdicts come from :func:`.stats.verdict`, never from hand; :func:`analyse` runs every analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..config.seeding import numpy_generator
from ..io.tables import ANALYSED_COLUMNS
from .ablations import ablation_table
from .bound import algorithm_of, batch_claims, by_D, kappa_claims
from .concentration import concentration_fits
from .flow_study import flow_runs, mechanism_claims, reference_claims
from .inputs import (
    BASELINE_METHOD,
    PRETRAINED_METHOD,
    PRETRAINED_METHODS,
    downstreams,
    final_rows,
    require_columns,
    with_role,
    without_role,
)
from .kappa_prediction import kappa_c_claims
from .n_star_shape import shape_claims
from .online_form import online_form_claims
from .pipeline_power import mean_power
from .power import add_power
from .predict import prediction_claims
from .protocol import gap_pipeline_power, n_star_gap, paired_curves, protocol_claims
from .rows import CLAIM_COLUMNS, claim_row
from .sample_complexity import JointRecord, n_star_fits, online_error_fits
from .scaling_laws import (
    FitRecord,
    Settings,
    convergence_time_fits,
    crossing_times,
    theorem_quantity,
)
from .stability import stability_by_D
from .statements import About
from .stats import (
    CONFIDENCE,
    METRIC_RANGES,
    MIN_SEEDS,
    Prediction,
    fmt_values,
    mean_interval,
    one_sided_low,
)
from .theorem import concentration_claims, stability_claims


def _se(values: np.ndarray) -> tuple[float, float]:
    """(standard error, degrees of freedom) of the seeds' mean."""
    x = values[np.isfinite(values)]
    return (float(x.std(ddof=1) / math.sqrt(x.size)), float(x.size - 1)) if x.size > 1 else (math.nan, math.nan)


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
        for col, statement, what, theory in (
            (
                "attention_on_relevant",
                "final_attention",
                "mean attention mass on j*",
                "after pretraining, S[j*, j] >= 1 - exp(-Theta(D)) for every query j",
            ),
            ("cos_v1_vstar", "final_cos", "cos(v1, v*)", "after pretraining, v1 aligns with v*"),
        ):
            m, lo, hi = mean_interval(ok[col].to_numpy(float), METRIC_RANGES[col])
            blocker = (f"{n_div} seed(s) diverged" if n_div else "") or (
                f"{len(ok)} seed(s), need {MIN_SEEDS}" if len(ok) < MIN_SEEDS else ""
            )
            pred = Prediction("greater", s.near_one)
            about = About(run=str(run), d=float(g["d"].iloc[0]), D=float(g["D"].iloc[0]), replicates=float(len(ok)))
            row = claim_row(statement, about, pred, m, lo, hi, blocker, config, len(ok), theory, str(g["role"].iloc[0]))
            # the alternative: a value the claim holds at by half its margin, (near_one + 1) / 2
            alt = (f"{what} = (near_one + 1) / 2", (s.near_one + 1) / 2)
            se, dof = _se(ok[col].to_numpy(float))
            x = ok[col].to_numpy(float)
            x = x[np.isfinite(x)]
            rng = numpy_generator("pipeline-power", s.study_seed, row["claim"])
            sd = float(x.std(ddof=1)) if x.size > 1 else math.nan
            sim = mean_power(pred, alt[1], sd, x.size, METRIC_RANGES[col], s.pipeline_power_simulations, rng)
            rows.append(add_power(row, pred, *alt, se, dof, s, pipeline=sim))
    return rows


def sample_gap_claims(transfer: pd.DataFrame, s: Settings) -> list[dict]:
    """log(n*_logreg / n*_pretrained) > 0 per run, downstream and target (:func:`.protocol.n_star_gap`)."""
    rows = []
    if not len(transfer):
        return rows
    require_columns(transfer, "transfer")
    for downstream in downstreams(transfer, s.downstream):
        for run in sorted(without_role(transfer, "ablation")["run"].unique()):
            d, D, role = (transfer.loc[transfer["run"] == run, k].iloc[0] for k in ("d", "D", "role"))
            d, D = int(d), int(D)
            for method in PRETRAINED_METHODS:
                for target in s.accuracy_targets:
                    named = () if method == PRETRAINED_METHOD else (method,)
                    identity = ("sample_gap", run, downstream, float(target), *named)
                    gap = n_star_gap(transfer, run, downstream, method, BASELINE_METHOD, target, s, identity)
                    if gap is None:
                        break
                    pred = Prediction("greater", 0.0)
                    about = About(
                        subject=method,
                        reference=BASELINE_METHOD,
                        run=str(run),
                        downstream=downstream,
                        d=float(d),
                        D=float(D),
                        target=float(target),
                        replicates=float(gap.seeds),
                    )
                    row = claim_row(
                        "sample_gap",
                        about,
                        pred,
                        gap.measured,
                        gap.low,
                        gap.high,
                        gap.blocker(),
                        f"run {run}: d = {d}, D = {D}, downstream {downstream}; "
                        "measured = log(n*_logreg / n*_pretrained)" + gap.bounds_note("pretrained", "logreg"),
                        gap.seeds,
                        "n* ~ d + D for the pretrained transformer vs d D for logistic regression on vec(X)",
                        role,
                    )
                    theory_gap = ("the theory's log(d D / (d + D))", math.log(d * D / (d + D)))
                    pair = paired_curves(transfer, run, downstream, method, BASELINE_METHOD)
                    sim = gap_pipeline_power(pair, target, theory_gap[1], row["claim"], "sample_gap", s)
                    rows.append(add_power(row, pred, *theory_gap, gap.se, gap.seeds - 1, s, pipeline=sim))
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
        row = claim_row(
            r.statement,
            r.about,
            r.prediction,
            f.slope,
            one_sided_low(f.slope, f.boot_slope, f.dof) if one_sided else f.low,
            math.inf if one_sided else f.high,
            f.blocker(),
            config,
            int(f.seeds.sum()),
            r.theory,
        )
        if r.descriptive:
            row["verdict"] = "descriptive"
            row["why"] = "a measured rate (exponent with its interval and local slopes); no verdict on the theorem"
            row["low"], row["high"] = f.low, f.high
        rows.append(row)
    return rows


@dataclass
class Analysis:
    fits: list[FitRecord]
    claims: pd.DataFrame
    ablations: pd.DataFrame
    crossings: pd.DataFrame
    joint: list[JointRecord] = field(default_factory=list)  # joint fits over the (d, D) grid

    def fits_table(self) -> pd.DataFrame:
        return pd.DataFrame([r.row() for r in self.fits] + [row for r in self.joint for row in r.rows()])

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
            for r in [*self.fits, *self.joint]
        ]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


# The cross-machine spread was measured on pretraining quantities (1 - min attention, T_c); the transfer
# verdicts' quantities (n* exponents, the sample gap, the online error's form) have no measured spread,
# and a 3% band on an exponent is not that: the guard is not applied to them.
TRANSFER_ANALYSES = ("sample_complexity", "sample_gap", "online_error_form", "n_star_shape")


def machine_robust(claims: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """A decided verdict whose deciding interval edge lies within the cross-machine spread (relative,
    ``s.machine_spread``) of the predicted value could flip on another machine: inconclusive. Not for
    :data:`TRANSFER_ANALYSES`, whose spread is not measured."""
    if s.machine_spread <= 0 or not len(claims):
        return claims
    claims = claims.copy()
    v = claims["predicted_value"].to_numpy(float)
    edges = np.column_stack([claims["low"].to_numpy(float), claims["high"].to_numpy(float)])
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(edges) & np.isfinite(v)[:, None]
        gap = np.where(usable, np.abs(edges - v[:, None]), np.inf).min(axis=1)
        scale = np.maximum(np.abs(v), np.abs(claims["measured"].to_numpy(float)))
        close = np.isfinite(v) & (gap < s.machine_spread * scale)
    decided = claims["verdict"].isin(["holds", "does not hold", "consistent", "undecided"]).to_numpy()
    # only a verdict of the rule of .stats (a typed prediction) has an interval edge against a value; a row judged
    # by its own rule (kappa_c_prediction: the measured mean inside the prediction's interval) has no kind
    kinds = claims["prediction_kind"] if "prediction_kind" in claims else pd.Series("?", index=claims.index)
    ruled = kinds.fillna("").astype(str).ne("").to_numpy()
    flip = close & decided & ruled & ~claims["analysis"].isin(TRANSFER_ANALYSES).to_numpy()
    claims.loc[flip, "why"] = (
        f"could flip under the cross-machine spread ({s.machine_spread:.2g} relative): " + claims.loc[flip, "why"]
    )
    claims.loc[flip, "verdict"] = "inconclusive"
    return claims


def analyse(
    traj: pd.DataFrame, transfer: pd.DataFrame | None, s: Settings, predictions: pd.DataFrame | None = None
) -> Analysis:
    """Fits, claims (with verdicts by :func:`verdict`) and the ablation table from the input tables;
    ``predictions`` (rule predict's table) judges the runs beyond fit_D_max."""
    require_columns(traj, "trajectory")
    transfer = transfer if transfer is not None else pd.DataFrame(columns=ANALYSED_COLUMNS["transfer"])
    traj = theorem_quantity(traj, s)  # population runs' min over queries: their pooled estimate (if set)
    scaled = with_role(traj, "scaling")
    crossings = crossing_times(scaled, s.thresholds, s.loss_target, s.target_c) if len(scaled) else pd.DataFrame()
    records = (convergence_time_fits(crossings, s) if len(crossings) else []) + (
        concentration_fits(scaled, s) if len(scaled) else []
    )
    joint = n_star_fits(transfer, s) + online_error_fits(transfer, s)
    claims = (
        fit_claims(records)
        + kappa_claims(crossings, s, algorithm_of(traj))
        + concentration_claims(records, s)
        + (prediction_claims(scaled, predictions, s) if predictions is not None and len(scaled) else [])
        + (kappa_c_claims(scaled, crossings, predictions, s) if predictions is not None and len(scaled) else [])
        + batch_claims(scaled, crossings, s)
        + mechanism_claims(scaled, s)
        + (reference_claims(by_D(flow_runs(scaled), crossings, s), s) if s.reference_by_D else [])
        + stability_by_D(traj, s)
        + stability_claims(traj)
        + final_state_claims(traj, s)
        + [row for r in joint for row in r.claims(s)]
        + shape_claims(joint, s)
        + online_form_claims(transfer, s)
        + sample_gap_claims(transfer, s)
        + protocol_claims(transfer, s)
    )
    table = machine_robust(pd.DataFrame(claims, columns=CLAIM_COLUMNS), s)
    return Analysis(records, table, ablation_table(traj, transfer, s), crossings, joint)
