"""The interval on the difference of the law test's criterion between two laws (analysis/law_difference.py):
coverage by simulation at the designs the studies use (2 to 4 seeds, 1 to 3 tested D), where the true level
means sit between, outside, on or next to the laws' predictions; a tie when it holds 0; its power; and a
law's rate with its interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from groupsparse.analysis.law_difference import (
    TIE,
    criterion,
    difference_interval,
    difference_power,
    difference_verdict,
    law_rate,
    level_se,
)
from groupsparse.analysis.laws import design, law_prediction
from groupsparse.analysis.stats import mean_interval

REPS = 2000
LAW_A = np.array([-4.0, -4.5, -5.0])  # two laws' predictions of log r at three tested D
LAW_B = np.array([-3.5, -3.8, -4.2])
TRUTHS = {
    "between the laws": np.array([-3.8, -4.1, -4.6]),
    "outside both": np.array([-3.0, -3.3, -3.6]),
    "on law a": LAW_A,
    "next to law b": LAW_B + 0.02,
}


def coverage(mu: np.ndarray, seeds: int, sd: float, rng) -> float:
    true = float(criterion(mu, LAW_A) - criterion(mu, LAW_B))
    y = mu[None, :, None] + sd * rng.standard_normal((REPS, mu.size, seeds))
    m, se = y.mean(axis=-1), y.std(axis=-1, ddof=1) / math.sqrt(seeds)
    dof = np.full(mu.size, seeds - 1.0)
    hits = [lo <= true <= hi for _, lo, hi in (difference_interval(mi, si, dof, LAW_A, LAW_B) for mi, si in zip(m, se))]
    return float(np.mean(hits))


@pytest.mark.parametrize("truth", TRUTHS, ids=str)
@pytest.mark.parametrize("seeds", [2, 3, 4])
@pytest.mark.parametrize("sd", [0.05, 0.3])
def test_the_interval_covers_the_true_difference(truth, seeds, sd):
    """At least 95% wherever the truth sits (a bootstrap of the means covered about 70% on a law's predictions:
    |.| is biased there; the joint box of the level means cannot be)."""
    assert coverage(TRUTHS[truth], seeds, sd, np.random.default_rng(7)) >= 0.95


def test_one_tested_D_gives_the_t_interval_carried_through():
    """With one D and the truth far from both predictions the difference is constant: a point interval."""
    delta, low, high = difference_interval([-2.0], [0.01], [1.0], [-3.0], [-2.5])
    assert delta == pytest.approx(0.5) and low == pytest.approx(0.5) and high == pytest.approx(0.5)


def test_a_tie_when_the_interval_holds_zero_else_the_law_with_the_smaller_sum():
    assert difference_verdict("power", "nested", -0.36, 0.28) == TIE
    assert difference_verdict("power", "nested", -1.3, -0.1) == "power predicts better"
    assert difference_verdict("theorem", "power", 4.7, 10.0) == "power predicts better"
    assert difference_verdict("a", "b", math.nan, 1.0) == "inconclusive"


def test_the_power_is_high_where_the_laws_are_far_apart_and_low_where_the_noise_hides_them():
    rng = np.random.default_rng(3)
    dof = np.full(3, 3.0)
    far = difference_power(np.full(3, 0.02), dof, LAW_A, LAW_B, rng)
    near = difference_power(np.full(3, 1.0), dof, LAW_A, LAW_B, rng)
    assert far > 0.95 and near < 0.2


def test_the_rate_of_a_law_and_its_interval():
    """Data from log r = 0.3 + log(D - 1) - 0.2 D with seed noise: the theorem form's c is 0.2, its t interval
    covers it in about 95% of studies; the nested law fitted to pure power-law data has c near 0."""
    rng = np.random.default_rng(5)
    Ds = np.array([4, 6, 8, 12, 16], dtype=float)
    X, off = design("theorem", Ds)
    hits = 0
    for _ in range(400):
        Y = (X @ np.array([0.3, -0.2]) + off)[:, None] + 0.05 * rng.standard_normal((Ds.size, 3))
        p = law_prediction("theorem", Ds, Y, Ds)
        c, low, high, dof = law_rate("theorem", Ds, p["coef"], float(p["rss"]))
        hits += low <= 0.2 <= high
        assert dof == 3
    assert 0.92 <= hits / 400 <= 0.98
    Y = (-1.1 * np.log(Ds))[:, None] + 0.01 * rng.standard_normal((Ds.size, 2))
    p = law_prediction("nested", Ds, Y, Ds)
    c, low, high, _ = law_rate("nested", Ds, p["coef"], float(p["rss"]))
    assert low < 0 < high and abs(c) < 0.05
    assert all(math.isnan(v) for v in law_rate("power", Ds, [0.0, -1.0], 0.1))


def test_a_level_mean_standard_error_reads_back_from_its_t_interval():
    values = np.array([0.1, 0.3, 0.25])
    m, low, high = mean_interval(values)
    assert level_se(low, high, 3) == pytest.approx(values.std(ddof=1) / math.sqrt(3))
