"""The laws of the out-of-sample test (docs/STUDY.md section 3.4) and their prediction intervals.

r = 1 - min over queries of S[j*, j] at flow time kappa D^3, fitted through the level means of log r:

* theorem: the theorem's form. On the subspace 1 - S[j*, j] is about (D - 1) exp(-gap) for a score
  gap growing like D, so exp(-Theta(D)) means log r = a + log(D - 1) - c D (two parameters, the
  log(D - 1) an offset);
* power: log r = a + b log D;  nested: log r = a + b log D - c D (both);  exponential: a + b D.

:func:`law_prediction` gives the textbook prediction interval of a new level mean (its s^2 =
RSS / (L - p) holds the seed noise and any lack of fit) beside the interval of the law taken as
exact (seed noise only) and the lack-of-fit F test; :func:`criterion_power` simulates the test's
criterion under each law (coverage and power: tests/unit/test_theorem_coverage.py and
tests/unit/test_predict.py).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from .stats import CONFIDENCE, t_quantile

LAWS = ("theorem", "power", "nested", "exponential")
LAW_TEXT = {
    "theorem": "the theorem's form (log r = a + log(D - 1) - c D)",
    "power": "a power of D (log r = a + b log D)",
    "nested": "both (log r = a + b log D - c D)",
    "exponential": "exponential in D (log r = a + b D)",
}


def design(law: str, D) -> tuple[np.ndarray, np.ndarray]:
    """The law's design matrix (len(D), p) and offset (len(D),) for log r at the levels ``D``."""
    D = np.asarray(D, dtype=float)
    one = np.ones_like(D)
    if law == "theorem":
        return np.column_stack([one, D]), np.log(D - 1)
    if law == "power":
        return np.column_stack([one, np.log(D)]), np.zeros_like(D)
    if law == "nested":
        return np.column_stack([one, np.log(D), D]), np.zeros_like(D)
    if law == "exponential":
        return np.column_stack([one, D]), np.zeros_like(D)
    raise ValueError(f"unknown law {law!r}; laws: {', '.join(LAWS)}")


def law_prediction(law: str, Ds, Y: np.ndarray, targets) -> dict[str, np.ndarray]:
    """Both prediction intervals of a new level mean at ``targets``, vectorised over studies.

    ``Ds``: (L,) fit levels; ``Y``: (..., L, k) seeds' log r per level (no NaN); ``targets``: (m,).
    Returns arrays (..., m): prediction, half widths and degrees of freedom of the textbook interval
    (``half``, ``dof``) and of the seed-noise-only one (``half_seed``, ``dof_seed``); and (..., p) the
    coefficients, (...,) the RSS, lack-of-fit p-value and pooled seed sd.
    """
    X, off = design(law, Ds)
    X0, off0 = design(law, targets)
    L, k = Y.shape[-2], Y.shape[-1]
    p = X.shape[1]
    ybar = Y.mean(axis=-1)  # (..., L)
    s2 = Y.var(axis=-1, ddof=1) if k > 1 else np.full(ybar.shape, np.nan)
    H = np.linalg.pinv(X)  # (p, L)
    beta = (ybar - off) @ H.T  # (..., p)
    resid = ybar - off - beta @ X.T
    rss = (resid**2).sum(axis=-1)
    W0 = X0 @ H  # (m, L): prediction weights on the level means
    pred = beta @ X0.T + off0
    h0 = (W0**2).sum(axis=-1)  # x0' (X'X)^-1 x0
    dof = L - p
    s2_fit = rss / dof if dof > 0 else np.full(rss.shape, np.nan)
    half = t_quantile(dof) * np.sqrt(s2_fit[..., None] * (1 + h0)) if dof > 0 else np.full(pred.shape, np.nan)
    # seed noise only: sum_i c_i s_i^2, c_i = w_i^2 / k + 1 / (L k) (pooled s^2 over k new seeds)
    c = (W0**2) / k + 1.0 / (L * k)  # (m, L)
    var_seed = s2 @ c.T
    terms = (s2[..., None, :] * c) ** 2 / (k - 1) if k > 1 else np.full(var_seed.shape + (L,), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        dof_seed = var_seed**2 / terms.sum(axis=-1)
        half_seed = sps.t.ppf(0.5 + CONFIDENCE / 2, dof_seed) * np.sqrt(var_seed)
        noise = s2.mean(axis=-1) / k  # the level means' variance from seed noise alone
        lof_p = sps.f.sf(s2_fit / noise, dof, L * (k - 1)) if dof > 0 else np.full(rss.shape, np.nan)
    return {
        "pred": pred,
        "half": half,
        "dof": np.broadcast_to(float(dof), pred.shape),
        "half_seed": half_seed,
        "dof_seed": dof_seed,
        "coef": beta,
        "rss": rss,
        "lack_of_fit_p": lof_p,
        "seed_sd": np.sqrt(s2.mean(axis=-1)),
    }


def criterion_power(Ds, Y: np.ndarray, targets, laws, reps: int = 2000, seed: int = 0) -> dict[str, float]:
    """How often the criterion picks the true law, simulated under each law at the study's design.

    For each law in ``laws``: the fit levels' level means as that law fitted them, the test levels at
    its predictions, the measured seed sd as noise (k seeds per level, as measured); every law refitted
    to each simulated study, the criterion applied. Returns law -> share of studies in which it wins.
    A criterion that can fail either way picks each true law often."""
    rng = np.random.default_rng(seed)
    L, k = Y.shape
    sd = float(np.sqrt(Y.var(axis=-1, ddof=1).mean())) if k > 1 else math.nan
    if not np.isfinite(sd) or sd <= 0:
        return {law: math.nan for law in laws}
    out = {}
    for truth in laws:
        fit = law_prediction(truth, Ds, Y, np.concatenate([np.asarray(Ds, float), np.asarray(targets, float)]))
        mean_fit, mean_new = fit["pred"][:L], fit["pred"][L:]
        sims = mean_fit[None, :, None] + sd * rng.standard_normal((reps, L, k))
        new = mean_new[None, :] + sd * rng.standard_normal((reps, len(targets), k)).mean(axis=-1)
        errors = np.stack([np.abs(law_prediction(law, Ds, sims, targets)["pred"] - new).sum(axis=-1) for law in laws])
        out[truth] = float((errors.argmin(axis=0) == list(laws).index(truth)).mean())
    return out
