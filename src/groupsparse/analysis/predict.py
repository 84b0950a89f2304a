"""The pre-registered out-of-sample test (docs/STUDY.md section 3.4, test 2): 1 - min attention at kappa D^3.

Rule `predict` fits, per d, kappa and law, a line through the level means of log(1 - min over
queries of S[j*, j]) at steps kappa D^3 over the grid runs with D <= ``fit_D_max`` alone (the
rule's inputs are those runs' files), and predicts the level mean at each D of ``predict_D``:

* power law: log r linear in log D; exponential law (the theorem's exp(-Theta(D))): linear in D.
* The prediction interval is the textbook one for a new level mean: yhat -+ t_(L-2) x
  sqrt(s^2 (1 + h0)), s^2 = RSS / (L - 2) of the L fit levels, h0 = x0' (X'X)^-1 x0. s^2 holds the
  level means' seed noise and any lack of fit of the law, so the interval carries the fit's
  parameter uncertainty and the new level's own seed noise (the same seeds per level as the fit).
* Beside it, the interval of a law taken as exact (seed noise only): the parameter variance from
  the seeds' spread at each level plus the pooled between-seed variance over k seeds of the new
  level, Welch-Satterthwaite degrees of freedom; and the lack-of-fit test of each law on the fit
  levels (F = s^2 / mean(s_i^2 / k_i)).

Both interval methods are checked for coverage in tests/unit/test_theorem_coverage.py. The
verdict (:func:`prediction_claims`) compares the measured level mean at each D > fit_D_max with
each law's interval: one law, both, or neither holds it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from .concentration import rest_at
from .scaling_laws import MIN_ATTENTION, grid_rows
from .settings import Settings
from .stats import CONFIDENCE, MIN_SEEDS, mean_interval, t_quantile

LAW_X = {"power": np.log, "exponential": lambda D: np.asarray(D, dtype=float)}
LAW_TEXT = {"power": "power law (log r linear in log D)", "exponential": "exponential law (log r linear in D)"}
PREDICTION_COLUMNS = [
    "d",
    "kappa",
    "law",
    "D",
    "step",
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
    "slope",
    "intercept",
    "rss",
    "lack_of_fit_p",
    "seed_sd",
    "fit_levels",
    "seeds_per_level",
    "fit_D_max",
    "quantity",
    "batch",
    "confidence",
    "blocker",
]


def rest_values(traj: pd.DataFrame, kappas) -> pd.DataFrame:
    """Per grid run (d, D) and seed: log(1 - min attention) at steps kappa D^3 (NaN with a reason if
    it cannot be read: beyond the run, diverged, below float32 resolution)."""
    traj = grid_rows(traj)
    traj = traj[traj["role"] == "scaling"] if "role" in traj.columns else traj
    column = MIN_ATTENTION if MIN_ATTENTION in traj.columns else "attention_on_relevant"
    rows = []
    for (d, D, seed), c in traj.sort_values("step").groupby(["d", "D", "seed"], sort=True):
        c = c.drop_duplicates("step", keep="last")
        for kappa in kappas:
            step = float(kappa) * float(D) ** 3
            rest, why = rest_at(c, column, step)
            rows.append(
                {
                    "d": int(d),
                    "D": int(D),
                    "kappa": float(kappa),
                    "seed": int(seed),
                    "step": step,
                    "log_rest": math.log(rest) if not why else math.nan,
                    "reason": why,
                    "quantity": column,
                    "batch": int(c["batch"].iloc[0]) if "batch" in c.columns else -1,
                }
            )
    return pd.DataFrame(rows, columns=["d", "D", "kappa", "seed", "step", "log_rest", "reason", "quantity", "batch"])


def line_prediction(x: np.ndarray, Y: np.ndarray, x0: np.ndarray) -> dict[str, np.ndarray]:
    """Both prediction intervals of a new level mean at ``x0``, vectorised over studies.

    ``x``: (L,) level positions; ``Y``: (..., L, k) seeds' values per level (no NaN); ``x0``: (m,).
    Returns arrays (..., m): prediction, half widths and degrees of freedom of the textbook interval
    (``half``, ``dof``) and of the seed-noise-only one (``half_seed``, ``dof_seed``), and (...,) the
    slope, intercept, RSS, lack-of-fit p-value and pooled seed sd.
    """
    x, x0 = np.asarray(x, dtype=float), np.asarray(x0, dtype=float)
    L, k = Y.shape[-2], Y.shape[-1]
    ybar = Y.mean(axis=-1)  # (..., L)
    s2 = Y.var(axis=-1, ddof=1) if k > 1 else np.full(ybar.shape, np.nan)
    X = np.column_stack([np.ones(L), x])
    H = np.linalg.pinv(X)  # (2, L)
    beta = ybar @ H.T  # (..., 2)
    resid = ybar - beta @ X.T
    rss = (resid**2).sum(axis=-1)
    X0 = np.column_stack([np.ones_like(x0), x0])
    W0 = X0 @ H  # (m, L): prediction weights on the level means
    pred = beta @ X0.T  # (..., m)
    h0 = (W0**2).sum(axis=-1)  # x0' (X'X)^-1 x0
    dof = L - 2
    s2_fit = rss / dof if dof > 0 else np.full(rss.shape, np.nan)
    half = t_quantile(dof) * np.sqrt(s2_fit[..., None] * (1 + h0)) if dof > 0 else np.full(pred.shape, np.nan)
    # seed noise only: sum_i c_i s_i^2, c_i = w_i^2 / k + (k - 1) / (L (k - 1)) / k (pooled s^2 over k new seeds)
    c = (W0**2) / k + 1.0 / (L * k)  # (m, L)
    var_seed = s2 @ c.T  # (..., m)
    terms = (s2[..., None, :] * c) ** 2 / (k - 1) if k > 1 else np.full(var_seed.shape + (L,), np.nan)
    dof_seed = var_seed**2 / terms.sum(axis=-1)
    half_seed = sps.t.ppf(0.5 + CONFIDENCE / 2, dof_seed) * np.sqrt(var_seed)
    noise = s2.mean(axis=-1) / k  # the level means' variance from seed noise alone
    with np.errstate(divide="ignore", invalid="ignore"):
        lof_p = sps.f.sf(s2_fit / noise, dof, L * (k - 1)) if dof > 0 else np.full(rss.shape, np.nan)
    return {
        "pred": pred,
        "half": half,
        "dof": np.broadcast_to(float(dof), pred.shape),
        "half_seed": half_seed,
        "dof_seed": dof_seed,
        "slope": beta[..., 1],
        "intercept": beta[..., 0],
        "rss": rss,
        "lack_of_fit_p": lof_p,
        "seed_sd": np.sqrt(s2.mean(axis=-1)),
    }


def predictions(traj: pd.DataFrame, s: Settings) -> pd.DataFrame:
    """The predictions table: per d, kappa, law and D of ``predict_D``, fitted on D <= ``fit_D_max``.

    Refuses (ValueError) a table that holds a grid run with D > fit_D_max: the rule's inputs must
    be the fit levels alone, so the prediction cannot have seen what it is tested on.
    """
    values = rest_values(traj, s.kappas)
    beyond = sorted(values.loc[values["D"] > s.fit_D_max, "D"].unique())
    if beyond:
        raise ValueError(f"predict: the input holds grid runs with D = {beyond} > scaling.analysis.fit_D_max")
    rows = []
    targets = np.asarray(s.predict_D, dtype=float)
    for (d, kappa), g in values.groupby(["d", "kappa"], sort=True):
        per_level = {D: h.sort_values("seed")["log_rest"].to_numpy(float) for D, h in g.groupby("D", sort=True)}
        censored = [f"D={D}" for D, v in per_level.items() if not np.isfinite(v).all()]
        kept = {D: v for D, v in per_level.items() if np.isfinite(v).all()}
        k = min((v.size for v in kept.values()), default=0)
        blocker = f"level(s) {', '.join(censored)} censored, left out" if censored else ""
        if len(kept) < 3 or k < MIN_SEEDS:
            blocker = blocker or f"{len(kept)} level(s) with {k} seed(s): need 3 levels and {MIN_SEEDS} seeds"
        Ds = np.array(sorted(kept), dtype=float)
        Y = np.array([kept[D][:k] for D in sorted(kept)]) if kept else np.empty((0, 0))
        for law in s.laws:
            base = {
                "d": int(d),
                "kappa": float(kappa),
                "law": law,
                "fit_levels": "; ".join(f"D={int(D)}" for D in Ds),
                "seeds_per_level": int(k),
                "fit_D_max": int(s.fit_D_max),
                "quantity": str(g["quantity"].iloc[0]),
                "batch": int(g["batch"].max()),
                "confidence": CONFIDENCE,
                "blocker": blocker,
            }
            if len(kept) < 3 or k < MIN_SEEDS:
                rows += [base | {"D": int(D), "step": float(kappa) * D**3} for D in targets]
                continue
            p = line_prediction(LAW_X[law](Ds), Y, LAW_X[law](targets))
            for j, D in enumerate(targets):
                y, h, hs = float(p["pred"][j]), float(p["half"][j]), float(p["half_seed"][j])
                rows.append(
                    base
                    | {
                        "D": int(D),
                        "step": float(kappa) * D**3,
                        "log_rest": y,
                        "log_low": y - h,
                        "log_high": y + h,
                        "rest": math.exp(y),
                        "rest_low": math.exp(y - h),
                        "rest_high": math.exp(y + h),
                        "dof": float(p["dof"][j]),
                        "rest_low_seed_only": math.exp(y - hs),
                        "rest_high_seed_only": math.exp(y + hs),
                        "dof_seed_only": float(p["dof_seed"][j]),
                        "slope": float(p["slope"]),
                        "intercept": float(p["intercept"]),
                        "rss": float(p["rss"]),
                        "lack_of_fit_p": float(p["lack_of_fit_p"]),
                        "seed_sd": float(p["seed_sd"]),
                    }
                )
    return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)


def prediction_claims(traj: pd.DataFrame, preds: pd.DataFrame, s: Settings) -> list[dict]:
    """Per (d, kappa) and each measured D > fit_D_max with predictions: which law's interval holds the
    measured level mean of log(1 - min attention) at kappa D^3 (one law, both laws, neither law)."""
    from .rows import claim_row

    rows = []
    if not len(preds):
        return rows
    values = rest_values(traj, s.kappas)
    values = values[values["D"] > s.fit_D_max]
    for (d, kappa, D), g in values.groupby(["d", "kappa", "D"], sort=True):
        p = preds[(preds["d"] == d) & (preds["kappa"] == kappa) & (preds["D"] == D)]
        if not len(p):
            continue
        y = g["log_rest"].to_numpy(float)
        m, lo, hi = mean_interval(y)
        blocker = ("; ".join(sorted(set(g.loc[~np.isfinite(y), "reason"]))) if not np.isfinite(y).all() else "") or (
            p["blocker"].iloc[0] if p["blocker"].astype(bool).any() else ""
        )
        inside, close = {}, []
        margin = math.log1p(s.machine_spread)  # a relative spread of r, on the log scale
        for _, r in p.iterrows():
            inside[r["law"]] = bool(r["log_low"] <= m <= r["log_high"]) if np.isfinite(m) else False
            if np.isfinite(m) and min(abs(m - r["log_low"]), abs(m - r["log_high"])) < margin:
                close.append(r["law"])
        if close and not blocker:
            blocker = (
                f"could flip under the cross-machine spread ({s.machine_spread:.2g} relative): the measured value "
                f"lies that close to the edge of the {' and '.join(close)} interval"
            )
        held = [law for law, ok in inside.items() if ok]
        outcome = (
            "inconclusive"
            if blocker
            else "both laws"
            if len(held) == len(inside) > 1
            else f"one law: {held[0]}"
            if len(held) == 1
            else "neither law"
        )
        detail = "; ".join(
            f"{r['law']}: predicted {r['rest']:.4g} [{r['rest_low']:.4g}, {r['rest_high']:.4g}] "
            f"(seed noise only [{r['rest_low_seed_only']:.4g}, {r['rest_high_seed_only']:.4g}]; "
            f"lack of fit on D <= {s.fit_D_max}: p = {r['lack_of_fit_p']:.2g})"
            for _, r in p.iterrows()
        )
        row = claim_row(
            f"out-of-sample: which law predicts 1 - min attention at {kappa:g} D^3 steps, D = {D} (d = {d})",
            "after T* ~ D^3 steps, 1 - S[j*, j] <= exp(-Theta(D)); laws fitted on D <= "
            f"{s.fit_D_max} alone (rule predict), tested at D = {D}",
            None,
            math.exp(m) if np.isfinite(m) else math.nan,
            math.exp(lo) if np.isfinite(lo) else math.nan,
            math.exp(hi) if np.isfinite(hi) else math.nan,
            blocker,
            f"d = {d}, D = {D}, step {kappa * D**3:g}, batch {int(g['batch'].max())} (predictions: batch "
            f"{int(p['batch'].max())}); measured: geometric mean over {np.isfinite(y).sum()} seeds of "
            f"1 - min attention, seeds' t interval; {detail}",
            "out_of_sample",
            int(np.isfinite(y).sum()),
            settings={"d": int(d), "D": int(D)},
        )
        row["verdict"] = outcome if not blocker else "inconclusive"
        row["why"] = blocker or (
            "measured "
            + f"{math.exp(m):.4g} inside the prediction interval of "
            + (" and ".join(held) if held else "no law")
        )
        rows.append(row)
    return rows
