"""The flow study's mechanism claims (analysis/flow_study.py) on trajectories whose law is known: a score gap
growing like log tau passes, one growing like a power of tau fails; r = (D - 1) exp(-gap) follows the gap, r =
exp(-gap / 2) does not. Each claim can fail either way."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from schema_settings import settings

from groupsparse.analysis.flow_study import late_rates, mechanism_claims
from groupsparse.analysis.scaling_laws import MIN_ATTENTION

D, d, T = 32, 10, 2.0**14


def trajectory(gap_of_tau, rest_of_gap, seeds=4) -> pd.DataFrame:
    """A flow run's grid records (8 an octave to T) with the score gap ``gap_of_tau(tau, seed)`` (query j != j*)
    and 1 - min attention ``rest_of_gap(gap)``."""
    tau = 2.0 ** np.arange(0, np.log2(T) + 1e-9, 1 / 8)
    rows = []
    for seed in range(seeds):
        gap = gap_of_tau(tau, seed)
        rows.append(
            pd.DataFrame(
                {
                    "run": f"scale_d{d}_D{D}",
                    "role": "scaling",
                    "variant": "",
                    "algorithm": "flow",
                    "seed": seed,
                    "record": "grid",
                    "d": d,
                    "D": D,
                    "flow_time": tau,
                    "samples": 2048,
                    "rtol": 1e-6,
                    "pop_pos_sq": gap,
                    "pop_pos_oo": 0.0,
                    "pop_pos_ss": gap,
                    "pop_pos_qs": 0.0,
                    "pop_wff_across": 0.0,
                    "pop_wff_along": 0.0,
                    MIN_ATTENTION: 1 - rest_of_gap(gap),
                }
            )  # fmt: skip
        )
    return pd.concat(rows, ignore_index=True)


def log_growth(tau, seed):
    """a log tau with a small wiggle, a differing per seed."""
    a = 1.0 + 0.05 * seed
    return a * np.log(tau) + 0.01 * np.sin(np.log(tau)) + 2.0


def power_growth(tau, seed):
    return (1.0 + 0.05 * seed) * tau**0.25


def follows(gap):
    return (D - 1) * np.exp(-gap)


def half(gap):
    return np.exp(-gap / 2)


def verdicts(traj) -> dict[str, str]:
    rows = mechanism_claims(traj, settings(gap_growth_tolerance=0.05))
    return {r["statement"]: r["verdict"] for r in rows}


def test_late_rates_read_the_growth_law():
    g = trajectory(log_growth, follows, seeds=1)
    r = late_rates(g)
    assert r["p_gap"] == pytest.approx(0.0, abs=0.02)
    assert r["b_gap"] == pytest.approx(1.0, abs=0.02) and r["b_r"] == pytest.approx(r["b_gap"], abs=1e-9)
    assert late_rates(trajectory(power_growth, follows, seeds=1))["p_gap"] == pytest.approx(0.25, abs=1e-6)


def test_log_growth_holds_and_power_growth_does_not():
    assert verdicts(trajectory(log_growth, follows))["gap_log_growth"] == "holds"
    assert verdicts(trajectory(power_growth, follows))["gap_log_growth"] == "does not hold"


def test_rest_follows_the_gap_or_not():
    assert verdicts(trajectory(log_growth, follows))["rest_follows_gap"] == "holds"
    assert verdicts(trajectory(log_growth, half))["rest_follows_gap"] == "does not hold"


def test_the_flow_agrees_with_gradient_descent_where_its_value_lies_in_gds_interval(tmp_path):
    """flow_vs_gd: typed verdicts from the committed by-D tables, agrees inside GD's interval, differs outside,
    inconclusive where either side is censored; GD's value is the row's predicted value."""
    from groupsparse.analysis.bound import BY_D_COLUMNS
    from groupsparse.analysis.flow_study import reference_claims

    q = "1 - min attention at flow time 1 D^3"
    gd = pd.DataFrame(
        [["", "population", 10, D, 128, 6 / D, 2, q, 0.01 * D, 0.009 * D, 0.011 * D, False] for D in (16, 32, 64)],
        columns=BY_D_COLUMNS,
    )
    path = tmp_path / "theorem_by_D.csv"
    gd.to_csv(path, index=False)
    flow = pd.DataFrame(
        [["", "flow", 10, 16, 0, 6 / 16, 4, q, 0.16, 0.15, 0.17, False],  # inside GD's [0.144, 0.176]
         ["", "flow", 10, 32, 0, 6 / 32, 4, q, 0.40, 0.39, 0.41, False],  # outside [0.288, 0.352]
         ["", "flow", 10, 64, 0, 6 / 64, 4, q, 0.64, 0.60, 0.70, True]],  # censored
        columns=BY_D_COLUMNS,
    )  # fmt: skip
    rows = reference_claims(flow, settings(reference_by_D=(str(path),)))
    got = {int(r["D"]): (r["verdict"], r["predicted_value"]) for r in rows}
    assert got == {
        16: ("agrees", pytest.approx(0.16)),
        32: ("differs", pytest.approx(0.32)),
        64: ("inconclusive", pytest.approx(0.64)),
    }
