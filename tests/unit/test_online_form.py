"""The online-error test that can fail (d + D against d D as two fitted models): its wrong-verdict
rates at the study's design, and its simulated power against the share of studies drawn from d D
that it judges 'does not hold'."""

from __future__ import annotations

import numpy as np
import pandas as pd
from schema_settings import settings

from groupsparse.analysis.online_form import online_form_claims

GRID = [(d, D) for d in (5, 10, 20) for D in (4, 8, 16)]
SIZES = (8, 32, 128, 512, 2048)


def study(size, rng, seeds=5, noise=0.3, learns=True) -> pd.DataFrame:
    """err = 0.02 size(d, D) log^2 n / n (``learns`` False: 0.45 at every n and size), a per-seed
    factor shared by a grid point's sizes (sd 0.3 in
    log: a pretrained checkpoint) and a little noise per (seed, n)."""
    rows = []
    for d, D in GRID:
        shared = np.exp(noise * rng.standard_normal(seeds))
        for n in SIZES:
            mean = 0.02 * size(d, D) * np.log(n) ** 2 / n if learns else 0.45
            err = mean * shared * np.exp(0.05 * rng.standard_normal(seeds))
            rows += [
                {
                    "run": f"scale_d{d}_D{D}",
                    "role": "scaling",
                    "d": d,
                    "D": D,
                    "downstream": "transfer",
                    "seed": s,
                    "method": "pretrained_frozen_W",
                    "n": n,
                    "status": "ok",
                    "online_error": float(err[s]),
                }
                for s in range(seeds)
            ]
    return pd.DataFrame(rows)


def test_wrong_verdicts_are_rare_and_the_power_is_what_the_test_achieves():
    s = settings(n_boot=200, power_simulations=500)
    rng = np.random.default_rng(7)
    plus = [online_form_claims(study(lambda d, D: d + D, rng), s)[0] for _ in range(60)]
    times = [online_form_claims(study(lambda d, D: d * D, rng), s)[0] for _ in range(60)]
    assert np.mean([r["verdict"] == "does not hold" for r in plus]) <= 0.05
    assert np.mean([r["verdict"] in ("holds", "undecided") for r in times]) <= 0.05
    achieved = np.mean([r["verdict"] == "does not hold" for r in times])
    claimed = np.mean([r["power"] for r in plus])  # each d + D study's own estimate of its power against d D
    assert abs(achieved - claimed) <= 0.15, (achieved, claimed)


def test_a_method_that_does_not_learn_is_not_credited_with_d_plus_D():
    """An error that is the same at every size (a method that never learns on the grid): neither claim
    holds; the constant model is not beaten."""
    s = settings(n_boot=200)
    rows = online_form_claims(study(lambda d, D: d + D, np.random.default_rng(3), learns=False), s)
    by = {("constant" if "constant" in r["claim"] else "d D"): r for r in rows}
    assert by["constant"]["verdict"] != "holds" and by["d D"]["verdict"] != "holds"
    assert by["constant"]["measured"] < by["constant"]["high"] and by["constant"]["low"] < 0
