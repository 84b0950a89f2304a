"""benchmarks/cases/flow.py and benchmarks/gpu_flow.py at tiny sizes: the flow's cost beside population gradient
descent's (live, and read from a study's results), and the GPU script's dry run on the CPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
D = 6  # in both population studies' grids (configs/population.yaml, configs/population_gd.yaml)


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import bench

    return bench


def run_case(bench, argv):
    import torch

    args = bench.parse_args(["--quick", "--threads", "1", *argv])
    ctx = bench.Context(torch, bench.Table(), args)
    return ctx, bench.case("flow").run(ctx)


def test_the_flow_case_runs_a_short_flow_live_and_prints_its_table(bench, capsys):
    ctx, targets = run_case(bench, ["--flow-D", str(D), "--flow-samples", "32"])
    out = capsys.readouterr().out
    assert targets == []
    header = next(line for line in out.splitlines() if "solver steps" in line and "GD / flow" in line).split()
    line = next(line for line in out.splitlines() if line.split()[:1] == [str(D)]).split()
    assert line[1:4] == ["32", "1", f"{0.25 * D**3:g}"]  # N, replicates, flow time 0.25 D^3
    assert int(line[4]) > 0 and int(line[5]) > int(line[4]) and float(line[-1]) > 0, (header, line)
    (row,) = [r for r in ctx.table.rows if r[0] == "flow"]
    assert float(row[2]) > 0 and row[3] == "CPU-h" and float(row[7]) > 0  # the flow's CPU-h, the ratio GD / flow


def test_the_flow_case_reads_the_flows_counters_from_a_studys_results(bench, capsys, tmp_path):
    from workloads import flow_grid_run, flow_spec

    from groupsparse.training.flow import FlowRun

    tau = 2.0 * D**3
    traj = FlowRun(flow_spec(flow_grid_run(D), samples=32, eval_samples=64, flow_time=tau), [0, 1]).run().trajectory
    run = f"scale_d10_D{D}"
    (tmp_path / "pretrain" / run).mkdir(parents=True)
    (tmp_path / "benchmarks" / "pretrain" / run).mkdir(parents=True)
    for seed, rss in ((0, "312.5"), (1, "401.25")):
        traj[traj["seed"] == seed].to_parquet(tmp_path / "pretrain" / run / f"seeds{seed}-{seed}.trajectory.parquet")
        tsv = f"s\th:m:s\tmax_rss\tmax_vms\tcpu_time\n3.1\t0:00:03\t{rss}\tNA\t2.9\n"
        (tmp_path / "benchmarks" / "pretrain" / run / f"seeds{seed}-{seed}.tsv").write_text(tsv)
    at = traj[(traj["flow_time"] == tau) & traj["record"].isin(("grid", "final"))]
    assert len(at) == 2

    ctx, targets = run_case(bench, ["--from-results", str(tmp_path), "--flow-D", str(D), "8"])
    out = capsys.readouterr().out
    assert targets == []  # D = 128 and 256 only
    line = next(line for line in out.splitlines() if line.split()[:1] == [str(D)]).split()
    assert line[1:4] == ["32", "2", f"{tau:g}"]
    assert float(line[4]) == pytest.approx(at["solver_steps"].mean(), abs=0.5)
    assert float(line[5]) == pytest.approx(at["field_evaluations"].mean(), abs=0.5)
    cpu = at["cpu_seconds"].mean()
    assert float(line[6]) == pytest.approx(cpu, rel=1e-3)
    assert float(line[7]) == pytest.approx(4 * cpu / 3600, rel=1e-3) and line[8] == "401"  # x4 replicates, peak
    gd_hours, ratio = float(line[-2]), float(line[-1])
    assert ratio == pytest.approx(gd_hours / (4 * cpu / 3600), rel=1e-2)
    assert int(line[-3].replace(",", "")) == math.ceil(tau / 0.5)  # GD's steps at eta(6) = 0.5
    empty = next(line for line in out.splitlines() if line.split()[:1] == ["8"]).split()
    assert empty[1:3] == ["-", "0"]  # D = 8 has no results: GD's side alone
    assert any(r[0] == "flow" and r[2] == "-" and "no finished replicate" in r[8] for r in ctx.table.rows)


def test_the_gpu_script_runs_its_code_path_on_the_cpu(tmp_path):
    out = tmp_path / "flow_gpu.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_flow.py"), "--cpu-dry-run", "--timed", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(r["D"], r["N"]) for r in rows] == [(8, 64), (12, 128)]
    for r in rows:
        assert r["gradient_s"] > 0 and r["evaluate_s"] > 0 and r["estimate"]["seconds"] > 0
        assert r["max_rel_difference"] < 1e-10  # the torch field and the loops compute the same sums
        assert all("gradient_s" in c for c in r["cpu"].values())
    assert "CPU / torch" in proc.stdout and "a replicate to 8 D^3" in proc.stdout
