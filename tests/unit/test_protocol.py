"""The paper's fine-tuning protocol as a verdict (analysis/protocol.py): the kept-v variant against
its v-reset twin on synthetic transfer tables whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from schema_settings import settings

from groupsparse.analysis.claims import sample_gap_claims
from groupsparse.analysis.protocol import protocol_claims, reset_pairs

SIZES = np.unique(np.round(2.0 ** (np.arange(4, 25) / 2))).astype(int)  # 4 .. 4096, a factor sqrt 2


def _table(scales: dict, cos: dict, seeds=5, eta_rel=None, seed=0) -> pd.DataFrame:
    """Accuracy 1 - 0.5 exp(-n / scale) (+ noise) per method; the fitted read-out's cos(v1, new v*) per
    method (+ noise); the chosen eta_rel per method (every fit the same)."""
    rng = np.random.default_rng(seed)
    starts = {"pretrained_finetune": "pretrained", "pretrained_finetune_v0": "zero", "logreg": None}
    rows = []
    for method, scale in scales.items():
        for s in range(seeds):
            acc = np.clip(1 - 0.5 * np.exp(-SIZES / (scale * math.exp(0.1 * rng.standard_normal()))), 0, 1)
            for n, a in zip(SIZES, acc + 0.005 * rng.standard_normal(SIZES.size)):
                step = (eta_rel or {}).get(method)
                rows.append(
                    {
                        "run": "base",
                        "role": "task",
                        "task_name": "base",
                        "d": 10,
                        "D": 10,
                        "downstream": "transfer",
                        "seed": s,
                        "method": method,
                        "n": int(n),
                        "test_accuracy": float(a),
                        "status": "ok",
                        "selection": "cv (3 folds)" if n < 128 else "holdout (1/2 of n)",
                        "hp_edge": "eta_rel" if step in (0.001, 10000.0) else "",
                        "p_eta_rel": step,
                        "p_v_start": starts[method],
                        "cos_v1_new": cos.get(method, math.nan) + 0.02 * rng.standard_normal(),
                        "cos_v1_new_start": 0.1 if starts[method] == "pretrained" else math.nan,
                    }
                )
    return pd.DataFrame(rows)


def _claim(rows: list[dict], text: str) -> dict:
    hit = [r for r in rows if text in r["claim"]]
    assert len(hit) == 1, (text, [r["claim"] for r in rows])
    return hit[0]


def test_the_pairs_are_found_from_the_settings_not_the_names():
    assert reset_pairs(["logreg", "pretrained_finetune_v0", "pretrained_finetune", "pretrained_frozen_W"]) == [
        ("pretrained_finetune", "pretrained_finetune_v0")
    ]
    assert set(reset_pairs(["pretrained_frozen_W", "pretrained_frozen_W_v0", "pretrained_probe"])) == {
        ("pretrained_frozen_W", "pretrained_frozen_W_v0")
    }


def test_a_reset_that_needs_8x_fewer_samples_and_aligns_better_holds():
    table = _table(
        {"pretrained_finetune": 400.0, "pretrained_finetune_v0": 50.0},
        {"pretrained_finetune": 0.3, "pretrained_finetune_v0": 0.9},
        eta_rel={"pretrained_finetune": 10000.0, "pretrained_finetune_v0": 10.0},
    )
    rows = protocol_claims(table, settings(n_boot=400))
    gap = _claim(rows, "needs fewer samples for accuracy 0.9 (base, transfer)")
    assert gap["verdict"] == "holds" and gap["measured"] == pytest.approx(math.log(8), abs=0.2)
    assert gap["power"] > 0.5
    align = _claim(rows, "cos(v1, new v*) after fine-tuning at n = 4096")
    assert align["verdict"] == "holds" and align["measured"] == pytest.approx(0.6, abs=0.05)
    steps = _claim(rows, "share of cross-validated step sizes at an edge")
    assert steps["verdict"] == "descriptive" and steps["measured"] == 1.0
    assert "at the upper edge 105, at the lower 0" in steps["config"]  # 5 seeds x 21 sizes


def test_a_reset_that_changes_nothing_is_not_confirmed():
    same = {"pretrained_finetune": 100.0, "pretrained_finetune_v0": 100.0}
    table = _table(same, {"pretrained_finetune": 0.8, "pretrained_finetune_v0": 0.8}, seed=3)
    rows = protocol_claims(table, settings(n_boot=400))
    for target in (0.8, 0.9):
        gap = _claim(rows, f"needs fewer samples for accuracy {target:g} (base, transfer)")
        assert gap["verdict"] != "holds" and abs(gap["measured"]) < 0.2
    assert _claim(rows, "cos(v1, new v*)")["verdict"] != "holds"


def test_a_kept_start_that_never_learns_gives_a_lower_bound_on_the_gap():
    table = _table({"pretrained_finetune": 1e9, "pretrained_finetune_v0": 50.0}, {})
    gap = _claim(protocol_claims(table, settings(n_boot=200)), "for accuracy 0.8 (base, transfer)")
    assert gap["high"] == math.inf and gap["low"] > 0 and gap["verdict"] == "holds"
    assert "pretrained_finetune never reaches it: measured is a lower bound" in gap["config"]


def test_the_gap_to_logreg_is_the_same_computation():
    """sample_gap_claims and the protocol's gap share n_star_gap: the same curves give the same gap."""
    table = _table({"pretrained_finetune": 400.0, "logreg": 50.0}, {})
    gap = _claim(sample_gap_claims(table, settings(n_boot=200)), "for accuracy 0.9 (base, transfer)")
    assert gap["measured"] == pytest.approx(-math.log(8), abs=0.2) and gap["verdict"] == "does not hold"


