"""kappa_c(D) predicted from the pre-registered laws (docs/STUDY.md section 3.4): no new fit.

The predictions table (rule ``predict``) gives, per law, d and new D, log r at each flow time kappa D^3 with
its prediction interval. The flow time to the theorem's target r <= exp(-c D) over D^3 is where that curve
crosses -c D: the first kappa of the table's grid at or below the target, log-linear in log kappa from the
kappa before it. The interval's ends map the same way (a higher r reaches the target later), so the interval
on kappa_c is the prediction interval's image. Beyond the grid's last kappa the prediction is censored
(kappa_c > that kappa); at or below its first, kappa_c <= it.

Judged (:func:`kappa_c_claims`) at each measured D above fit_D_max: the measured tau_c(D) / D^3 (geometric
mean over seeds, t interval) inside the prediction's interval (agrees) or not (differs), a censored end read
as a bound. The criterion, the one the out-of-sample rows of r use (the measured mean inside the prediction
interval), was set on 2026-12-07 after D = 80 and 96 ran; the predictions were committed before. "agrees" is a
failure to reject: each row states its power against the rival laws' predictions (the smallest), and below
min_power it reads "undecided" (the rule of :mod:`.power`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from .power import record_power
from .rows import claim_row
from .scaling_laws import MIN_ATTENTION, grid_rows
from .settings import Settings
from .statements import ALGORITHM_WORDS, About
from .stats import mean_interval

KAPPA_C_COLUMNS = [
    "group", "d", "law", "D", "c", "kappa_c", "kappa_c_low", "kappa_c_high", "kappas", "censored", "algorithm",
    "fit_D_max", "fit_levels", "source",
]  # fmt: skip


def crossing_kappa(kappas: np.ndarray, log_rest: np.ndarray, target: float) -> tuple[float, str]:
    """The kappa at which log r (at ``kappas``, increasing) first reaches ``target`` (log-linear in log kappa),
    and '' or why it is censored: 'above' (not reached by the last kappa: the last kappa is returned) or
    'below' (reached at the first: the first kappa is returned)."""
    ok = np.isfinite(log_rest)
    k, y = kappas[ok], log_rest[ok]
    if not k.size:
        return math.nan, "no prediction"
    hit = np.nonzero(y <= target)[0]
    if not hit.size:
        return float(k[-1]), "above"
    i = int(hit[0])
    if i == 0:
        return float(k[0]), "below"
    x0, x1, y0, y1 = math.log(k[i - 1]), math.log(k[i]), y[i - 1], y[i]
    return math.exp(x0 + (target - y0) * (x1 - x0) / (y1 - y0)), ""


def kappa_c_predictions(preds: pd.DataFrame, target_c, source: str = "") -> pd.DataFrame:
    """Per group, d, law, new D and c of ``target_c``: kappa_c with the interval the prediction interval maps to."""
    rows = []
    preds = preds[np.isfinite(preds["log_rest"].astype(float))]
    keys = ["group", "d", "law", "D", "algorithm", "fit_D_max"]
    for key, g in preds.assign(group=preds["group"].fillna("")).groupby(keys, sort=True):
        g = g.sort_values("kappa")
        kappas = g["kappa"].to_numpy(float)
        for c in target_c:
            target = -float(c) * float(key[3])
            value, why = crossing_kappa(kappas, g["log_rest"].to_numpy(float), target)
            low, _ = crossing_kappa(kappas, g["log_low"].to_numpy(float), target)  # lower r: earlier
            high, why_high = crossing_kappa(kappas, g["log_high"].to_numpy(float), target)
            rows.append(
                dict(zip(keys, key))
                | {
                    "c": float(c),
                    "kappa_c": value,
                    "kappa_c_low": low,
                    "kappa_c_high": math.inf if why_high == "above" else high,
                    "kappas": " ".join(f"{k:g}" for k in kappas),
                    "censored": why,
                    "fit_levels": str(g["fit_levels"].iloc[0]),
                    "source": source,
                }
            )
    return pd.DataFrame(rows, columns=KAPPA_C_COLUMNS)


def _agrees(measured: float, censored: bool, p: pd.Series) -> bool:
    """The measured kappa_c (a lower bound where ``censored``) against a prediction and its interval, a
    censored prediction read as its bound: 'below' (kappa_c <= the first kappa), 'above' (> the last)."""
    low = 0.0 if p["censored"] == "below" else float(p["kappa_c_low"])
    high = math.inf if p["censored"] == "above" else float(p["kappa_c_high"])
    return high > measured if censored else low <= measured <= high


def _power_against(p: pd.Series, rivals: pd.DataFrame, se: float) -> tuple[float, str, float]:
    """The power of the inside-the-interval rule for law ``p`` against each rival law's kappa_c taken as the
    truth: the chance that a measured geometric mean (log: the rival's log kappa_c + se x N(0, 1), se that of the
    measured seeds' mean) falls outside ``p``'s interval. The smallest over the rivals, with that rival's name
    and value (a censored rival prediction enters at its bound, the grid's first or last kappa). NaN where the
    measurement has no standard error (one seed)."""
    low = 0.0 if p["censored"] == "below" else float(p["kappa_c_low"])
    high = math.inf if p["censored"] == "above" else float(p["kappa_c_high"])
    best = (math.nan, "", math.nan)
    for _, r in rivals.iterrows():
        alt = float(r["kappa_c"])
        if not (np.isfinite(alt) and alt > 0 and np.isfinite(se) and se > 0):
            continue
        z_low = (math.log(low) - math.log(alt)) / se if low > 0 else -math.inf
        z_high = (math.log(high) - math.log(alt)) / se if np.isfinite(high) else math.inf
        power = 1.0 - float(sps.norm.cdf(z_high) - sps.norm.cdf(z_low))
        if not power >= best[0]:
            best = (power, f"the {r['law']} law's kappa_c", alt)
    return best


def _power_past_end(rivals: pd.DataFrame, T: float) -> tuple[float, str, float]:
    """A run not reached by its end kappa T agrees with a prediction beyond T. Its power against a rival law: 1
    where the rival's whole interval lies below T (were it true, the run would have reached the target), 0 where
    the rival too lies beyond T, NaN between (the rival's interval straddles the end). The smallest over rivals."""
    best = (math.nan, "", math.nan)
    for _, r in rivals.iterrows():
        high = math.inf if r["censored"] == "above" else float(r["kappa_c_high"])
        power = 1.0 if high < T else (0.0 if float(r["kappa_c"]) >= T else math.nan)
        if not power >= best[0]:
            best = (power, f"the {r['law']} law's kappa_c", float(r["kappa_c"]))
            if not np.isfinite(power):
                break  # unknown power: the verdict cannot stand on it
    return best


def kappa_c_claims(traj: pd.DataFrame, crossings: pd.DataFrame, preds: pd.DataFrame, s: Settings) -> list[dict]:
    """Per source of predictions (the laws fitted on this study's runs, or another study's), law, c and measured
    D above fit_D_max: the measured kappa_c(D) = tau_c(D) / D^3 against the law's pre-registered kappa_c."""
    if preds is None or not len(preds) or not len(crossings):
        return []
    cr = grid_rows(crossings)
    cr = cr[(cr["quantity"] == MIN_ATTENTION) & (cr["role"] == "scaling") & (cr["D"] > s.fit_D_max)]
    runs = grid_rows(traj[traj["role"] == "scaling"]) if "role" in traj.columns else traj.iloc[:0]
    predicted = kappa_c_predictions(preds, s.target_c)
    predicted = predicted[predicted["group"] == ""]
    rows = []
    for (d, c, D), h in cr.groupby(["d", "c", "D"], sort=True):
        run = runs[(runs["d"] == d) & (runs["D"] == D)]
        algorithm = str(run["algorithm"].iloc[0]) if "algorithm" in run.columns and len(run) else ""
        flow = algorithm == "flow"
        with np.errstate(divide="ignore"):  # a target reached at the start has flow time 0: no ratio, dropped
            logs = np.log(h["flow_time"].to_numpy(float)) - 3 * math.log(D)
        m, lo, hi = (math.exp(v) if np.isfinite(v) else math.nan for v in mean_interval(logs))
        finite = logs[np.isfinite(logs)]
        se = float(finite.std(ddof=1) / math.sqrt(finite.size)) if finite.size > 1 else math.nan
        censored = bool(h["censored"].any())
        T = float(h["flow_time"].max()) / D**3
        if censored:  # not reached by the run's end: kappa_c(D) > T, a lower bound
            m, lo, hi = T, T, math.inf
        mine = predicted[(predicted["d"] == d) & (predicted["D"] == D) & np.isclose(predicted["c"], c)]
        for (fitted, fit_D_max), source in mine.groupby(["algorithm", "fit_D_max"], sort=True):
            own = int(fit_D_max) == s.fit_D_max and fitted == algorithm
            for _, p in source.sort_values("law").iterrows():
                about = About(
                    variant="",
                    algorithm=algorithm,
                    samples=float(run["samples"].iloc[0]) if flow else math.nan,
                    rtol=float(run["rtol"].iloc[0]) if flow else math.nan,
                    fitted_on="" if own else f"{ALGORITHM_WORDS.get(fitted, fitted)} runs with D <= {int(fit_D_max)}",
                    law=str(p["law"]),
                    d=float(d),
                    D=float(D),
                    c=float(c),
                    c_when="chosen after seeing data" if s.target_c_post_hoc else "fixed before the data",
                    replicates=float(len(h)),
                )
                bound = {"below": " (at most: below the grid's first kappa)", "above": " (beyond the grid's last)"}
                said = f"{p['kappa_c']:.3g} [{p['kappa_c_low']:.3g}, {p['kappa_c_high']:.3g}]"
                said += bound.get(str(p["censored"]), "")
                measured = f"{m:.3g} [{lo:.3g}, {hi:.3g}]"
                measured = f"more than {T:.3g} (not reached by the run's end)" if censored else measured
                row = claim_row(
                    "kappa_c_prediction",
                    about,
                    None,
                    m,
                    lo,
                    hi,
                    "",
                    f"kappa_c predicted from the laws fitted on D <= {int(fit_D_max)} ({p['fit_levels']}), over the "
                    f"kappa grid {p['kappas']}: {said}; measured: {measured} ({len(h)} seeds, geometric mean, t "
                    "interval)",
                    len(h),
                    "a law of r at flow time kappa D^3 fixes the flow time at which r reaches exp(-c D): its kappa_c, "
                    "predicted before these runs",
                )
                agrees = _agrees(T if censored else m, censored, p)
                row["verdict"] = "agrees" if agrees else "differs"
                row["predicted_value"] = float(p["kappa_c"])
                row["prediction"] = f"in {said}"  # display: the typed value is predicted_value
                row["why"] = (
                    f"the measured value lies {'inside' if agrees else 'outside'} the prediction's interval {said}"
                    if not censored
                    else f"not reached by kappa = {T:.3g}; the prediction {said} "
                    + ("allows that" if agrees else "says it is reached by then")
                )
                # "agrees" is a failure to reject: it means something only with power against the rival laws
                rivals = source[source["law"] != p["law"]]
                power, name, alt = _power_past_end(rivals, T) if censored else _power_against(p, rivals, se)
                how = "the rivals' intervals against the run's end" if censored else "plug-in"
                rows.append(record_power(row, name, alt, power, s, agrees, how=how))
    return rows
