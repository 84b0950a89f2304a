"""`groupsparse review` reads its answers from the tables: the n needed (or how far the grid went),
each claim with its power where the table has one, and every diverged run, failed fit and
hyperparameter at its grid's edge. (tests/workflow/test_report.py runs it on a real study's tables.)"""

from __future__ import annotations

import math

import pandas as pd

from groupsparse.commands import review


def test_n_needed_is_the_tables_and_unreached_says_how_far_the_grid_went():
    sc = pd.DataFrame(
        [
            {"run": "base", "role": "task", "downstream": "transfer", "method": m, "target_accuracy": t,
             "n_needed": n, "ci_low": 20.0, "ci_high": math.inf, "reached_on_grid": math.isfinite(n),
             "n_seeds": 5, "max_n_on_grid": 4096.0}
            for m, n in (("logreg", 700.0), ("mlp", math.nan), ("pretrained_finetune", 60.0))
            for t in (0.9, 0.95)
        ]
        + [{"run": "scale_d5_D4", "role": "scaling", "downstream": "transfer", "method": "logreg",
            "target_accuracy": 0.9, "n_needed": 10.0, "ci_low": 5.0, "ci_high": 20.0, "reached_on_grid": True,
            "n_seeds": 5, "max_n_on_grid": 2048.0}]
    )  # fmt: skip
    rows = review.sample_complexity_rows(sc, 0.9)
    assert [(r["what"], r["answer"]) for r in rows] == [
        ("pretrained_finetune", "60"),
        ("logreg", "700"),
        ("mlp", "not reached by n = 4096"),
    ]
    assert "20 to beyond the grid" in rows[0]["detail"]
    assert len(review.sample_complexity_rows(sc, 0.9, all_runs=True)) == 4


def test_claims_give_power_only_where_the_table_has_it():
    claims = pd.DataFrame([{"claim": "c1", "run": "", "verdict": "holds", "measured": 1.0, "low": 0.5, "high": 2.0}])
    assert "power n/a" in review.claim_rows(claims)[0]["detail"]
    assert "power 0.83" in review.claim_rows(claims.assign(power=0.831))[0]["detail"]


def test_problems_name_diverged_runs_failed_fits_and_grid_edges():
    pretrain = pd.DataFrame(
        [{"run": "a", "n_seeds_ok": 3, "n_seeds_diverged": 2}, {"run": "b", "n_seeds_ok": 5, "n_seeds_diverged": 0}]
    )
    summary = pd.DataFrame([{"run": "a", "method": "mlp", "n": 8, "n_seeds_not_ok": 1, "statuses_not_ok": "failed"}])
    transfer = pd.DataFrame(
        [{"run": "a", "method": "mlp", "n": n, "hp_at_edge": edge} for n, edge in ((8, True), (32, False), (64, None))]
    )
    rows = review.problem_rows(pretrain, summary, transfer)
    assert [(r["question"], r["run"], r["what"]) for r in rows] == [
        ("diverged", "a", "pretraining"),
        ("fit not ok", "a", "mlp"),
        ("hp at grid edge", "a", "mlp"),
    ]
    assert rows[0]["detail"] == "2 of 5 seeds" and rows[2]["detail"] == "1 of 3 fits, at n = 8"
