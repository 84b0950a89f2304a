"""The study's one interval method covers what it says, and stays inside a metric's range."""

from __future__ import annotations

import math

import numpy as np
import pytest

from groupsparse.analysis.stats import (
    METRIC_RANGES,
    UNIT,
    clip_interval,
    difference_interval,
    mean_interval,
)

REPETITIONS = 4000  # Monte Carlo standard error of a 95% coverage: about 0.0035

# (law, its mean, a draw of shape (repetitions, seeds))
LAWS = {
    "normal": (1.0, lambda rng, shape: rng.normal(1.0, 2.0, shape)),
    # skewness 1: a right-skewed seed-to-seed spread (e.g. a step count's)
    "gamma_skewness_1": (4.0, lambda rng, shape: rng.gamma(4.0, 1.0, shape)),
}


def coverage(law: str, seeds: int) -> float:
    mean, draw = LAWS.get(law, EXPONENTIAL)
    rng = np.random.default_rng([seeds, len(law)])
    data = draw(rng, (REPETITIONS, seeds))
    hits = 0
    for row in data:
        _, low, high = mean_interval(row)
        hits += low <= mean <= high
    return hits / REPETITIONS


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("law", list(LAWS))
def test_95_percent_interval_covers_between_92_and_98_percent(law, seeds):
    assert 0.92 <= coverage(law, seeds) <= 0.98


# skewness 2: no interval built from 3-5 draws without a model of the law reaches 92% (the t interval: ~88%)
EXPONENTIAL = (1.0, lambda rng, shape: rng.exponential(1.0, shape))


@pytest.mark.xfail(strict=True, reason="strongly skewed law (exponential): the t interval covers ~88% at 3-5 seeds")
@pytest.mark.parametrize("seeds", [3, 5])
def test_strongly_skewed_law_is_a_known_limit(seeds):
    assert 0.92 <= coverage("exponential", seeds) <= 0.98


def test_bounded_metric_intervals_stay_inside_their_range():
    near_one = [0.999, 0.97, 0.7]  # a wide spread next to the bound
    mean, low, high = mean_interval(near_one, METRIC_RANGES["attention_on_relevant"])
    assert 0 <= low <= mean <= high <= 1 and high == 1
    mean, low, high = mean_interval([0.01, 0.3, 0.0], METRIC_RANGES["test_accuracy"])
    assert low == 0 <= mean <= high <= 1
    _, low, high = mean_interval([-0.99, 0.9, 0.99], METRIC_RANGES["cos_v1_vstar"])
    assert low >= -1 and high <= 1
    _, low, _ = mean_interval([0.001, 2.0, 0.0], METRIC_RANGES["eval_loss"])
    assert low == 0
    delta, low, high = difference_interval([1.0, 0.0, 1.0], [0.0, 1.0, 0.0], UNIT)
    assert -1 <= low <= delta <= high <= 1


def test_every_ranged_interval_is_inside_its_range_on_random_data():
    rng = np.random.default_rng(0)
    for metric, (lo, hi) in METRIC_RANGES.items():
        for _ in range(200):
            width = 1.0 if math.isinf(hi) else hi - lo
            values = lo + width * rng.beta(0.3, 0.3, size=rng.integers(2, 6))
            _, low, high = mean_interval(values, (lo, hi))
            assert lo <= low <= high <= hi, metric


def test_interval_of_one_seed_or_none_is_nan_and_clipping_keeps_nan():
    assert math.isnan(mean_interval([0.5])[1]) and mean_interval([0.5])[0] == 0.5
    assert all(math.isnan(v) for v in mean_interval([]))
    assert all(math.isnan(v) for v in clip_interval(math.nan, math.nan, UNIT))


# -- fits: a plane over the (d, D) grid, and levels that share seeds -----------------------------

GRID = [(d, D) for d in (5, 10, 20) for D in (4, 8, 16)]


def plane_coverage(seeds: int, reps: int = 600) -> np.ndarray:
    """Coverage of a, b and a + b in log y = c + a log d + b log D (normal seed noise, 3 x 3 grid)."""
    from groupsparse.analysis.fits import fit_design, mean_stat

    rng = np.random.default_rng([seeds, 9])
    X = np.array([[1.0, math.log(d), math.log(D)] for d, D in GRID])
    truth = np.array([0.5, 0.7, 0.4])
    hits = np.zeros(3)
    for _ in range(reps):
        stats = [mean_stat(x @ truth + rng.normal(0, 0.3, seeds)) for x in X]
        fit = fit_design(X, stats, [seeds] * len(GRID), n_boot=300, rng=rng, coefficient_names=("c", "a", "b"))
        coefs = (fit.coefficient("a"), fit.coefficient("b"), fit.combine("a + b", {"a": 1, "b": 1}))
        hits += [c.low <= t <= c.high for c, t in zip(coefs, (0.7, 0.4, 1.1))]
    return hits / reps


