"""benchmarks/compare_runs.py: how far apart two runs of one job are (used to compare two kernels' runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("compare_runs", REPO / "benchmarks" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)


def _run(seeds=3, steps=50, jitter=None):
    rows = []
    for s in range(seeds):
        for st in range(0, steps * 16, 16):
            m = 1 - np.exp(-st / 300)
            if jitter and s == jitter[0] and st >= jitter[1]:
                m -= 0.01
            rows.append({"seed": s, "step": st, "attention_min_on_relevant": m, "train_loss": 1 - m, "status": "ok"})
    return pd.DataFrame(rows)


def test_identical_runs_agree_exactly_and_never_part():
    quantities, seeds = compare_runs.compare(_run(), _run())
    assert (quantities["max_abs_diff"] == 0).all()
    assert seeds["parts_at_step"].isna().all() and len(seeds) == 3


def test_a_run_that_parts_is_found_at_its_first_differing_step_and_a_shorter_run_is_compared_where_both_are():
    b = _run(jitter=(1, 320))
    b = b[~((b["seed"] == 2) & (b["step"] > 400))]  # seed 2 stopped early (as a diverged seed does)
    b.loc[(b["seed"] == 2), "status"] = "diverged"
    quantities, seeds = compare_runs.compare(_run(), b)
    seeds = seeds.set_index("seed")
    assert seeds.loc[1, "parts_at_step"] == 320 and pd.isna(seeds.loc[0, "parts_at_step"])
    assert seeds.loc[2, "b_last_step"] == 400 and seeds.loc[2, "a_last_step"] == 784
    assert seeds.loc[2, "b_status"] == "diverged"
    row = quantities.set_index("quantity").loc["attention_min_on_relevant"]
    assert abs(row["max_abs_diff"] - 0.01) < 1e-12
