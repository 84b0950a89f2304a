"""Differences between laws in the pre-registered test, with intervals (docs/STUDY.md section 3.4).

The law test (:mod:`.predict`) names the law whose committed point predictions have the smallest
criterion, the sum over the tested D of |log measured - log predicted|. A smallest sum is a ranking,
not a difference the data can tell: here every pair of laws gets the difference of their criteria
with a 95% interval, and a verdict: "<law> predicts better" when the interval excludes 0, "tie" when
it holds 0.

The predictions are fixed (committed before the data), so the criterion's uncertainty is that of the
measured level means: at each tested D the mean over k seeds of log r, its standard error s / sqrt(k).
The difference is a sum over D of |mu - a| - |mu - b|, which a bootstrap of the means covers badly
where a true mean sits at a law's prediction (|.| is biased there: about 70% for a nominal 95%). The
interval is instead the range of the difference over a joint 95% box of the true level means: each
tested D's t interval at level 0.95^(1 / L) (L tested D, independent levels), so it covers at least 95%
whatever the truth, and more where the difference does not depend on the means (a mean outside both
predictions). Coverage: tests/unit/test_law_difference.py simulates studies at 2, 3 and 4 seeds.

A tie is a failure to reject: its power is the chance that the interval excludes 0 in the study's
design had one law's predictions been exactly right (simulated under each of the two; the smaller is
reported). The rate of a fitted law (:func:`law_rate`): c of exp(-c D) with its t interval from the
fit on the small-D levels (the textbook OLS interval of the level means, s^2 = RSS / (L - p), which
holds the seed noise and any lack of fit); with c > 0 a law is exp(-Theta(D)) whatever its prefactor.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from scipy import stats as sps

from ..config.seeding import numpy_generator
from .laws import design, law_prediction
from .rows import claim_row
from .settings import Settings
from .statements import About, grid_text
from .stats import CONFIDENCE, Prediction, t_quantile

N_STUDIES = 2000  # simulated studies per power
TIE = "tie"


def criterion(mu: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Sum over the last axis of |mu - pred| (the law test's criterion, on the log scale)."""
    return np.abs(mu - pred).sum(axis=-1)


def _box(m, se, dof) -> tuple[np.ndarray, np.ndarray]:
    """Each tested D's t interval at level CONFIDENCE^(1 / L): together they hold every true level mean
    with probability CONFIDENCE (independent levels)."""
    level = CONFIDENCE ** (1 / m.shape[-1])
    q = sps.t.ppf(0.5 + level / 2, dof)
    return m - q * se, m + q * se


def _range(lo, hi, a, b) -> tuple[np.ndarray, np.ndarray]:
    """Min and max over mu in [lo, hi] of |mu - a| - |mu - b| (elementwise): piecewise linear with kinks at a
    and b, so the extremes sit at the ends or at a kink inside."""
    candidates = [lo, hi, np.clip(a, lo, hi), np.clip(b, lo, hi)]
    values = np.stack([np.abs(x - a) - np.abs(x - b) for x in candidates])
    return values.min(axis=0), values.max(axis=0)


def difference_interval(m, se, dof, pred_a, pred_b) -> tuple[float, float, float]:
    """(criterion of law a minus that of law b, low, high): the range of the difference over the joint box
    of the true level means (module doc). ``m``, ``se``, ``dof``: per tested D, the measured level mean of
    log r, its standard error and degrees of freedom; ``pred_a``, ``pred_b``: the laws' predictions there."""
    m, se, dof, a, b = (np.asarray(x, dtype=float) for x in (m, se, dof, pred_a, pred_b))
    delta = float(criterion(m, a) - criterion(m, b))
    if not (m.size and np.isfinite([*m, *se, *a, *b]).all() and (dof >= 1).all()):
        return delta, math.nan, math.nan
    low, high = _range(*_box(m, se, dof), a, b)
    return delta, float(low.sum()), float(high.sum())