def clustered_coverage(seeds: int, reps: int = 600) -> np.ndarray:
    """Coverage of alpha and beta in log err = c + alpha log n + beta log(d + D), where the sizes n
    of one grid point share a per-seed effect (one pretrained checkpoint): resampled together."""
    from groupsparse.analysis.fits import fit_design, mean_stat

    rng = np.random.default_rng([seeds, 15])
    sizes = (8, 32, 128, 512, 2048)
    levels = [(d, D, n) for d, D in GRID for n in sizes]
    X = np.array([[1.0, math.log(n), math.log(d + D)] for d, D, n in levels])
    truth = np.array([0.1, -0.5, 0.8])
    hits = np.zeros(2)
    for _ in range(reps):
        stats = []
        for d, D in GRID:
            shared = rng.normal(0, 0.3, seeds)
            for n in sizes:
                x = np.array([1.0, math.log(n), math.log(d + D)])
                stats.append(mean_stat(x @ truth + shared + rng.normal(0, 0.1, seeds)))
        clusters = [(d, D) for d, D, _ in levels]
        fit = fit_design(
            X, stats, [seeds] * len(levels), n_boot=300, rng=rng, coefficient_names=("c", "n", "dD"), clusters=clusters
        )
        hits += [fit.coefficient(k).low <= t <= fit.coefficient(k).high for k, t in (("n", -0.5), ("dD", 0.8))]
    return hits / reps


@pytest.mark.parametrize("seeds", [3, 5])
def test_plane_coefficients_cover(seeds):
    cov = plane_coverage(seeds)
    assert np.all((cov >= 0.92) & (cov <= 0.99)), cov


@pytest.mark.parametrize("seeds", [3, 5])
def test_clustered_levels_cover(seeds):
    cov = clustered_coverage(seeds)
    assert np.all((cov >= 0.92) & (cov <= 0.99)), cov


def n_star_coverage(seeds: int, a: float, b: float, C: float, reps: int = 1000) -> np.ndarray:
    """Coverage of a, b and a + b in the joint fit of log n* at the study's design: the 3 x 3 grid,
    accuracy curves over n = 8, 32, ..., 2048 (a factor 4 apart), n* read off the seed-mean curve
    (interpolated between grid points), seed-to-seed spread 0.2 in log n*, accuracy noise 0.01."""
    from groupsparse.analysis.fits import curve_crossing_stat, fit_design

    rng = np.random.default_rng([seeds, int(10 * a), 22])
    sizes = np.array([8, 32, 128, 512, 2048.0])
    X = np.array([[1.0, math.log(d), math.log(D)] for d, D in GRID])
    hits = np.zeros(3)
    for _ in range(reps):
        stats = []
        for d, D in GRID:
            scale = C * d**a * D**b * np.exp(0.2 * rng.standard_normal(seeds))
            acc = 1 - 0.5 * np.exp(-sizes[None] / scale[:, None]) + 0.01 * rng.standard_normal((seeds, sizes.size))
            stats.append(curve_crossing_stat(sizes, acc, 0.8))
        fit = fit_design(X, stats, [seeds] * len(GRID), n_boot=300, rng=rng, coefficient_names=("c", "a", "b"))
        coefs = (fit.coefficient("a"), fit.coefficient("b"), fit.combine("a + b", {"a": 1, "b": 1}))
        hits += [c.low <= t <= c.high for c, t in zip(coefs, (a, b, a + b))]
    return hits / reps


@pytest.mark.parametrize(("seeds", "a", "b", "C"), [(5, 0.5, 0.5, 10.0), (5, 1.0, 1.0, 1.0), (3, 0.5, 0.5, 10.0)])
def test_n_star_joint_fit_covers_at_the_study_design(seeds, a, b, C):
    """Measured: 95-97% (d + D-like a = b = 0.5 and d D-like a = b = 1; 5 and 3 seeds)."""
    cov = n_star_coverage(seeds, a, b, C)
    assert np.all((cov >= 0.92) & (cov <= 0.98)), cov


@pytest.mark.parametrize("seeds", [3, 5])
def test_sample_gap_interval_covers_paired_by_seed(seeds):
    """log(n*_logreg / n*_pretrained) on one run, the seeds paired (both methods on each seed's task),
    by the claims' own steps (seed-mean curves, one bootstrap over seeds, t with k - 1 dof): covers
    the true log(16) in 92-98% at the study's n grid. Measured: about 95%."""
    from groupsparse.analysis.fits import mean_curve_crossing
    from groupsparse.analysis.stats import t_interval, widen

    rng = np.random.default_rng([seeds, 33])
    sizes = np.array([8, 32, 128, 512, 2048.0])
    hits, reps = 0, 1000
    for _ in range(reps):
        task = np.exp(0.2 * rng.standard_normal(seeds))  # a seed's task is harder for both methods
        curves = {}
        for name, scale in (("pre", 20.0), ("logreg", 320.0)):  # n* about 18 and 293: inside the grid
            s = scale * task * np.exp(0.1 * rng.standard_normal(seeds))
            acc = 1 - 0.5 * np.exp(-sizes[None] / s[:, None]) + 0.01 * rng.standard_normal((seeds, sizes.size))
            curves[name] = acc
        idx = np.vstack([np.arange(seeds)[None], rng.integers(0, seeds, size=(300, seeds))])
        lp = mean_curve_crossing(sizes, curves["pre"], 0.8)(idx)[0]
        lb = mean_curve_crossing(sizes, curves["logreg"], 0.8)(idx)[0]
        gap = lb - lp
        lo, hi = t_interval(float(gap[0]), widen(gap[0], gap[1:], seeds), seeds - 1)
        hits += lo <= math.log(16) <= hi
    assert 0.92 <= hits / reps <= 0.98, hits / reps
