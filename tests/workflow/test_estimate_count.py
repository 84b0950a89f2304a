"""One job count: `groupsparse estimate` counts the jobs snakemake's dry run (and its progress lines,
"x of N steps") counts for a fresh run of each shipped study, and its last line is the run's start line
(costs.calibrate.study_estimate_line) for that count."""

from __future__ import annotations

import re

import pytest

from groupsparse import cli

from conftest import REPO, run_snakemake

CONFIGS = [["config.yaml"], ["configs/tiny.yaml"], ["configs/population_gd.yaml", "configs/slices/population_D64.yaml"]]


@pytest.mark.parametrize("configs", CONFIGS, ids=["+".join(c) for c in CONFIGS])
def test_the_estimate_counts_the_jobs_snakemake_runs(configs, tmp_path, capsys):
    files = [str(REPO / c) for c in configs]
    dry = run_snakemake("-n", "--cores", "2", "-d", str(tmp_path), "--configfile", *files)
    assert dry.returncode == 0, dry.stderr[-2000:]
    planned = int(re.search(r"^total\s+(\d+)$", dry.stdout + dry.stderr, re.M).group(1))
    assert cli.main(["estimate", "--no-calibration", "--brief", "--configfile", *files]) == 0
    counted = int(re.search(r"^total: (\d+) jobs \(", capsys.readouterr().out, re.M).group(1))
    assert counted == planned


def test_the_estimates_last_line_is_the_start_line_for_that_count(tmp_path, monkeypatch, capsys):
    """With the calibration given (none measured here), `groupsparse estimate`'s last line is the run's start
    line, job count and words."""
    from groupsparse.costs import calibrate

    cal = {"startup_s": 1.0, "pretrain_scale": 2.0, "transfer_scale": 3.0}
    monkeypatch.setattr(calibrate, "load_or_measure", lambda results, threads=1: cal)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["estimate", "--brief", "--cores", "2", "--configfile", str(REPO / "configs/tiny.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    total = int(re.search(r"^total: (\d+) jobs", lines[-3]).group(1))
    assert re.fullmatch(
        rf"estimate: about \S+ on this machine for the {total} jobs to run on 2 cores \(calibrated on this machine: "
        r"job start 1\.0 s, pretraining 2\.00x, fits 3\.00x the cost model's reference\)",
        lines[-1],
    ), lines[-1]
