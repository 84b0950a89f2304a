"""Power by simulation of the whole transfer pipeline (docs/STUDY.md section 7, "power").

The plug-in of :mod:`.power` draws the estimate as normal around the alternative with the measured
standard error. The transfer verdicts pass through more than a normal estimate: the accuracy of each
(method, n, repetition) is one noisy fit, n* is the first crossing of the seed-mean curve interpolated
in log n between grid points, a curve that never reaches the target is censored (the verdict is then
inconclusive) and the exponents come from a bootstrap over seeds. Here whole studies are drawn under
the named alternative at the study's design (the same n grid, repetitions and test size) and the same
verdict code is run on each; power = the share of studies in which the verdict rejects (the same
rule as :func:`.power.simulated_power`).

**Modelling choice** (the pipeline is simulated at the level of per-(method, n, repetition)
accuracies, not by retraining models): a method's accuracy curve at a grid point is

    acc(n) = 1/2 + (top - 1/2) expit((log n - mu_s - eps_(s, n)) / w) + sigma_a xi_(s, n)

fitted to the measured seed-mean curve (top, mu, w), with a per-repetition shift mu_s = mu + tau z_s
(an easier or harder task and pretrained checkpoint), a per-(repetition, n) jitter in log n, eps with
sd sigma (the training sample and the CV rule's choice of hyperparameters, both noisy at each n) and a
little accuracy-scale noise sigma_a, then binomial test noise at the study's test size. tau is the
spread of the per-seed shifts, (sigma, sigma_a) the non-negative least-squares split of the residuals'
excess over the binomial variance into a part proportional to the curve's slope (in log n) squared
and a constant part. Under the alternative only mu moves (the curve crosses the target at the
alternative's n*); the shape and noise stay as measured.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy.special import expit, logit

CHANCE = 0.5  # binary tasks: an untrained model's accuracy


@dataclass(frozen=True)
class CurveModel:
    """One method's accuracy curve at one grid point, with its noise (see the module's doc)."""

    top: float
    mu: float
    w: float
    tau: float
    sigma: float
    sigma_a: float

    def mean(self, logn: np.ndarray, mu: float | np.ndarray | None = None) -> np.ndarray:
        mu = self.mu if mu is None else mu
        return CHANCE + (self.top - CHANCE) * expit((logn - mu) / self.w)

    def reaches(self, target: float) -> bool:
        return self.top > target + 1e-3

    def log_n_star(self, target: float, mu: float | None = None) -> float:
        """log n at which the noiseless curve crosses ``target`` (nan if it never does)."""
        if not self.reaches(target):
            return math.nan
        return (self.mu if mu is None else mu) + self.w * float(logit((target - CHANCE) / (self.top - CHANCE)))

    def mu_for(self, target: float, log_n_star: float) -> float:
        """The location that puts the crossing of ``target`` at ``log_n_star``."""
        return log_n_star - self.w * float(logit((target - CHANCE) / (self.top - CHANCE)))

    def with_shape(self, other: CurveModel) -> CurveModel:
        return CurveModel(other.top, self.mu, other.w, self.tau, self.sigma, self.sigma_a)

    def draw(self, grid: np.ndarray, k: int, mu: float, test_size: int, rng: np.random.Generator) -> np.ndarray:
        """(k, n) accuracies of k repetitions at location ``mu``."""
        logn = np.log(np.asarray(grid, dtype=float))
        mu_s = mu + self.tau * rng.standard_normal((k, 1))
        eps = self.sigma * rng.standard_normal((k, logn.size))
        p = self.mean(logn[None] - eps, mu_s) + self.sigma_a * rng.standard_normal((k, logn.size))
        p = np.clip(p, 0.0, 1.0)
        return rng.binomial(test_size, p) / test_size


def fit_curve_model(grid: np.ndarray, curves: np.ndarray, test_size: int) -> CurveModel | None:
    """Fit the curve model to (seeds x n) accuracies (NaN: a failed fit); None if too little data."""
    logn = np.log(np.asarray(grid, dtype=float))
    curves = np.asarray(curves, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = np.nanmean(curves, axis=0)
    ok = np.isfinite(m)
    if ok.sum() < 3 or curves.shape[0] < 2:
        return None
    x, y = logn[ok], m[ok]
    top0 = float(np.clip(y.max(), CHANCE + 0.01, 1.0))
    mid = CHANCE + (top0 - CHANCE) / 2
    mu0 = float(x[np.argmin(np.abs(y - mid))])

    def resid(theta):
        top, mu, w = theta
        return CHANCE + (top - CHANCE) * expit((x - mu) / w) - y

    lo, hi = [CHANCE + 1e-3, x[0] - 6.0, 0.05], [1.0, x[-1] + 6.0, 6.0]
    theta = optimize.least_squares(resid, [top0, float(np.clip(mu0, lo[1], hi[1])), 1.0], bounds=(lo, hi)).x
    top, mu, w = (float(v) for v in theta)
    base = CurveModel(top, mu, w, 0.0, 0.0, 0.0)
    mus, r2, slope2, binom = [], [], [], []
    for row in curves:
        f = np.isfinite(row)
        if f.sum() < 2:
            continue
        xs, ys = logn[f], row[f]
        res = optimize.minimize_scalar(
            lambda u, xs=xs, ys=ys: float(((base.mean(xs, u) - ys) ** 2).sum()), bounds=(lo[1], hi[1]), method="bounded"
        )
        mus.append(float(res.x))
        p = base.mean(xs, res.x)
        e = expit((xs - res.x) / w)
        r2.append((ys - p) ** 2)
        slope2.append(((top - CHANCE) * e * (1 - e) / w) ** 2)
        binom.append(p * (1 - p) / test_size)
    if len(mus) < 2:
        return None
    tau = float(np.std(mus, ddof=1))
    excess = np.concatenate(r2) - np.concatenate(binom)
    A = np.column_stack([np.concatenate(slope2), np.ones(excess.size)])
    (s2, sa2), _ = optimize.nnls(A, excess)
    return CurveModel(top, mu, w, tau, math.sqrt(s2), math.sqrt(sa2))


def rejects(kind: str, verdict: str) -> bool:
    """Whether a simulated study's verdict counts toward power (the rule of :mod:`.power`)."""
    if kind == "at_most":
        return verdict == "does not hold"
    if kind in ("equal", "within"):
        return verdict != "holds"
    return verdict == "holds"  # greater, less: the design detects the effect the theory names