def difference_verdict(law_a: str, law_b: str, low: float, high: float) -> str:
    """'<law> predicts better' when the interval excludes 0 (negative: a's sum is smaller), else 'tie'."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "inconclusive"
    if high < 0:
        return f"{law_a} predicts better"
    if low > 0:
        return f"{law_b} predicts better"
    return TIE


def difference_power(se, dof, pred_a, pred_b, rng, n_studies: int = N_STUDIES) -> float:
    """The smaller over the two laws of the chance that the interval names that law better, in studies whose
    true level means are its predictions (the measured se and dof: each study's mean drawn as truth + se x
    N(0, 1), its se as se x sqrt(chi^2_dof / dof))."""
    se, dof, a, b = (np.asarray(x, dtype=float) for x in (se, dof, pred_a, pred_b))
    if not (se.size and np.isfinite([*se, *a, *b]).all() and (dof >= 1).all()):
        return math.nan
    powers = []
    for truth, names_a in ((a, True), (b, False)):
        m = truth + se * rng.standard_normal((n_studies, se.size))
        s = se * np.sqrt(rng.chisquare(dof, size=(n_studies, se.size)) / dof)
        low, high = (x.sum(axis=-1) for x in _range(*_box(m, s, dof), a, b))
        powers.append(float(np.mean(high < 0 if names_a else low > 0)))
    return float(min(powers))


# the column of each law's design that multiplies D: c = minus its coefficient (laws without one: no rate)
RATE_COLUMN = {"theorem": 1, "nested": 2, "exponential": 1}


def law_rate(law: str, Ds, coef, rss: float) -> tuple[float, float, float, float]:
    """(c, low, high, dof): the rate c of exp(-c D) of ``law`` fitted through the level means at ``Ds``
    (its coefficients ``coef``, residual sum of squares ``rss``) with the two-sided t interval of the
    textbook fit (s^2 = RSS / (L - p)); NaN for a law without a rate or without residual degrees of freedom."""
    if law not in RATE_COLUMN:
        return math.nan, math.nan, math.nan, math.nan
    X, _ = design(law, np.asarray(Ds, dtype=float))
    L, p = X.shape
    j = RATE_COLUMN[law]
    c = -float(np.asarray(coef, dtype=float)[j])
    dof = L - p
    if dof < 1 or not np.isfinite(rss):
        return c, math.nan, math.nan, float(dof)
    se = math.sqrt(rss / dof * float(np.linalg.pinv(X.T @ X)[j, j]))
    half = t_quantile(dof) * se
    return c, c - half, c + half, float(dof)


def level_se(low: float, high: float, seeds: int) -> float:
    """The standard error of a level mean from its two-sided t interval over ``seeds`` seeds."""
    return (high - low) / (2 * float(sps.t.ppf(0.5 + CONFIDENCE / 2, seeds - 1))) if seeds > 1 else math.nan


DIFFERENCE_THEORY = (
    "the pre-registered criterion (sum over the tested D of |log measured - log predicted|) of two laws whose "
    "predictions were committed before the data: negative, the first law predicts better; an interval that holds "
    "0 is a tie"
)
RATE_THEORY = "exp(-Theta(D)): a law whose fitted c is above 0 decays exponentially in D whatever its prefactor"
EITHER_EXACT = "either law's predictions exact (the smaller of the two powers)"


def law_difference_rows(about: About, level_stats: dict, p_cell, blockers: list[str], s: Settings) -> list[dict]:
    """Per pair of laws (in ``s.laws``' order): the difference of their criteria over the tested D with its
    interval, verdict and power (the module's doc). ``level_stats``: D -> (mean log r, its se, seeds)."""
    tested = [D for D, (m, se, k) in sorted(level_stats.items()) if np.isfinite(m) and np.isfinite(se) and k > 1]
    laws = [
        law
        for law in s.laws
        if law in set(p_cell["law"]) and not p_cell.loc[p_cell["law"] == law, "blocker"].astype(bool).any()
    ]
    if not tested or len(laws) < 2:
        return []
    m, se, k = (np.array([level_stats[D][i] for D in tested], dtype=float) for i in range(3))
    pred = {law: p_cell[p_cell["law"] == law].set_index("D").loc[tested, "log_rest"].to_numpy(float) for law in laws}
    blocker = "; ".join(blockers)
    rows = []
    for i, a in enumerate(laws):
        for b in laws[i + 1 :]:
            delta, low, high = difference_interval(m, se, k - 1, pred[a], pred[b])
            here = replace(about, subject=a, reference=b, D_grid=grid_text(tested), replicates=float(k.min()))
            row = claim_row(
                "law_difference",
                here,
                None,
                delta,
                low,
                high,
                blocker,
                f"tested D = {grid_text(tested)}; seeds per D {', '.join(f'{x:.0f}' for x in k)}; interval: the range "
                f"over each D's t interval at level {CONFIDENCE:g}^(1/{len(tested)}) (analysis/law_difference.py)",
                int(k.sum()),
                DIFFERENCE_THEORY,
            )
            if not blocker:
                row["verdict"] = difference_verdict(a, b, low, high)
                row["why"] = f"[{low:.3g}, {high:.3g}] " + ("holds 0" if row["verdict"] == TIE else "excludes 0")
                rng = numpy_generator("law-difference-power", s.study_seed, row["claim"])
                row["power"] = row["power_plugin"] = difference_power(se, k - 1, pred[a], pred[b], rng)
                row["alternative"] = row["alternative_name"] = EITHER_EXACT
            rows.append(row)
    return rows


def law_rate_rows(about: About, Ds, Y, censored: list[str], s: Settings) -> list[dict]:
    """Per law with a rate (:data:`RATE_COLUMN`): its c of exp(-c D) fitted on the fit levels ``Ds`` (the seeds'
    log r ``Y``, levels x seeds, as :func:`.predict.fit_levels` gives them), with its t interval; 'holds' when
    c > 0 (an exp(-Theta(D)) law)."""
    rows = []
    for law in s.laws:
        if law not in RATE_COLUMN or Ds.size < design(law, Ds)[0].shape[1] + 1 or Y.shape[-1] < 2:
            continue
        fitted = law_prediction(law, Ds, Y, Ds)
        c, low, high, dof = law_rate(law, Ds, fitted["coef"], float(fitted["rss"]))
        row = claim_row(
            "law_rate",
            replace(about, subject=law, D_grid=grid_text(Ds)),
            Prediction("greater", 0.0),
            c,
            low,
            high,
            f"level(s) {', '.join(censored)} censored, left out" if censored else "",
            f"fit levels D = {grid_text(Ds)}, {Y.shape[-1]} seeds each; the level means' OLS fit, t interval with "
            f"{dof:.0f} degrees of freedom (s^2 = RSS / (L - p), lack of fit included)",
            int(Y.size),
            RATE_THEORY,
        )
        rows.append(row)
    return rows
