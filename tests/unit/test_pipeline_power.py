"""Power by simulation of the transfer pipeline (analysis/pipeline_power.py): the curve model is
recovered from its own draws, the simulated rejection rate is about alpha at the null's boundary and
near 1 under a strong alternative, and censoring (an alternative's n* beyond the grid) costs power."""

from __future__ import annotations

import numpy as np
import pytest
from schema_settings import settings

from groupsparse.analysis.pipeline_power import CurveModel, Level, anchored, fit_curve_model, simulate_power
from groupsparse.analysis.sample_complexity import n_star_record

GRID = np.unique(np.round(4 * np.sqrt(2) ** np.arange(21))).astype(float)  # 4 ... 4096, a factor sqrt 2
POINTS = [(f"scale_d{d}_D{D}", d, D) for d in (5, 10, 20) for D in (4, 8, 16)]
TARGET = 0.8
SHAPE = CurveModel(top=0.97, mu=0.0, w=0.6, tau=0.05, sigma=0.08, sigma_a=0.005)
S = settings(n_boot=200, accuracy_targets=(TARGET,), pipeline_power_boot=200, machine_spread=0.0)
CLAIM = "pretrained_finetune: n* grows no faster than d + D, a + b <= 1 (accuracy 0.8, downstream transfer)"


def judge(curves, rng):
    sim = [(run, d, D, GRID, np.arange(c.shape[0]), c) for (run, d, D), c in zip(POINTS, curves)]
    rec = n_star_record(sim, "pretrained_finetune", "transfer", TARGET, "n*", S, S.pipeline_power_boot, rng)
    return {t.claim: row["verdict"] for t, row in rec.test_rows()}


def rejection_rate(shape, seeds=5, n_sim=300, scale=1.0, seed=0):
    levels = [Level(GRID, seeds, SHAPE) for _ in POINTS]
    log_n = np.log(scale * np.array([shape(d, D) for _, d, D in POINTS], dtype=float))
    rng = np.random.default_rng(seed)
    return simulate_power(levels, log_n, TARGET, judge, {CLAIM: "at_most"}, n_sim, 2000, rng)[CLAIM]


def test_the_curve_model_is_recovered_from_its_own_draws():
    rng = np.random.default_rng(1)
    truth = CurveModel(top=0.95, mu=4.0, w=0.7, tau=0.1, sigma=0.15, sigma_a=0.0)
    fitted = fit_curve_model(GRID, truth.draw(GRID, 40, truth.mu, 5000, rng), 5000)
    assert fitted.top == pytest.approx(0.95, abs=0.01)
    assert fitted.mu == pytest.approx(4.0, abs=0.1)
    assert fitted.w == pytest.approx(0.7, abs=0.1)
    assert fitted.tau == pytest.approx(0.1, abs=0.05)
    assert fitted.sigma == pytest.approx(0.15, abs=0.06)


def test_rejection_rate_is_about_alpha_at_the_null_and_near_one_under_a_strong_alternative():
    # a + b = 1 exactly (the boundary of "a + b <= 1"): the one-sided test rejects about 5% of the time
    null = rejection_rate(lambda d, D: 4 * (d * D) ** 0.5)
    assert 0.01 <= null <= 0.11, null
    # n* ~ d D (a + b = 2) within the grid: rejected nearly always
    strong = rejection_rate(lambda d, D: 0.3 * d * D)
    assert strong >= 0.9, strong


def test_censoring_costs_power_the_plug_in_does_not_see():
    # the same d D alternative placed so that its largest grid points lie beyond n = 4096: censored
    # levels make the verdict inconclusive, which the normal plug-in (no grid) cannot know
    beyond = rejection_rate(lambda d, D: 0.3 * d * D, n_sim=100, scale=60.0)
    assert beyond <= 0.2, beyond


def test_the_alternative_is_anchored_at_the_measured_centre():
    levels = [Level(GRID, 5, CurveModel(0.97, mu, 0.6, 0, 0, 0)) for mu in (2.0, 3.0, 4.0)]
    shape = np.array([1.0, 10.0, 100.0])
    log_n = anchored(levels, TARGET, shape)
    fitted = np.array([lv.model.log_n_star(TARGET) for lv in levels])
    assert np.mean(log_n) == pytest.approx(np.mean(fitted))
    assert np.diff(log_n) == pytest.approx(np.diff(np.log(shape)))
