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


# --- the one-screen summary (the default) and the report's front page


def test_the_summary_of_each_shipped_study_fits_a_screen_and_answers_its_questions():
    from conftest import REPO

    theorem = review.summary_lines(REPO / "docs" / "theorem")
    default = review.summary_lines(REPO / "docs" / "results")
    population = review.summary_lines(REPO / "docs" / "population_gd")
    for lines in (theorem, default, population):
        assert len(lines) <= review.SCREEN and all(len(line) <= 110 for line in lines[1:]), "\n".join(lines)
        assert lines[-1].startswith("  ") or lines[-1].startswith("problems")
    assert [line.split(". ")[0] for line in theorem if line[:2] in ("1.", "2.", "3.", "4.")] == ["2"]
    # question 1's law test, one line per kappa, as the population study's claims give it (typed columns)
    law = [line for line in population if line.startswith("  law test, population GD")]
    claims = pd.read_csv(REPO / "docs" / "population_gd" / "tables" / "claims.csv")
    grid = (claims["statement"] == "law_test") & claims["variant"].isna() & (claims["algorithm"] == "population")
    assert len(law) == int(grid.sum()) > 0
    text = "\n".join(default)
    assert [line.split(". ")[0] for line in default if line[:2] in ("1.", "2.", "3.", "4.")] == ["3", "4"]
    # the numbers come from the committed tables: the two methods needing fewest samples at 90% on base,
    # and the verdict counts, most frequent first
    sc = pd.read_csv(REPO / "docs" / "results" / "tables" / "sample_complexity.csv")
    at = sc[(sc["run"] == "base") & (sc["downstream"] == "transfer") & (sc["target_accuracy"] == 0.9)]
    first, second = at.sort_values("n_needed").head(2).itertuples()
    assert f"{first.method} {first.n_needed:.0f}, {second.method} {second.n_needed:.0f}" in text
    verdicts = pd.read_csv(REPO / "docs" / "results" / "tables" / "claims.csv")["verdict"].value_counts()
    top = ", ".join(f"{n} {v}" for v, n in verdicts.head(2).items())
    assert f"claims: {verdicts.sum()}: {top}" in text


def big_results(tmp_path, runs: int):
    """A results folder with ``runs`` task runs, every one with a diverged seed and a grid edge."""
    from groupsparse.io import files as io

    tables = tmp_path / "tables"
    tables.mkdir(parents=True)
    names = [f"task{i}" for i in range(runs)]
    sc = pd.DataFrame(
        [{"run": r, "role": "task", "downstream": "transfer", "method": m, "target_accuracy": 0.9, "n_needed": n,
          "ci_low": 1.0, "ci_high": 2.0, "reached_on_grid": True, "n_seeds": 5, "max_n_on_grid": 99.0}
         for r in names for m, n in (("logreg", 50.0), ("mlp", 70.0))]
    )  # fmt: skip
    ps = pd.DataFrame([{"run": r, "role": "task", "n_seeds_ok": 4, "n_seeds_diverged": 1} for r in names])
    tr = pd.DataFrame([{"run": r, "method": "mlp", "n": 8, "hp_at_edge": True} for r in names])
    for name, df in (("sample_complexity", sc), ("pretrain_summary", ps), ("transfer", tr)):
        io.write_parquet(df, tables / f"{name}.parquet", {})
    return tmp_path


def test_a_big_study_is_cut_to_a_screen_and_says_where_the_rest_is(tmp_path):
    lines = review.summary_lines(big_results(tmp_path, 60))
    text = "\n".join(lines)
    assert len(lines) <= review.SCREEN, text
    assert "(the rest: --all)" in text
    assert "diverged (60): task0 pretraining: 1 of 5 seeds" in text and "and 56 more" in text
    assert "hp at grid edge (60)" in text
    assert len(review.summary_lines(big_results(tmp_path / "small", 2))) < 20  # nothing cut when it fits


def test_all_and_csv_give_the_full_tables(tmp_path, capsys):
    from groupsparse import cli

    results = big_results(tmp_path, 40)
    assert cli.main(["review", str(results), "--all"]) == 0
    full = capsys.readouterr().out
    assert full.count("not reached") == 0 and sum(1 for line in full.splitlines() if " logreg " in line) == 40
    assert cli.main(["review", str(results), "--csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == ",".join(review.COLUMNS) and len(rows) == 1 + 80 + 40 + 40


def test_the_report_front_page_is_the_description_then_the_summary(tmp_path):
    """The HTML report opens on it: the study's description, then this run's summary as line blocks."""
    from groupsparse import cli

    results = big_results(tmp_path, 2)
    intro = tmp_path / "intro.rst"
    intro.write_text("The study.\n")
    out = tmp_path / "front.rst"
    assert cli.main(["review", str(results), "--intro", str(intro), "--out", str(out)]) == 0
    page = out.read_text()
    # line blocks: each line of the summary kept, wrapped to the window (a literal block would cut them)
    assert page.startswith("The study.\n\nThis run\n--------\n\n| review of ")
    summary = "\n".join(review.summary_lines(results))
    shown = page.split("--------\n\n", 1)[1].split("\n\n.. raw:: html", 1)[0]
    assert "\n".join(line[2:] for line in shown.splitlines()) == summary
    assert "align-items: flex-start" in page  # the landing view starts at the top, not centred
