"""The pre-registered out-of-sample test (docs/STUDY.md section 3.4): 1 - min attention at flow time kappa D^3.

Rule `predict` reads the scaling runs with D <= ``fit_D_max`` alone (its inputs are those runs'
files) and fits, per group of runs (the grid: variant ''; each stability variant, e.g. plain
batch-512 training beside population gradient descent), d, kappa and law (:mod:`.laws`: the
theorem's form, a power of D, the nested model), the level means of log r, r = 1 - min over queries
of S[j*, j] at flow time tau = eta x steps = kappa D^3, and predicts each D of ``predict_D`` with
its prediction interval.

The verdict (:func:`prediction_claims`) uses one criterion for every law, fixed before the data
(``law_criterion``): the sum over the tested D of the absolute log error of the point prediction.
The smallest wins; a law that fails lack of fit in-sample (p < ``lack_of_fit_alpha``) is marked so
and cannot pass, whatever its error. Intervals are reported, not used to decide: a law that misfits
in-sample has wide intervals, which would let it "pass" by containing almost anything. The
criterion's power is simulated under each law at the study's design (:func:`.laws.criterion_power`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..study.runs import is_check_variant
from .concentration import rest_at
from .laws import criterion_power, design, law_prediction
from .scaling_laws import MIN_ATTENTION, flow_times, theorem_quantity
from .settings import Settings
from .statements import ALGORITHM_WORDS, WHERE, About, grid_text, words
from .stats import CONFIDENCE, MIN_SEEDS, mean_interval

GRID = ""  # the grid's own runs; every other group is a stability variant


PREDICTION_COLUMNS = [
    "group",
    "d",
    "kappa",
    "law",
    "D",
    "flow_time",
    "log_rest",
    "log_low",
    "log_high",
    "rest",
    "rest_low",
    "rest_high",
    "dof",
    "rest_low_seed_only",
    "rest_high_seed_only",
    "dof_seed_only",
    "coefficients",
    "rss",
    "lack_of_fit_p",
    "seed_sd",
    "fit_levels",
    "seeds_per_level",
    "fit_D_max",
    "quantity",
    "algorithm",
    "batch",
    "eta_rule",
    "confidence",
    "blocker",
]


def _groups(traj: pd.DataFrame) -> pd.Series:
    """Each row's group: the grid (variant '') or its stability variant; the batch check's runs
    (variant batch<b>, the grid's tasks at another batch) belong to no group."""
    variant = traj["variant"].fillna("").astype(str) if "variant" in traj.columns else pd.Series("", traj.index)
    return variant.where(~variant.map(is_check_variant), None)


def rest_values(traj: pd.DataFrame, kappas, s: Settings | None = None) -> pd.DataFrame:
    """Per scaling run (group, d, D) and seed: log r at flow time kappa D^3 (NaN with a reason if it
    cannot be read: beyond the run, diverged, below float32 resolution), population runs' r from the
    pooled estimate where ``s`` says so."""
    traj = traj[traj["role"] == "scaling"] if "role" in traj.columns else traj
    if s is not None:
        traj = theorem_quantity(traj, s)
    traj = traj.assign(group=_groups(traj)).dropna(subset=["group"])
    column = MIN_ATTENTION if MIN_ATTENTION in traj.columns else "attention_on_relevant"
    rows = []
    for (group, d, D, seed), c in traj.sort_values("step").groupby(["group", "d", "D", "seed"], sort=True):
        c = c.drop_duplicates("step", keep="last")
        taus = flow_times(c)
        eta = float(taus[-1] / c["step"].iloc[-1]) if c["step"].iloc[-1] > 0 else math.nan
        for kappa in kappas:
            tau = float(kappa) * float(D) ** 3
            rest, why = rest_at(c, column, tau)
            rows.append(
                {
                    "group": str(group),
                    "d": int(d),
                    "D": int(D),
                    "kappa": float(kappa),
                    "seed": int(seed),
                    "flow_time": tau,
                    "log_rest": math.log(rest) if not why else math.nan,
                    "reason": why,
                    "quantity": _quantity(c, column),
                    "algorithm": str(c["algorithm"].iloc[0]) if "algorithm" in c.columns else "batch",
                    "samples": float(c["samples"].iloc[0]) if "samples" in c.columns else math.nan,
                    "rtol": float(c["rtol"].iloc[0]) if "rtol" in c.columns else math.nan,
                    "batch": int(c["batch"].iloc[0]) if "batch" in c.columns else -1,
                    "eta": eta,
                }
            )
    columns = ["group", "d", "D", "kappa", "seed", "flow_time", "log_rest", "reason", "quantity", "algorithm"]
    return pd.DataFrame(rows, columns=columns + ["batch", "eta", "samples", "rtol"])


def _quantity(c: pd.DataFrame, column: str) -> str:
    pooled = "algorithm" in c.columns and (c["algorithm"] == "population").all() and column == MIN_ATTENTION
    return f"{column} (pooled over queries j != j*)" if pooled and "attention_min_pooled" in c.columns else column


def _eta_rule(g: pd.DataFrame) -> str:
    """The step sizes of a group's levels, as printed in the predictions table: one eta, or eta per D."""
    per_D = g.groupby("D")["eta"].first()
    values = sorted({round(float(v), 6) for v in per_D if np.isfinite(v)})
    if len(values) <= 1:
        return f"eta = {values[0]:g}" if values else "eta unknown"
    return "eta(D): " + ", ".join(f"D={int(D)}: {v:.4g}" for D, v in per_D.items())


def fit_levels(values: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(fit levels D, seeds' log r per level (levels x k, k the fewest seeds), the censored levels' names) of
    one group's, d's and kappa's rows of :func:`rest_values`: a level with a censored seed is left out."""
    per_level = {D: h.sort_values("seed")["log_rest"].to_numpy(float) for D, h in values.groupby("D", sort=True)}
    censored = [f"D={D}" for D, v in per_level.items() if not np.isfinite(v).all()]
    kept = {D: v for D, v in per_level.items() if np.isfinite(v).all()}
    k = min((v.size for v in kept.values()), default=0)
    Ds = np.array(sorted(kept), dtype=float)
    Y = np.array([kept[D][:k] for D in sorted(kept)]) if kept else np.empty((0, 0))
    return Ds, Y, censored


def predictions(traj: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """The predictions table: per group, d, kappa, law and D of ``predict_D``, fitted on D <= ``fit_D_max``.

    Refuses (ValueError) a table that holds a scaling run with D > fit_D_max: the rule's inputs must
    be the fit levels alone, so the prediction cannot have seen what it is tested on.
    """
    values = rest_values(traj, s.kappas, s)
    beyond = sorted(values.loc[values["D"] > s.fit_D_max, "D"].unique())
    if beyond:
        raise ValueError(f"predict: the input holds scaling runs with D = {beyond} > scaling.analysis.fit_D_max")
    rows = []
    targets = np.asarray(s.predict_D, dtype=float)
    for (group, d, kappa), g in values.groupby(["group", "d", "kappa"], sort=True):
        Ds, Y, censored = fit_levels(g)
        kept, k = Ds.size, Y.shape[1] if Y.size else 0
        for law in s.laws:
            p_law = design(law, [4.0])[0].shape[1]
            blocker = f"level(s) {', '.join(censored)} censored, left out" if censored else ""
            if kept < p_law + 1 or k < MIN_SEEDS:
                blocker = blocker or (
                    f"{kept} level(s) with {k} seed(s): {law} needs {p_law + 1} levels and {MIN_SEEDS} seeds"
                )
            base = {
                "group": str(group),
                "d": int(d),
                "kappa": float(kappa),
                "law": law,
                "fit_levels": "; ".join(f"D={int(D)}" for D in Ds),
                "seeds_per_level": int(k),
                "fit_D_max": int(s.fit_D_max),
                "quantity": str(g["quantity"].iloc[0]),
                "algorithm": str(g["algorithm"].iloc[0]),
                "batch": int(g["batch"].max()),
                "eta_rule": _eta_rule(g),
                "confidence": CONFIDENCE,
                "blocker": blocker,
            }
            if kept < p_law + 1 or k < MIN_SEEDS:
                rows += [base | {"D": int(D), "flow_time": float(kappa) * D**3} for D in targets]
                continue
            p = law_prediction(law, Ds, Y, targets)
            for j, D in enumerate(targets):
                y, h, hs = float(p["pred"][j]), float(p["half"][j]), float(p["half_seed"][j])
                top = min(y + h, 0.0)  # r = 1 - attention is at most 1: the interval stays in its range
                rows.append(
                    base
                    | {
                        "D": int(D),
                        "flow_time": float(kappa) * D**3,
                        "log_rest": y,
                        "log_low": y - h,
                        "log_high": top,
                        "rest": math.exp(y),
                        "rest_low": math.exp(y - h),
                        "rest_high": math.exp(top),
                        "dof": float(p["dof"][j]),
                        "rest_low_seed_only": math.exp(y - hs),
                        "rest_high_seed_only": math.exp(min(y + hs, 0.0)),
                        "dof_seed_only": float(p["dof_seed"][j]),
                        "coefficients": " ".join(f"{c:.6g}" for c in p["coef"]),
                        "rss": float(p["rss"]),
                        "lack_of_fit_p": float(p["lack_of_fit_p"]),
                        "seed_sd": float(p["seed_sd"]),
                    }
                )
    return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)


def prediction_claims(traj: pd.DataFrame, preds: pd.DataFrame, s: Settings) -> list[dict]:
    """Rows for the claims table: per (group, d, kappa) and measured D > fit_D_max, the measurement
    against each law's prediction (descriptive); and per (group, d, kappa) the pre-registered verdict
    (the law with the smallest sum of absolute log errors over the tested D, lack of fit marked)."""

    rows = []
    if not len(preds):
        return rows
    values = rest_values(traj, s.kappas, s)
    fit_values = values[values["D"] <= s.fit_D_max]
    values = values[values["D"] > s.fit_D_max]
    for (group, d, kappa), cell in values.groupby(["group", "d", "kappa"], sort=True):
        p_all = preds[(preds["group"] == group) & (preds["d"] == d) & (preds["kappa"] == kappa)]
        for (algorithm, fit_D_max), p_cell in p_all.groupby(["algorithm", "fit_D_max"], sort=True):
            own = int(fit_D_max) == s.fit_D_max and algorithm == str(cell["algorithm"].iloc[0])
            about = _group(group, d, kappa, p_cell, cell, own)
            fit = fit_values[(fit_values["group"] == group) & (fit_values["d"] == d) & (fit_values["kappa"] == kappa)]
            rows += _judged(cell, p_cell, about, fit if own else fit.iloc[:0], s)
    return rows


def _judged(cell: pd.DataFrame, p_cell: pd.DataFrame, about: About, fit: pd.DataFrame, s: Settings) -> list[dict]:
    """One source of predictions (``p_cell``: laws fitted on one set of runs) against one group's
    measurements (``cell``) at one (d, kappa): the out-of-sample rows, the verdict, the law differences
    and (for the group's own fit, ``fit`` its fit levels) each law's rate."""
    from .law_difference import law_difference_rows, law_rate_rows
    from .rows import claim_row

    rows = []
    d, kappa = about.d, about.kappa
    where = WHERE.format(**words("law_test", about))
    errors, blockers, measured, level_stats = {}, [], {}, {}
    for D, g in cell.groupby("D", sort=True):
        p = p_cell[p_cell["D"] == D]
        if not len(p):
            continue
        y = g["log_rest"].to_numpy(float)
        m, lo, hi = mean_interval(y)
        why = "; ".join(sorted(set(g.loc[~np.isfinite(y), "reason"]))) if not np.isfinite(y).all() else ""
        measured[int(D)] = (m, lo, hi, why)
        x = y[np.isfinite(y)]
        level_stats[int(D)] = (m, float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan, x.size)
        blockers += [f"D={D}: {why}"] if why else []
        detail = []
        for _, r in p.iterrows():
            err = abs(m - r["log_rest"]) if np.isfinite(m) and np.isfinite(r["log_rest"]) else math.nan
            errors.setdefault(r["law"], {})[int(D)] = err
            inside = bool(r["log_low"] <= m <= r["log_high"]) if np.isfinite(m) else False
            detail.append(
                f"{r['law']}: predicted {r['rest']:.4g} [{r['rest_low']:.4g}, {r['rest_high']:.4g}] "
                f"(|log error| {err:.3g}; interval {'holds' if inside else 'misses'} it)"
            )
        best = min(errors, key=lambda law: errors[law].get(int(D), math.inf)) if errors else ""
        row = claim_row(
            "out_of_sample",
            replace(about, D=float(D), eta=float(g["eta"].iloc[0]), replicates=float(np.isfinite(y).sum())),
            None,
            math.exp(m) if np.isfinite(m) else math.nan,
            math.exp(lo) if np.isfinite(lo) else math.nan,
            math.exp(hi) if np.isfinite(hi) else math.nan,
            why,
            f"{where}; d = {d:.0f}, D = {D}, flow time {kappa * D**3:g}, {_eta_at(g)}, batch "
            f"{int(g['batch'].max())}; measured: geometric mean over {np.isfinite(y).sum()} seeds of "
            f"{g['quantity'].iloc[0]}, seeds' t interval; " + "; ".join(detail),
            int(np.isfinite(y).sum()),
            f"laws fitted on {about.fitted_on or f'D <= {s.fit_D_max}'} alone (rule predict), each predicting D = {D}",
        )
        row["verdict"] = "inconclusive" if why else "descriptive"
        row["why"] = why or f"closest point prediction: {best}"
        rows.append(row)
    if not measured:
        return rows
    tested = replace(about, D_grid=grid_text(sorted(measured)), replicates=_fewest(level_stats))
    rows.append(_verdict_row(tested, where, p_cell, errors, measured, blockers, fit, s))
    rows += law_difference_rows(tested, level_stats, p_cell, blockers, s)
    if len(fit):  # the group's own fit levels: each law's rate
        Ds, Y, censored = fit_levels(fit)
        rows += law_rate_rows(replace(about, replicates=float(Y.shape[-1]) if Y.size else 0.0), Ds, Y, censored, s)
    return rows


def _fewest(level_stats: dict) -> float:
    return float(min((k for *_, k in level_stats.values()), default=0))


def _group(group: str, d, kappa, p_cell: pd.DataFrame, cell: pd.DataFrame, own: bool) -> About:
    """The typed columns of a group of runs in the law test: its algorithm, batch and step sizes (the flow:
    its samples and tolerance), and where the laws were fitted when not on the group's own runs."""
    algorithm = str(cell["algorithm"].iloc[0]) if "algorithm" in cell.columns else str(p_cell["algorithm"].iloc[0])
    fitted = str(p_cell["algorithm"].iloc[0])
    flow = algorithm == "flow"
    return About(
        variant=str(group),
        algorithm=algorithm,
        batch=float(p_cell["batch"].max()) if own else math.nan,
        eta_rule=str(p_cell["eta_rule"].iloc[0]) if own else "",
        samples=float(cell["samples"].iloc[0]) if flow and "samples" in cell.columns else math.nan,
        rtol=float(cell["rtol"].iloc[0]) if flow and "rtol" in cell.columns else math.nan,
        fitted_on=""
        if own
        else f"{ALGORITHM_WORDS.get(fitted, fitted)} runs with D <= {int(p_cell['fit_D_max'].max())}",
        d=float(d),
        kappa=float(kappa),
    )


def _eta_at(g: pd.DataFrame) -> str:
    eta = float(g["eta"].iloc[0])
    return f"eta = {eta:.4g}" if np.isfinite(eta) else "eta unknown"


def _verdict_row(about: About, where, p_cell, errors, measured, blockers, fit, s: Settings) -> dict:
    """The pre-registered verdict of one (group, d, kappa): the criterion over every tested D."""
    from .rows import claim_row

    tested = sorted(measured)
    missing = sorted(set(s.predict_D) - set(tested))
    lof = {law: float(q["lack_of_fit_p"].iloc[0]) for law, q in p_cell.groupby("law")}
    blocked = [law for law, q in p_cell.groupby("law") if q["blocker"].astype(bool).any()]
    totals = {law: sum(e.get(D, math.nan) for D in tested) for law, e in errors.items() if law not in blocked}
    finite = {law: v for law, v in totals.items() if np.isfinite(v)}
    blocker = "; ".join(blockers) or ("no law could be fitted" if not finite else "")
    misfit = {law for law, p in lof.items() if np.isfinite(p) and p < s.lack_of_fit_alpha}
    ranked = sorted(finite, key=finite.get)
    best = ranked[0] if ranked else ""
    power = _power(fit, s)
    between = _between(p_cell, measured)
    detail = (
        "; ".join(f"{law}: sum |log error| {finite[law]:.3g}" for law in ranked)
        + "; lack of fit on the fit levels: "
        + ", ".join(f"{law} p = {p:.2g}" for law, p in sorted(lof.items()))
        + (f"; the criterion picks the true law (simulated under each at this design): {power}" if power else "")
        + (f"; {between}" if between else "")
        + (f"; not measured at D = {missing}" if missing else "")
    )
    row = claim_row(
        "law_test",
        about,
        None,
        finite.get(best, math.nan),
        math.nan,
        math.nan,
        blocker,
        f"{where}; d = {about.d:.0f}; " + detail,
        int(sum(1 for v in measured.values() if np.isfinite(v[0]))),
        "after T* ~ D^3, min_j S[j*, j] >= 1 - exp(-Theta(D)): log r = a + log(D - 1) - c D (the theorem's form) "
        f"against a power of D and the nested model, fitted on D <= {s.fit_D_max}; criterion fixed before the data: "
        "the smallest sum of |log measured - log predicted|, a law failing lack of fit in-sample cannot pass",
    )
    row["subject"] = best
    if blocker:
        row["verdict"], row["why"] = "inconclusive", blocker
    elif best in misfit:
        row["verdict"] = "no law passes"
        row["why"] = (
            f"closest: {best} (sum |log error| {finite[best]:.3g}), but it fails lack of fit on D <= "
            f"{s.fit_D_max} (p = {lof[best]:.2g} < {s.lack_of_fit_alpha:g})"
        )
    else:
        row["verdict"] = f"{best} predicts best"
        runner = ranked[1] if len(ranked) > 1 else ""
        row["why"] = f"sum |log error| {finite[best]:.3g}" + (
            f" against {runner}'s {finite[runner]:.3g}" if runner else ""
        )
    return row


def _power(fit: pd.DataFrame, s: Settings) -> str:
    """The criterion's simulated power under each law, from the fit levels' own data (empty if unfit)."""
    per_level = {D: h.sort_values("seed")["log_rest"].to_numpy(float) for D, h in fit.groupby("D", sort=True)}
    kept = {D: v for D, v in per_level.items() if np.isfinite(v).all() and v.size >= MIN_SEEDS}
    k = min((v.size for v in kept.values()), default=0)
    if len(kept) < 4 or k < MIN_SEEDS:
        return ""
    Ds = np.array(sorted(kept), dtype=float)
    Y = np.array([kept[D][:k] for D in sorted(kept)])
    power = criterion_power(Ds, Y, np.asarray(s.predict_D, float), s.laws, reps=s.power_simulations, seed=s.study_seed)
    return ", ".join(f"{law} {v:.2f}" for law, v in power.items() if np.isfinite(v))


def _between(p_cell: pd.DataFrame, measured: dict) -> str:
    """How many tested D have the measurement between the theorem's and the power law's predictions."""
    th, pw = p_cell[p_cell["law"] == "theorem"], p_cell[p_cell["law"] == "power"]
    if not (len(th) and len(pw)):
        return ""
    inside = 0
    for D, (m, *_) in measured.items():
        a, b = th.loc[th["D"] == D, "log_rest"], pw.loc[pw["D"] == D, "log_rest"]
        if len(a) and len(b) and np.isfinite(m) and min(a.iloc[0], b.iloc[0]) <= m <= max(a.iloc[0], b.iloc[0]):
            inside += 1
    return f"measured between the theorem's and the power law's predictions at {inside} of {len(measured)} D"