def mean_power(pred, alternative: float, sd: float, k: int, bounds, n_sim: int, rng) -> float:
    """Power of a mean-over-seeds verdict: k seed values drawn normal (alternative, sd), clipped to the
    metric's range as the measured values are, then the same interval (:func:`.stats.mean_interval`,
    clipped) and verdict rule."""
    from .stats import mean_interval, verdict

    if not (np.isfinite(sd) and np.isfinite(alternative) and k >= 2 and n_sim > 0):
        return math.nan
    lo_b, hi_b = bounds
    draws = np.clip(alternative + sd * rng.standard_normal((n_sim, k)), lo_b, hi_b)
    hits = 0
    for x in draws:
        _, lo, hi = mean_interval(x, bounds)
        hits += rejects(pred.kind, verdict(pred, lo, hi)[0])
    return hits / n_sim


@dataclass
class Level:
    """One simulated level: a method at a grid point, its n grid, repetitions and fitted model."""

    grid: np.ndarray
    k: int
    model: CurveModel | None


def anchored(levels: list[Level], target: float, shape: np.ndarray) -> np.ndarray | None:
    """log n* of the alternative at every level: log shape + c, with c putting the alternative's mean
    log n* over the levels whose fitted curve reaches ``target`` at the fitted one's (the design's centre
    stays where it was measured); None if no level reaches it."""
    fitted = np.array([lv.model.log_n_star(target) if lv.model else math.nan for lv in levels])
    ok = np.isfinite(fitted)
    if not ok.any():
        return None
    return np.log(shape) + float(np.mean(fitted[ok] - np.log(shape[ok])))


def simulate_power(levels, log_n_star, target: float, judge, kinds: dict[str, str], n_sim: int, test_size: int, rng):
    """{claim: power}: ``n_sim`` studies drawn with each level's curve crossing ``target`` at its
    ``log_n_star``; ``judge(curves per level, rng)`` gives {claim: verdict} by the study's own code.

    A level whose fitted curve never reaches the target takes the median shape (top, w) of those that do
    (the alternative says it would reach it); NaN everywhere if a level has no model or none reaches it.
    """
    nan = {c: math.nan for c in kinds}
    if log_n_star is None or n_sim <= 0 or any(lv.model is None for lv in levels):
        return nan
    reach = [lv.model for lv in levels if lv.model.reaches(target)]
    if not reach:
        return nan
    typical = CurveModel(float(np.median([m.top for m in reach])), 0.0, float(np.median([m.w for m in reach])), 0, 0, 0)
    models = [lv.model if lv.model.reaches(target) else lv.model.with_shape(typical) for lv in levels]
    mus = [m.mu_for(target, ln) for m, ln in zip(models, log_n_star)]
    hits = dict.fromkeys(kinds, 0)
    for _ in range(n_sim):
        curves = [m.draw(lv.grid, lv.k, mu, test_size, rng) for m, lv, mu in zip(models, levels, mus)]
        verdicts = judge(curves, rng)
        for c, kind in kinds.items():
            hits[c] += rejects(kind, verdicts.get(c, "inconclusive"))
    return {c: h / n_sim for c, h in hits.items()}
