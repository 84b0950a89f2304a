"""benchmarks/estimate_vs_recorded.py: the cost model's CPU time beside a run's recorded job benchmarks."""

from __future__ import annotations

import importlib.util
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
