"""The Snakemake workflow: parse speed and purity, dry runs, config validation, a tiny end-to-end run."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from conftest import REPO, TINY_PATH, run_snakemake

TINY = TINY_PATH


snakemake = run_snakemake


def test_parsing_the_workflow_never_imports_torch():
    code = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(REPO / 'src')!r})\n"
        "import yaml\n"
        "from groupsparse.study.runs import expand\n"
        f"runs = expand(yaml.safe_load(open({str(REPO / 'config.yaml')!r})))\n"
        "assert 'torch' not in sys.modules, 'torch imported at parse time'\n"
        "assert 'sklearn' not in sys.modules\n"
        "print(len(runs))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("configfile", ["config.yaml", "configs/tiny.yaml"])
def test_dry_run(configfile, tmp_path):
    res = snakemake("-n", "--configfile", str(REPO / configfile), "-d", str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pretrain" in res.stdout


def test_lint_is_clean():
    res = snakemake("--lint")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Lints for" not in res.stdout + res.stderr


def _bad(tmp_path, mutate) -> subprocess.CompletedProcess:
    cfg = yaml.safe_load(TINY.read_text())
    mutate(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return snakemake("-n", "--configfile", str(path), "-d", str(tmp_path / "wd"))


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda c: c.__setitem__("surprise", 1), "surprise"),
        (lambda c: c["pretrain"].__setitem__("steps", "many"), "steps"),
        (lambda c: c["transfer"].__setitem__("sizes", [8, -4]), "sizes"),
        (lambda c: c["tasks"]["base"]["task"].__setitem__("j_star", 9), "j_star"),
        (lambda c: c["pretrain"].__setitem__("batch", 129), "batch"),
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, mutate, needle):
    res = _bad(tmp_path, mutate)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert needle in out, out
    assert not (tmp_path / "wd" / "results").exists()


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path):
    res = snakemake("--cores", "2", "--configfile", str(TINY), "-d", str(tmp_path))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    tables = tmp_path / "results/tiny" / "tables"
    traj = pd.read_parquet(tables / "pretrain_trajectories.parquet")
    from groupsparse.io.tables import FINAL_METRICS, REQUIRED_COLUMNS

    expected = {*REQUIRED_COLUMNS["trajectory"], *FINAL_METRICS, "last_finite_loss", "wall_seconds"}
    assert expected <= set(traj.columns)
    assert traj["step"].dtype == "int64" and traj["eval_loss"].dtype == "float64"
    att = pd.read_parquet(tables / "pretrain_attention.parquet")
    assert {"run", "seed", "step", "key", "query", "mass"} <= set(att.columns)
    # every column of the mean attention matrix is a distribution over keys
    sums = att.groupby(["run", "seed", "step", "query"])["mass"].sum()
    assert ((sums - 1).abs() < 1e-5).all()
    tr = pd.read_parquet(tables / "transfer.parquet")
    assert {
        "run",
        "task_name",
        "downstream",
        "seed",
        "method",
        "n",
        "test_accuracy",
        "test_loss",
        "train_accuracy",
        "fit_seconds",
        "status",
        "selection",
    } <= set(tr.columns)
    assert {"p_C", "p_eta_rel", "p_lr"} <= set(tr.columns)  # the chosen settings, as typed parameter columns
    assert tr["p_C"].dtype == "float64" and tr.loc[tr["method"] == "logreg", "p_C"].notna().all()
    summary = pd.read_parquet(tables / "summary.parquet")
    assert {"method", "n", "mean_test_accuracy", "ci_low", "ci_high", "n_seeds_ok"} <= set(summary.columns)
    assert (summary["ci_low"] <= summary["mean_test_accuracy"] + 1e-12).all()
    assert (summary["mean_test_accuracy"] <= summary["ci_high"] + 1e-12).all()
    sc = pd.read_parquet(tables / "sample_complexity.parquet")
    assert set(sc["target_accuracy"]) == {0.9, 0.95}
    for name in ("pretrain_curves", "attention_heatmaps", "parameters", "transfer_accuracy"):
        for ext in ("png", "pdf"):
            f = tmp_path / "results/tiny" / "figures" / "base" / f"{name}.{ext}"
            assert f.is_file() and f.stat().st_size > 1000, f
    prov = json.loads((tmp_path / "results/tiny" / "provenance.json").read_text())
    assert {"config_hash", "git_commit", "versions", "host", "device"} <= set(prov)
    for bench in (tmp_path / "results/tiny" / "benchmarks").rglob("*.tsv"):
        assert pd.read_csv(bench, sep="\t").shape[0] == 1
    # the report builds from the finished run
    rep = snakemake("--configfile", str(TINY), "-d", str(tmp_path), "--report", str(tmp_path / "report.html"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert (tmp_path / "report.html").stat().st_size > 10000
    # the terminal summary prints an aligned table
    out = subprocess.run(
        ["groupsparse", "summary", str(tables / "summary.parquet"), "--where", "n=128"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "mean_test_accuracy" in out.stdout
    # the snapshot writes docs/results.md (whole, generated) and its figures, twice to the same text
    results_md = tmp_path / "docs" / "results.md"
    snap = [
        "groupsparse",
        "snapshot",
        "--results",
        str(tmp_path / "results/tiny"),
        "--docs",
        str(tmp_path / "docs" / "results"),
        "--out",
        str(results_md),
        "--wall-seconds",
        "60",
        "--allow-dirty",  # a test's tree may be dirty; the refusal itself is tested in tests/unit/test_cli_errors.py
    ]
    stale = tmp_path / "docs" / "results" / "scaling_no_longer_made.png"  # an earlier snapshot's figure
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"png")
    assert subprocess.run(snap, capture_output=True, text=True, timeout=120).returncode == 0
    assert not stale.exists()
    first = results_md.read_text()
    assert "| pretrained_finetune |" in first and "](results/base_transfer_accuracy.png)" in first
    assert (tmp_path / "docs" / "results" / "base_transfer_accuracy.png").is_file()
    committed = tmp_path / "docs" / "results" / "tables"  # the run's CSV tables, as the findings read them
    assert (committed / "summary.csv").read_text() == (tables / "summary.csv").read_text()
    assert json.loads((committed / "provenance.json").read_text())["study_name"] == "tiny"
    subprocess.run(snap, capture_output=True, text=True, timeout=120, check=True)
    assert results_md.read_text() == first
