"""kappa_c(D) predicted from the pre-registered laws (docs/STUDY.md section 3.4): no new fit.

The predictions table (rule ``predict``) gives, per law, d and new D, log r at each flow time kappa D^3 with
its prediction interval. The flow time to the theorem's target r <= exp(-c D) over D^3 is where that curve
crosses -c D: the first kappa of the table's grid at or below the target, log-linear in log kappa from the
kappa before it. The interval's ends map the same way (a higher r reaches the target later), so the interval
on kappa_c is the prediction interval's image. Beyond the grid's last kappa the prediction is censored
(kappa_c > that kappa); at or below its first, kappa_c <= it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

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
