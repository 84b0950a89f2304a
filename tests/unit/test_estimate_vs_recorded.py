"""benchmarks/estimate_vs_recorded.py: the start-of-run estimate and the cost model's CPU time beside a
run's recorded job benchmarks."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from groupsparse import costs
from groupsparse.commands.estimate import load_study

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("estimate_vs_recorded", REPO / "benchmarks" / "estimate_vs_recorded.py")
estimate_vs_recorded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(estimate_vs_recorded)


def test_each_benchmarked_run_gets_the_estimate_and_the_sum_of_its_jobs_cpu_time(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    config = "configs/tiny.yaml"
    folder = tmp_path / "benchmarks" / "pretrain" / "base"
    folder.mkdir(parents=True)
    (folder / "seeds0-1.tsv").write_text("s\tcpu_time\n1.0\t90.0\n")
    (folder / "seeds2-3.tsv").write_text("s\tcpu_time\n1.0\t30.0\n")
    df = estimate_vs_recorded.table(config, tmp_path).set_index("run")
    assert list(df.index) == ["base"]
    cfg, runs = load_study(config)
    jobs = cfg["jobs"]
    rows = costs.estimate_study(runs, cfg["device"], jobs["pretrain_threads"], jobs["transfer_threads"])
    predicted = next(r["cpu_hours"] for r in rows if r["rule"] == "pretrain" and r["run"] == "base") * 60
    assert df.loc["base", "recorded_cpu_min"] == pytest.approx(2.0)
    assert df.loc["base", "predicted_cpu_min"] == pytest.approx(predicted)
    assert estimate_vs_recorded.table(config, tmp_path, runs="nothing").empty


def test_the_start_estimate_is_set_against_the_recorded_jobs_and_the_run_time(tmp_path):
    results = tmp_path / "results" / "s"
    jobs = {"pretrain/a/seeds0-1": 120.0, "transfer/a/seeds0-1/g": 60.0, "aggregate": 6.0, "figures/a": 30.0}
    start = 1_000_000.0
    (results / "benchmarks" / "pretrain" / "a").mkdir(parents=True)
    (results / "benchmarks" / "transfer" / "a" / "seeds0-1").mkdir(parents=True)
    estimate = {"cores": 1, "threads": 1, "written": start, "jobs": jobs}
    (results / "estimate.json").write_text(json.dumps(estimate))
    for job, took, end in (("pretrain/a/seeds0-1", 240.0, start + 240), ("transfer/a/seeds0-1/g", 90.0, start + 330),
                           ("aggregate", 6.0, start + 340)):  # fmt: skip
        tsv = results / "benchmarks" / f"{job}.tsv"
        tsv.write_text(f"s\tcpu_time\n{took}\t{took}\n")
        os.utime(tsv, (end, end))
    check = estimate_vs_recorded.start_estimate(results)
    kinds = check["kinds"].set_index("kind")
    assert list(kinds.index) == ["aggregate", "pretrain", "transfer"]  # the unfinished figures job is left out
    assert kinds.loc["pretrain", "predicted_over_recorded"] == pytest.approx(0.5)
    assert kinds.loc["transfer", "recorded_min"] == pytest.approx(1.5)
    assert check["recorded_s"] == pytest.approx(340.0) and check["predicted_s"] == pytest.approx(186.0)
    text = estimate_vs_recorded.start_estimate_text(check)
    assert "estimate / recorded = 0.55" in text and "loaded by other work during the run runs longer" in text
    assert "rewrote" not in text
    assert estimate_vs_recorded.start_estimate(results, wall_seconds=372.0)["recorded_s"] == 372.0
    (results / "estimate.json").write_text(json.dumps(estimate | {"written": start + 3600}))
    assert "not the estimate the run started with" in estimate_vs_recorded.start_estimate_text(
        estimate_vs_recorded.start_estimate(results)
    )
    assert estimate_vs_recorded.start_estimate(tmp_path) is None


def test_recompute_predicts_the_jobs_again_from_the_runs_calibration(tmp_path, monkeypatch):
    """--recompute: the current cost model's predictions from the probe seconds the run measured, i.e.
    calibrate.job_predictions on calibrate.rescaled(calibration); the printed ones are left aside."""
    from groupsparse.costs import calibrate

    monkeypatch.chdir(REPO)
    config, runs = load_study("configs/tiny.yaml")
    cal = {"host": "h", "threads": 1, "time": 0.0, "startup_s": 2.0, "pretrain_measured_s": 1.0,
           "transfer_measured_s": 0.5, "pretrain_scale": 9.0, "transfer_scale": 9.0}  # fmt: skip
    results = tmp_path / "results" / "tiny"
    (results / "benchmarks" / "pretrain" / "base").mkdir(parents=True)
    printed = {job: 1000.0 for job in calibrate.job_predictions(runs, config, cal)}
    (results / "estimate.json").write_text(json.dumps({"cores": 2, "threads": 1, "written": 0.0, "calibration": cal,
                                                       "jobs": printed}))  # fmt: skip
    (results / "benchmarks" / "pretrain" / "base" / "seeds0-1.tsv").write_text("s\tcpu_time\n10.0\t10.0\n")
    again = calibrate.job_predictions(runs, config, calibrate.rescaled(cal))
    check = estimate_vs_recorded.start_estimate(results, recompute=(config, runs))
    kinds = check["kinds"].set_index("kind")
    assert kinds.loc["pretrain", "predicted_min"] == pytest.approx(again["pretrain/base/seeds0-1"] / 60)
    assert check["recomputed"] and "recomputed by the current cost model" in estimate_vs_recorded.start_estimate_text(
        check
    )
    as_printed = estimate_vs_recorded.start_estimate(results)
    assert as_printed["kinds"].set_index("kind").loc["pretrain", "predicted_min"] == pytest.approx(1000.0 / 60)
    p, t = calibrate.probe_predictions(1)
    assert calibrate.rescaled(cal)["pretrain_scale"] == pytest.approx(1.0 / p)
    assert calibrate.rescaled(cal)["transfer_scale"] == pytest.approx(0.5 / t)
