"""Summaries count diverged and skipped seeds apart; figures mark them."""

from __future__ import annotations

import math

import pandas as pd
import pytest


def _trajectory(statuses: dict[int, str]) -> pd.DataFrame:
    """Two recorded steps per seed; a diverged seed's metrics are NaN and inf (as overflow leaves them)."""
    from groupsparse.analysis.summary import FINAL_METRICS

    rows = []
    for seed, status in statuses.items():
        for step in (0, 10):
            bad = status == "diverged" and step == 10
            rows.append(
                {
                    "run": "r",
                    "task_name": "r",
                    "d": 2,
                    "D": 3,
                    "seed": seed,
                    "step": step,
                    "status": status,
                    "wall_seconds": 1.0,
                    **{
                        m: (float("nan") if i % 2 else float("inf")) if bad else float(seed + step + i) / 100
                        for i, m in enumerate(FINAL_METRICS)
                    },
                }
            )  # / 100: inside every metric's range
    return pd.DataFrame(rows)


def test_pretrain_summary_counts_diverged_seeds_apart_and_never_averages_them():
    from groupsparse.analysis.summary import FINAL_METRICS, pretrain_summary

    s = pretrain_summary(_trajectory({0: "ok", 1: "diverged", 2: "ok"})).iloc[0]
    assert (s["n_seeds_ok"], s["n_seeds_diverged"]) == (2, 1)
    for i, m in enumerate(FINAL_METRICS):
        assert s[f"{m}_mean"] == pytest.approx(((0 + 10 + i) + (2 + 10 + i)) / 200), m  # seeds 0 and 2 only
        assert s[f"{m}_ci_low"] <= s[f"{m}_mean"] <= s[f"{m}_ci_high"]


def test_transfer_summary_counts_skipped_and_diverged_rows_apart():
    from groupsparse.analysis.summary import transfer_summary

    nan = float("nan")
    rows = [
        {
            "run": "r",
            "task_name": "r",
            "downstream": "transfer",
            "method": "m",
            "n": 8,
            "seed": s,
            "test_accuracy": acc,
            "test_loss": 0.5,
            "train_accuracy": 1.0,
            "fit_seconds": 0.1,
            "status": st,
        }
        for s, acc, st in ((0, 0.6, "ok"), (1, nan, "skipped_pretrain_diverged"), (2, 0.8, "ok"), (3, nan, "diverged"))
    ]
    s = transfer_summary(pd.DataFrame(rows)).iloc[0]
    assert s["mean_test_accuracy"] == pytest.approx(0.7, abs=1e-15)
    assert (s["n_seeds_ok"], s["n_seeds_not_ok"]) == (2, 2)
    assert s["statuses_not_ok"] == "diverged,skipped_pretrain_diverged"
    # a method without the paper model's read-out has no alignment columns: NaN, not an error
    assert math.isnan(s["mean_cos_v1_new"]) and math.isnan(s["cos_v1_old_ci_high"])


def test_transfer_summary_carries_the_read_outs_alignment_per_n_with_its_interval():
    """The protocol's mechanism over the n grid: per n, the seed mean of cos(v1, new v*) and of cos(v1, old
    v*) of the fitted read-out, with the study's t interval clipped to [-1, 1]; only ok seeds count."""
    from groupsparse.analysis.summary import transfer_summary

    rows = [
        {
            "run": "r",
            "task_name": "r",
            "downstream": "transfer",
            "method": "m",
            "n": n,
            "seed": seed,
            "test_accuracy": 0.7,
            "test_loss": 0.5,
            "train_accuracy": 1.0,
            "fit_seconds": 0.1,
            "status": status,
            "cos_v1_new": new,
            "cos_v1_old": old,
        }
        for n, seed, new, old, status in (
            (8, 0, 0.10, 0.90, "ok"),
            (8, 1, 0.20, 0.80, "ok"),
            (8, 2, 0.99, 0.0, "diverged"),
            (64, 0, 0.97, 0.10, "ok"),
            (64, 1, 0.999, 0.05, "ok"),
        )
    ]
    s = transfer_summary(pd.DataFrame(rows)).set_index("n")
    assert s.loc[8, "mean_cos_v1_new"] == pytest.approx(0.15) and s.loc[8, "mean_cos_v1_old"] == pytest.approx(0.85)
    assert s.loc[64, "mean_cos_v1_new"] == pytest.approx(0.9845)
    for n in (8, 64):
        for col in ("cos_v1_new", "cos_v1_old"):
            assert -1.0 <= s.loc[n, f"{col}_ci_low"] <= s.loc[n, f"mean_{col}"] <= s.loc[n, f"{col}_ci_high"] <= 1.0
    assert s.loc[64, "cos_v1_new_ci_high"] == 1.0  # two seeds near 1: the t interval clipped at the range