def test_a_gap_neither_variant_reaches_has_no_power():
    table = _table({"pretrained_finetune": 1e9, "pretrained_finetune_v0": 1e9}, {})
    gap = _claim(protocol_claims(table, settings(n_boot=200)), "for accuracy 0.9 (base, transfer)")
    assert gap["verdict"] == "inconclusive" and math.isnan(gap["power"])


def test_the_gap_power_is_the_pipeline_simulation_where_it_runs():
    """The protocol's gap states its power by simulating the whole pipeline (fitted curves drawn, the
    bootstrap gap and verdict rerun); without simulations the plug-in stands alone."""
    table = _table({"pretrained_finetune": 100.0, "pretrained_finetune_v0": 100.0}, {}, seeds=3, seed=3)
    simulated = _claim(
        protocol_claims(table, settings(n_boot=200, pipeline_power_simulations=100, pipeline_power_boot=100)),
        "for accuracy 0.9 (base, transfer)",
    )
    assert 0 <= simulated["power_pipeline"] <= 1 and simulated["power"] == simulated["power_pipeline"]
    plain = _claim(protocol_claims(table, settings(n_boot=200, pipeline_power_simulations=0)), "accuracy 0.9 (")
    assert math.isnan(plain["power_pipeline"]) and plain["power"] == plain["power_plugin"]


def test_the_simulated_power_matches_the_rejection_rate_under_its_alternative():
    """Truth: the reset needs a factor 2 fewer samples (the claims' alternative), 3 seeds. The share of 40
    independent tables on which the gap 'holds' agrees with the power simulated from one of them."""
    truth = {"pretrained_finetune": 150.0, "pretrained_finetune_v0": 75.0}
    quick = settings(n_boot=200, pipeline_power_simulations=0)
    replicates = 40
    held = sum(
        _claim(protocol_claims(_table(truth, {}, seeds=3, seed=100 + r), quick), "accuracy 0.9 (")["verdict"] == "holds"
        for r in range(replicates)
    )
    one = _claim(
        protocol_claims(_table(truth, {}, seeds=3, seed=7), settings(n_boot=200, pipeline_power_simulations=200)),
        "accuracy 0.9 (",
    )
    p = one["power_pipeline"]
    assert abs(held / replicates - p) <= 3 * math.sqrt(max(p * (1 - p), 0.05) / replicates) + 0.1
