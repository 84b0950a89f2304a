"""The cost model calibrated on this machine: the probe's measured and predicted times describe
the same work, the whole-study figure spreads the jobs over the cores, and `groupsparse status`
counts the work left: running jobs by their own progress, the others by the start's per-job
predictions scaled by how long the finished jobs took against theirs."""

from __future__ import annotations

import json
import os
import time

import pytest

from groupsparse.commands import status
from groupsparse.costs import calibrate


def test_the_probe_is_timed_against_the_prediction_for_the_same_work(one_thread, monkeypatch):
    monkeypatch.setattr(calibrate, "REPEATS", 1)
    cal = calibrate.measure(threads=1)
    for part in ("pretrain", "transfer"):
        assert cal[f"{part}_measured_s"] > 0 and cal[f"{part}_predicted_s"] > 0
        assert cal[f"{part}_scale"] == pytest.approx(cal[f"{part}_measured_s"] / cal[f"{part}_predicted_s"])
        # the same work on a slower or faster (or loaded) machine: not orders of magnitude apart
        assert 0.05 < cal[f"{part}_scale"] < 20, cal


def test_the_study_time_spreads_jobs_over_slots_but_never_below_the_longest_chain():
    jobs = {
        "pretrain/a/seeds0-1": 100.0,
        "transfer/a/seeds0-1/g1": 50.0,
        "transfer/a/seeds0-1/g2": 30.0,
        "pretrain/b/seeds0-1": 10.0,
        "aggregate": 4.0,
    }
    assert calibrate.study_seconds(jobs, cores=1) == pytest.approx(194.0)
    # a's pretraining then its longest transfer, then the tables
    assert calibrate.study_seconds(jobs, cores=2) == pytest.approx(154.0)
    assert calibrate.study_seconds(jobs, cores=64) == pytest.approx(154.0)
    figures = jobs | {"figures/a": 8.0, "figures/a.transfer": 2.0}
    assert calibrate.study_seconds(figures, cores=2) == pytest.approx(162.0)  # drawn side by side: the longer
    assert calibrate.study_seconds(jobs, cores=4, threads=4) == pytest.approx(194.0)  # one job at a time


def test_status_counts_only_the_work_left_corrected_by_the_run_so_far(tmp_path, capsys):
    results = tmp_path / "results" / "s"
    jobs = {"pretrain/a/seeds0-1": 120.0, "transfer/a/seeds0-1/g": 60.0, "aggregate": 6.0}
    (results / "logs" / "pretrain/a").mkdir(parents=True)
    (results / "benchmarks" / "pretrain/a").mkdir(parents=True)
    (results / calibrate.ESTIMATE_FILE).write_text(json.dumps({"cores": 1, "threads": 1, "jobs": jobs}))
    (results / "logs/pretrain/a/seeds0-1.log").write_text("progress: 10/30 steps (33%), 40s elapsed, about 80s left\n")
    now = time.time()
    line = status.time_left_line(results, now)
    assert line.startswith("about 2.4min left") and "3 jobs" in line  # 80 + 60 + 6 s
    # the pretraining job finished at twice its predicted time: the jobs left are scaled by that
    (results / "benchmarks/pretrain/a/seeds0-1.tsv").write_text("s\tmax_rss\n240\t100\n")
    line = status.time_left_line(results, now)
    assert line.startswith("about 2.2min left") and "2 jobs" in line and "2.00x" in line  # (60 + 6) x 2
    (results / "logs/transfer/a/seeds0-1").mkdir(parents=True)
    (results / "logs/transfer/a/seeds0-1/g.log").write_text("progress: 1/4 fits (25%), 30s elapsed, about 90s left\n")
    assert status.time_left_line(results, now).startswith("about 102s left")  # its own 90 s, then 6 x 2
    os.remove(results / calibrate.ESTIMATE_FILE)
    assert status.time_left_line(results, now) is None  # no estimate: no line rather than a guess
    assert status.seconds_of("3.5min") == 210 and status.seconds_of("2.1h") == pytest.approx(7560)