def test_pretrain_figures_mark_diverged_seeds_red_with_an_x(tmp_path, monkeypatch):
    from groupsparse.figures import runs as plots

    figures = {}
    real_save = plots.save
    monkeypatch.setattr(
        plots, "save", lambda fig, outdir, name: figures.setdefault(name, fig) and real_save(fig, outdir, name)
    )
    traj = _trajectory({0: "ok", 1: "diverged"})
    plots.pretrain_curves(traj, "t", tmp_path)
    marks = [
        line
        for ax in figures["pretrain_curves"].axes
        for line in ax.get_lines()
        if line.get_marker() == "x" and line.get_color() == "tab:red"
    ]
    assert len(marks) == 3  # one per panel: loss, accuracy, attention mass
    assert all(list(line.get_xdata()) == [10] for line in marks)  # at the diverged seed's last step
    assert (tmp_path / "pretrain_curves.png").stat().st_size > 1000


def test_transfer_figure_gives_a_method_one_colour_in_every_panel(tmp_path, monkeypatch):
    """The negative control may fit fewer methods (transfer.control_methods): colours must not shift."""
    from groupsparse.figures import runs as plots

    figures = {}
    real_save = plots.save
    monkeypatch.setattr(
        plots, "save", lambda fig, outdir, name: figures.setdefault(name, fig) and real_save(fig, outdir, name)
    )
    rows = [
        {
            "downstream": down,
            "method": m,
            "n": n,
            "mean_test_accuracy": 0.7,
            "ci_low": 0.6,
            "ci_high": 0.8,
            "n_seeds_not_ok": 0,
        }
        for down, methods in (("transfer", ["group_lasso", "logreg", "mlp"]), ("negative_control", ["logreg"]))
        for m in methods
        for n in (8, 16)
    ]
    plots.transfer_accuracy(pd.DataFrame(rows), "t", tmp_path)
    transfer, control = figures["transfer_accuracy"].axes[:2]
    colour = {line.get_label(): line.get_color() for line in transfer.get_lines() if line.get_marker() == "o"}
    (logreg,) = [line for line in control.get_lines() if line.get_marker() == "o"]
    assert logreg.get_color() == colour[logreg.get_label()] and len(set(colour.values())) == 3


def test_every_column_the_analysis_reads_is_required_of_every_job_table():
    """One column registry (io.tables): a table that `check-tables` and `aggregate` accept has every
    column the analysis reads, so a missing column stops the study before the analysis, naming the file."""
    from groupsparse.io.tables import ANALYSED_COLUMNS, REQUIRED_COLUMNS

    for kind, columns in ANALYSED_COLUMNS.items():
        assert set(columns) <= set(REQUIRED_COLUMNS[kind]), kind


def test_the_run_time_line_counts_the_jobs_jobs_json_names_and_says_what_it_left_out(tmp_path):
    """A snapshot's run-time line sums the benchmarks of the last run's jobs (jobs.json); a job run in the same
    folder for another config (a check run ahead of its level) is named as left out, not summed."""
    import json

    from groupsparse.io.report import overhead_section
    from groupsparse.study.jobstate import study_benchmarks

    results = tmp_path / "results" / "s"
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    runs = (("pretrain/a/seeds0-0", 100.0, 50.0), ("aggregate", 10.0, 70.0), ("pretrain/b/x", 1e4, 900.0))
    for name, seconds, rss in runs:
        tsv = results / "benchmarks" / f"{name}.tsv"
        tsv.parent.mkdir(parents=True, exist_ok=True)
        tsv.write_text(header + f"{seconds}\t0:00:00\t{rss}\t1\t1\t1\t0\t0\t50\t{seconds}\n")
    assert study_benchmarks(results) is None
    line = overhead_section(results, None, 2, study_benchmarks(results))
    assert line.startswith("3 jobs; sum of job wall times 10110 s") and "900 MB" in line  # no jobs.json: all
    jobs = {k: {"rule": k, "benchmark": f"results/s/benchmarks/{k}.tsv"} for k in ("pretrain/a/seeds0-0", "aggregate")}
    (results / "jobs.json").write_text(json.dumps({"jobs": jobs}))
    line = overhead_section(results, None, 2, study_benchmarks(results))
    assert line.startswith("2 jobs; sum of job wall times 110 s (ideal on 2 cores: 55 s)"), line
    assert "largest peak memory 70 MB (aggregate.tsv)" in line and "not counted: 1 benchmark file(s)" in line
    (results / "jobs.json").write_text(json.dumps({"jobs": {}}))
    assert overhead_section(results, None, 2, study_benchmarks(results)).startswith("no job of the study has finished")
