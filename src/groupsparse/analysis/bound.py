"""The theorem's sufficient time with its constant, and the batch check (docs/STUDY.md section 3.4).

* kappa_c: T* = Theta(D^3) is an upper bound with a hidden constant. What the measured D can say
  about it is the constant it needs there: kappa_c = max over D of tau_c(D) / D^3, tau_c(D) the
  geometric mean over seeds of the flow time eta x steps until min_j S[j*, j] >= 1 - exp(-c D).
  Over a finite range such a maximum always exists and often sits at the largest D, so the local
  slopes of log tau_c on log D between neighbouring levels are printed beside it. Its interval accounts
  for its being a maximum: each level's t interval at confidence 1 - 0.05 / L (Bonferroni over the L
  levels), the largest lower and upper ends (``stats.max_of_means_interval``; coverage:
  tests/unit/test_theorem_coverage.py, where the level-of-the-maximum interval undercovers near ties).
* The batch check: the grid's tasks at other batches, paired by seed. Per (d, D) and headline
  quantity (log flow time to the theorem's smallest target, log(1 - min attention) at each kappa)
  the paired difference from the grid's batch, against ``batch_tolerance``: the run reports whether
  its batch sufficed. (Finite batches leave the theorem's invariant subspace from about D = 16 on,
  so their batch -> infinity limit is not population GD: population GD is measured directly, by
  population mode, and the batch check only asks whether that measurement depends on its batch.)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..study.runs import is_check_variant
from .flow_study import by_D_rows
from .predict import rest_values
from .rows import claim_row
from .scaling_laws import MIN_ATTENTION, REACHED_AT_START, grid_rows
from .settings import Settings
from .statements import About, grid_text, setting_words
from .stats import MIN_SEEDS, max_of_means_interval, mean_interval

# the by-D table's label of the flow time to a theorem target (its readers select rows by it)
TARGET_QUANTITY = "flow time until min attention >= 1 - exp(-{c:g} D)"


def _post_hoc(s: Settings) -> str:
    return " (c chosen after seeing data)" if s.target_c_post_hoc else " (c fixed before the data)"


def _batches(df: pd.DataFrame) -> str:
    """Which batch and step size the numbers are at (the grid's own)."""
    batch = sorted({int(b) for b in df["batch"].dropna()}) if "batch" in df.columns else []
    etas = sorted({round(float(e), 6) for e in df["eta"].dropna()}) if "eta" in df.columns else []
    eta = (
        (f"eta = {etas[0]:g}" if len(etas) == 1 else "eta(D) from " + ", ".join(f"{e:.4g}" for e in etas))
        if etas
        else ""
    )
    return ", ".join(x for x in (f"batch {', '.join(map(str, batch))}" if batch else "", eta) if x)


def local_slopes(Ds, log_means) -> list[float]:
    """Slopes of log tau on log D between neighbouring levels."""
    x, y = np.log(np.asarray(Ds, float)), np.asarray(log_means, float)
    return list(np.diff(y) / np.diff(x))


def kappa_claims(crossings: pd.DataFrame, s: Settings, algorithm: str = "batch") -> list[dict]:
    """Per d and c: kappa_c = max over D of tau_c(D) / D^3 (flow time), with an interval; a bound's wording."""
    rows = []
    if not len(crossings):
        return rows
    cr = grid_rows(crossings)
    cr = cr[(cr["quantity"] == MIN_ATTENTION) & (cr["role"] == "scaling")]
    for (d, c), g in cr.groupby(["d", "c"], sort=True):
        levels, at_start = [], {}
        for D, h in g.groupby("D", sort=True):
            early = h["reason"].astype(str).str.startswith(REACHED_AT_START)
            if early.all():  # the target lies below the start: tau_c(D) at most the first record's
                at_start[int(D)] = float(h["eta"].max() * h["step"].max()) / D**3
                continue
            with np.errstate(divide="ignore"):
                logs = np.log(h["flow_time"].to_numpy(float)) - 3 * math.log(D)
            m, lo, hi = mean_interval(logs)
            levels.append((int(D), m, lo, hi, bool(h["censored"].any()), len(h), logs))
        if not levels:
            continue
        censored = [f"D={D}" for D, *_, cens, _, _ in levels if cens]
        D_max = max([D for D, *_ in levels] + list(at_start))
        # the largest level mean, its interval Bonferroni's over the levels (a maximum's: stats.max_of_means_interval)
        m, lo, hi, top = max_of_means_interval([L[-1] for L in levels])
        D_top, k = levels[top][0], levels[top][5]
        levels = [L[:6] for L in levels]
        # a level reached at the start bounds its ratio from above: below the maximum it cannot be the maximum
        above = [D for D, bound in at_start.items() if bound >= math.exp(m)]
        censored += [f"D={D} (reached at the start)" for D in above]
        blocker = f"level(s) {', '.join(censored)} censored: kappa is at least their bound" if censored else ""
        blocker = blocker or (f"{k} seed(s) at D = {D_top}, need {MIN_SEEDS}" if k < MIN_SEEDS else "")
        ratios = ", ".join(f"D={D}: {math.exp(v):.3g}" for D, v, *_ in levels)
        Ds = [L[0] for L in levels]
        slopes = local_slopes(Ds, [L[1] + 3 * math.log(L[0]) for L in levels])
        slope_text = ", ".join(f"{a}-{b}: {v:.2f}" for a, b, v in zip(Ds, Ds[1:], slopes))
        still = (
            f"; the largest ratio is at the largest D ({D_top}): the constant may still grow with D"
            if D_top == D_max
            else f"; largest at D = {D_top}, below it at D = {D_max}"
        )
        measured_D = sorted([D for D, *_ in levels] + list(at_start))
        about = About(
            d=float(d),
            D=float(D_top),
            D_grid=grid_text(measured_D),
            c=float(c),
            c_when="chosen after seeing data" if s.target_c_post_hoc else "fixed before the data",
            algorithm=algorithm,
            batch=float(g["batch"].max()) if "batch" in g.columns else math.nan,
            replicates=float(k),
        )
        row = _descriptive_log_row(
            "bound_constant",
            about,
            "T* = Theta(D^3): a sufficient time with a hidden constant; the measured D give the constant they need",
            (m, lo, hi),
            blocker,
            f"d = {d}, c = {c:g}{_post_hoc(s)}, {_batches(g)}; tau_c(D) / D^3 (flow time eta x steps, geometric mean "
            f"over seeds) per level: {ratios}; local slopes of log tau_c on log D: {slope_text}; "
            f"interval: the largest of the levels' t intervals at confidence 1 - 0.05 / {len(levels)} (Bonferroni: "
            f"it covers the largest mean over the {len(levels)} levels)"
            + (f"; censored: {', '.join(censored)}" if censored else "")
            + (
                f"; the target lies below the start at D = {sorted(at_start)}, left out (its ratio is at most "
                + ", ".join(f"{v:.3g}" for v in at_start.values())
                + ")"
                if at_start
                else ""
            ),
            int(sum(L[-1] for L in levels)),
        )
        row["why"] = blocker or (
            f"reached within flow time kappa D^3 at every measured D ({grid_text(measured_D)}), "
            f"kappa = {math.exp(m):.3g} [{math.exp(lo):.3g}, {math.exp(hi):.3g}]{still}; local slopes {slope_text}"
        )
        rows.append(row)
    return rows


def _batch_quantities(traj: pd.DataFrame, crossings: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """Per (d, D, variant, seed) of the grid and its batch check: the headline quantities, long format."""
    scaled = traj[traj["role"] == "scaling"]
    variants = scaled["variant"].fillna("").astype(str) if "variant" in scaled.columns else pd.Series("", scaled.index)
    runs = scaled[(variants == "") | variants.map(is_check_variant).astype(bool)].assign(variant=variants)
    if "batch" not in runs.columns or not len(runs):
        return pd.DataFrame()
    columns = ["d", "D", "variant", "batch", "eta", "seed", "quantity", "kappa", "c", "value", "censored", "grid"]
    flow = [c for c in ("samples", "rtol") if c in runs.columns]  # the flow check's settings, per variant
    columns += flow
    settings = {(v, c): _flow_setting(g, c) for v, g in runs.groupby("variant", sort=True) for c in flow}
    frames = []
    for variant, g in runs.groupby("variant", sort=True):
        v = rest_values(g.assign(variant=""), s.kappas, s)
        v = v.assign(variant=variant, quantity=[f"1 - min attention at flow time {k:g} D^3" for k in v["kappa"]])
        v = v.assign(value=v["log_rest"], censored=~np.isfinite(v["log_rest"]), grid=not variant, c=math.nan)
        v = v.assign(**{c: settings[(variant, c)] for c in flow})
        frames.append(v[columns])
    if len(crossings):
        c0 = min(s.target_c) if s.target_c else None
        cr = crossings[(crossings["role"] == "scaling") & (crossings["quantity"] == MIN_ATTENTION)]
        v = cr["variant"].fillna("").astype(str)
        cr = cr[((v == "") | v.map(is_check_variant)) & (cr["c"] == c0)]
        frames.append(
            pd.DataFrame(
                {
                    "d": cr["d"],
                    "D": cr["D"],
                    "variant": cr["variant"].fillna("").astype(str),
                    "batch": cr["batch"],
                    "eta": cr["eta"],
                    "seed": cr["seed"],
                    "quantity": TARGET_QUANTITY.format(c=c0),
                    "kappa": math.nan,
                    "c": c0,
                    "value": np.log(cr["flow_time"].to_numpy(float)),
                    "censored": cr["censored"].to_numpy(bool),
                    "grid": (cr["variant"].fillna("").astype(str) == "").to_numpy(bool),
                    **{c: [settings.get((v, c), math.nan) for v in cr["variant"].fillna("").astype(str)] for c in flow},
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _setting(h: pd.DataFrame) -> str:
    return setting_words(float(h["batch"].iloc[0]), _eta(h), _flow_setting(h, "samples"), _flow_setting(h, "rtol"))


def _flow_setting(h: pd.DataFrame, column: str) -> float:
    """The flow's outer samples or solver tolerance of these rows (NaN for gradient descent's)."""
    values = h[column].dropna() if column in h.columns else ()
    return float(values.iloc[0]) if len(values) else math.nan


def _eta(h: pd.DataFrame) -> float:
    eta = h["eta"].dropna()
    return float(eta.iloc[0]) if len(eta) else math.nan


def batch_claims(traj: pd.DataFrame, crossings: pd.DataFrame, s: Settings) -> list[dict]:
    """Per (d, D), check run and headline quantity: does the grid's value depend on its batch (or step
    size)? Paired by seed, against the tolerance."""
    rows = []
    q = _batch_quantities(traj, crossings, s)
    if not len(q):
        return rows
    tol = s.batch_tolerance
    algorithm = algorithm_of(traj)
    for (d, D, _), g in q.groupby(["d", "D", "quantity"], sort=True):
        grid = g[g["grid"].astype(bool)]
        if not len(grid):
            continue
        here = _setting(grid)
        for variant, h in g[~g["grid"].astype(bool)].groupby("variant", sort=True):
            there = _setting(h)
            pair = h.set_index("seed")["value"].sub(grid.set_index("seed")["value"]).dropna()
            cens = bool(h["censored"].any() or grid["censored"].any())
            m, lo, hi = mean_interval(pair.to_numpy(float)) if len(pair) else (math.nan,) * 3
            blocker = (
                "censored or diverged seeds, or beyond the check run's length"
                if cens
                else (f"{len(pair)} seed(s) in both runs, need {MIN_SEEDS}" if len(pair) < MIN_SEEDS else "")
            )
            kappa = float(h["kappa"].iloc[0]) if "kappa" in h.columns and pd.notna(h["kappa"].iloc[0]) else math.nan
            about = About(
                variant=str(variant),
                algorithm=algorithm,
                batch=float(h["batch"].iloc[0]),
                eta=_eta(h),
                reference_batch=float(grid["batch"].iloc[0]),
                reference_eta=_eta(grid),
                samples=_flow_setting(h, "samples"),
                rtol=_flow_setting(h, "rtol"),
                reference_samples=_flow_setting(grid, "samples"),
                reference_rtol=_flow_setting(grid, "rtol"),
                d=float(d),
                D=float(D),
                kappa=kappa,
                c=math.nan if np.isfinite(kappa) else float(h["c"].iloc[0]),
                replicates=float(len(pair)),
            )
            row = claim_row(
                "batch_check_rest" if np.isfinite(kappa) else "batch_check_time",
                about,
                None,
                m,
                lo,
                hi,
                blocker,
                f"d = {d}, D = {D}; runs {variant} against the grid; log scale, paired by seed ({len(pair)} seeds), "
                f"seeds' t interval; tolerance +-{tol:g} (scaling.analysis.batch_tolerance)",
                int(len(pair)),
                "the flow must not depend on its sample size or tolerance (a sample average approximates the "
                "population's vector field; the solver's steps its flow)"
                if algorithm == "flow"
                else "the measurement must not depend on its batch or step size (population mode estimates the "
                "population gradient; the step size approximates gradient flow)",
            )
            if blocker:
                row["verdict"], row["why"] = "inconclusive", blocker
            elif max(abs(lo), abs(hi)) <= tol:
                row["verdict"], row["why"] = "agrees", f"{here} gives the {there} value within +-{tol:g}: it suffices"
            elif (lo > tol) or (hi < -tol):
                row["verdict"] = "differs"
                row["why"] = f"{here} differs from {there} by more than {tol:g}: {here} does not suffice here"
            else:
                row["verdict"], row["why"] = "inconclusive", f"the interval straddles the tolerance {tol:g}"
            rows.append(row)
    return rows


BY_D_COLUMNS = ["group", "algorithm", "d", "D", "batch", "eta", "seeds", "quantity", "value", "low", "high", "censored"]


def by_D(traj: pd.DataFrame, crossings: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """Per scaling run group (grid, batch check, stability variant), d and D, side by side: the flow
    time to each theorem target 1 - exp(-c D) and 1 - min attention at each flow time kappa D^3, the
    geometric mean over seeds with the seeds' t interval (censored: a seed did not reach it, or the
    run is not that long)."""
    rows = []
    values = rest_values(traj.assign(variant=traj["variant"].fillna("").astype(str)).pipe(_all_groups), s.kappas, s)
    for (group, d, D, kappa), g in values.groupby(["group", "d", "D", "kappa"], sort=True):
        y = g["log_rest"].to_numpy(float)
        m, lo, hi = (math.exp(v) if np.isfinite(v) else math.nan for v in mean_interval(y))
        rows.append(
            [group, g["algorithm"].iloc[0], d, D, int(g["batch"].max()), float(g["eta"].iloc[0]), len(g),
             f"1 - min attention at flow time {kappa:g} D^3", m, lo, hi, bool((~np.isfinite(y)).any())]
        )  # fmt: skip
    if len(crossings):
        cr = crossings[(crossings["role"] == "scaling") & (crossings["quantity"] == MIN_ATTENTION)]
        for (variant, d, D, c), g in cr.groupby([cr["variant"].fillna("").astype(str), "d", "D", "c"], sort=True):
            with np.errstate(divide="ignore"):
                logs = np.log(g["flow_time"].to_numpy(float))
            m, lo, hi = (math.exp(v) if np.isfinite(v) else math.nan for v in mean_interval(logs))
            algo = _run_algorithm(traj, variant, D)
            group = f"check:{variant}" if is_check_variant(variant) else variant
            rows.append(
                [group, algo, d, D, int(g["batch"].max()), float(g["eta"].iloc[0]), len(g),
                 TARGET_QUANTITY.format(c=c), m, lo, hi, bool(g["censored"].any())]
            )  # fmt: skip
    rows += by_D_rows(traj, crossings, s)  # the flow's gaps, rates and time units (none without flow runs)
    return pd.DataFrame(rows, columns=BY_D_COLUMNS).sort_values(["quantity", "group", "d", "D"], ignore_index=True)


def _all_groups(traj: pd.DataFrame) -> pd.DataFrame:
    """Every scaling run its own group, the batch check's too (rest_values leaves those out): variant batch<b>
    renamed check:batch<b>, which no group-matching rule recognises."""
    v = traj["variant"]
    return traj.assign(variant=np.where(v.map(is_check_variant), "check:" + v, v))


def _run_algorithm(traj: pd.DataFrame, variant: str, D: int) -> str:
    runs = traj[(traj["variant"].fillna("").astype(str) == variant) & (traj["D"] == D)]
    return str(runs["algorithm"].iloc[0]) if "algorithm" in runs.columns and len(runs) else "batch"


def algorithm_of(traj: pd.DataFrame) -> str:
    """The grid's algorithm: flow (population gradient flow), population (population gradient descent) or
    batch (batch gradient descent)."""
    grid = grid_rows(traj[traj["role"] == "scaling"]) if "role" in traj.columns else traj
    if "algorithm" not in grid.columns or not len(grid):
        return "batch"
    algorithm = str(grid["algorithm"].iloc[0])
    return algorithm if algorithm in ("population", "flow") else "batch"


def _descriptive_log_row(statement, about, theory, log_interval, blocker, config, n) -> dict:
    """A claims row for a quantity estimated on the log scale (a constant, a limit): the interval back
    on the natural scale, verdict "descriptive" (no prediction to test), or "inconclusive" if blocked."""
    m, lo, hi = (math.exp(v) if np.isfinite(v) else math.nan for v in log_interval)
    row = claim_row(statement, about, None, m, lo, hi, blocker, config, n, theory)
    row["verdict"] = "inconclusive" if blocker else "descriptive"
    return row
