"""Coverage of the intervals the theorem test prints, at the study's design (configs/theorem.yaml:
D = 4, 6, 8, 12, 16 fitted, 5 seeds, predictions at 24, 32, 64),
with seed noise of the size measured there (sd of log(1 - min attention) and of log steps 0.01-0.1).
Each simulation is vectorised: 2000 studies in well under a second."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from groupsparse.analysis.laws import design, law_prediction
from groupsparse.analysis.power import add_power, simulated_power
from groupsparse.analysis.stats import Prediction, max_of_means_interval, mean_interval, t_quantile, verdict

REPS = 2000
FIT_D = np.array([4, 6, 8, 12, 16], dtype=float)
NEW_D = np.array([24, 32, 64], dtype=float)
SEEDS = 5


@pytest.mark.parametrize("law", ["power", "exponential", "theorem"])
@pytest.mark.parametrize("seeds", [3, 5])
def test_prediction_intervals_cover_a_new_level_mean(law, seeds):
    """A true law (slope -0.15 per unit D, or -1.2 per unit log D; the theorem's form with its log(D - 1)
    offset) with normal seed noise (sd 0.05): both prediction intervals (textbook, and seed noise only)
    hold the mean of the new level's seeds at D = 24, 32 and 64 in 92-98% of the studies."""
    rng = np.random.default_rng(1)
    X, off = design(law, FIT_D)
    X0, off0 = design(law, NEW_D)
    beta = np.array([0.3, -0.15 if law != "power" else -1.2])
    Y = (X @ beta + off)[None, :, None] + 0.05 * rng.standard_normal((REPS, FIT_D.size, seeds))
    new = X0 @ beta + off0 + 0.05 * rng.standard_normal((REPS, NEW_D.size, seeds)).mean(axis=-1)
    p = law_prediction(law, FIT_D, Y, NEW_D)
    for half in (p["half"], p["half_seed"]):
        coverage = (np.abs(new - p["pred"]) <= half).mean(axis=0)
        assert np.all((coverage >= 0.92) & (coverage <= 0.98)), coverage
    # under the true law the lack-of-fit test rejects at its level, about 5%
    assert 0.02 <= (p["lack_of_fit_p"] < 0.05).mean() <= 0.08


def test_a_wrong_law_fails_out_of_sample():
    """Data curved in D (a power law) fitted by the exponential law: at D = 24 the textbook interval,
    whose s^2 holds the lack of fit, still holds the new level while the seed-only one does not; at
    D = 32 and 64 both miss it in every study (the test can tell the laws apart), and the lack-of-fit
    test sees the curvature on D <= 16 already."""
    rng = np.random.default_rng(2)
    truth = lambda D: -1.2 * np.log(D)  # noqa: E731
    Y = truth(FIT_D)[None, :, None] + 0.02 * rng.standard_normal((REPS, FIT_D.size, SEEDS))
    new = truth(NEW_D) + 0.02 * rng.standard_normal((REPS, NEW_D.size, SEEDS)).mean(axis=-1)
    p = law_prediction("exponential", FIT_D, Y, NEW_D)
    seed_only = (np.abs(new - p["pred"]) <= p["half_seed"]).mean(axis=0)
    textbook = (np.abs(new - p["pred"]) <= p["half"]).mean(axis=0)
    assert textbook[0] > 0.9 and seed_only[0] < 0.1
    assert np.all(textbook[1:] < 0.01) and np.all(seed_only[1:] < 0.01)
    assert (p["lack_of_fit_p"] < 0.05).mean() > 0.99


@pytest.mark.parametrize(
    ("design", "ratio_growth"),
    [("grows with D as measured", 0.35), ("every level the same", 0.0), ("a plateau over the last levels", None)],
)
def test_the_bound_constant_interval_covers_at_the_study_design(design, ratio_growth):
    """kappa_c = max over D of the geometric-mean T_c(D) / D^3: its interval (stats.max_of_means_interval,
    Bonferroni over the levels) covers the true maximum in at least 95% of studies whether one level
    dominates (the ratio 0.30 at D = 4 growing to 0.49 at D = 16, log sd 0.04) or several tie, where the t
    interval at the level of the sample maximum alone undercovers (its mean is biased up)."""
    rng = np.random.default_rng(3)
    if ratio_growth is None:
        true_log = np.log(0.30) + 0.35 * np.log(np.minimum(FIT_D, 8) / 4)
    else:
        true_log = np.log(0.30) + ratio_growth * np.log(FIT_D / 4)
    logs = true_log[None, :, None] + 0.04 * rng.standard_normal((REPS, FIT_D.size, SEEDS))
    covered, naive = 0, 0
    for study in logs:
        m, lo, hi, top = max_of_means_interval(list(study))
        covered += lo <= true_log.max() <= hi
        half = t_quantile(SEEDS - 1) * study[top].std(ddof=1) / math.sqrt(SEEDS)
        naive += abs(m - true_log.max()) <= half
    assert covered / REPS >= 0.95, (design, covered / REPS)
    if ratio_growth == 0.0:  # five tied levels: the interval at the sample maximum alone misses often
        assert naive / REPS < 0.9, naive / REPS


@pytest.mark.parametrize(
    ("pred", "alternative"),
    [(Prediction("at_most", 1.0), 1.3), (Prediction("equal", 2.0, 1.0), 1.6), (Prediction("greater", 0.9), 0.93)],
)
def test_simulated_power_matches_the_whole_procedure(pred, alternative):
    """The power of a verdict on a mean of 5 seeds (sd 0.2 or 0.05), simulated from its se and dof,
    against the share of 4000 simulated studies that the verdict rule itself decides so."""
    rng = np.random.default_rng(5)
    sd = 0.05 if pred.kind == "greater" else 0.2
    X = alternative + sd * rng.standard_normal((4000, SEEDS))
    m, s = X.mean(axis=1), X.std(axis=1, ddof=1) / math.sqrt(SEEDS)
    t2, t1 = t_quantile(SEEDS - 1), float(sps.t.ppf(0.95, SEEDS - 1))
    if pred.kind == "at_most":
        direct = np.mean(m - t1 * s > pred.value)
    elif pred.kind == "equal":
        holds = (m - t2 * s <= pred.value) & (pred.value <= m + t2 * s) & (2 * t2 * s <= pred.tolerance)
        direct = np.mean(~holds)
    else:
        direct = np.mean(m - t2 * s > pred.value)
    se = sd / math.sqrt(SEEDS)
    simulated = simulated_power(pred, alternative, se, SEEDS - 1, 4000, np.random.default_rng(6))
    assert simulated == pytest.approx(direct, abs=0.04)
    assert 0.1 < direct < 0.95  # a case where power is neither trivial nor certain


def _settings(min_power: float = 0.8):
    """The analysis settings add_power reads (the schema's defaults are not needed: only these two)."""
    from types import SimpleNamespace

    return SimpleNamespace(study_seed=1, power_simulations=2000, min_power=min_power)


@pytest.mark.parametrize(("kind", "claimed"), [("greater", "holds"), ("equal", "holds"), ("at_most", "consistent")])
def test_low_power_vetoes_only_a_failure_to_reject(kind, claimed):
    """Below min_power, a 'consistent' (a bound not contradicted) and a 'holds' on an equality read
    'undecided'; a directional 'holds' (the interval wholly above the value) is a rejection and keeps
    its verdict, with its power stated. Power here is low on purpose: an alternative near the value."""
    pred = {"greater": Prediction("greater", 0.0), "equal": Prediction("equal", 1.0, 1.0)}.get(
        kind, Prediction("at_most", 1.0)
    )
    row = {"claim": f"a {kind} claim", "verdict": claimed, "why": "interval"}
    alternative = {"greater": 0.1, "equal": 1.02}.get(kind, 1.1)
    se = 0.05 if kind == "equal" else 0.5  # equal: a narrow interval that holds 1 whether or not 1.02 is true
    out = add_power(dict(row), pred, "a near alternative", alternative, se, 4, _settings())
    assert out["power"] < 0.8
    assert out["verdict"] == ("holds" if kind == "greater" else "undecided")
    assert ("undecided (power" in out["why"]) == (kind != "greater")
    assert out["alternative"].startswith("a near alternative")


@pytest.mark.parametrize("seeds", [3, 5])
def test_a_directional_holds_keeps_its_level_under_the_null_whatever_the_power(seeds):
    """Why a directional 'holds' needs no power: simulated under the null (true mean exactly at the
    value), the rule says 'holds' in at most 2.5% of the studies (one tail of the 95% interval, + Monte
    Carlo slack), and under a small true effect it says 'does not hold' (the wrong sign) no more often:
    low power costs detections, not false ones."""
    rng = np.random.default_rng(11)
    pred = Prediction("greater", 0.0)
    for truth, most in ((0.0, 0.035), (0.05, 0.035)):
        X = truth + 0.3 * rng.standard_normal((4000, seeds))
        verdicts = [verdict(pred, *mean_interval(x, (-math.inf, math.inf))[1:])[0] for x in X]
        wrong = "holds" if truth == 0.0 else "does not hold"
        assert np.mean([v == wrong for v in verdicts]) <= most
        if truth > 0:  # the same design's power against this effect is low: most studies do not detect it
            assert np.mean([v == "holds" for v in verdicts]) < 0.5
