"""The report works for every shipped config: every report() caption exists (checked at parse
time, so every config's dry run checks it), and `snakemake --report` builds for a small study with
the default study's figure set (per-task figures, image figures, every scaling figure, claims);
`groupsparse review` answers from that study's tables, and the report opens on its summary."""

from __future__ import annotations

import copy
import csv
import io
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, snakemake_cmd

CONFIGS = [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]
SMALL_PRETRAIN = {"seeds": 2, "seeds_per_job": 2, "steps": 60, "batch": 128, "eval_size": 256, "record_every": 10}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_parses_with_every_report_caption_present(config, tmp_path):
    res = subprocess.run(snakemake_cmd(tmp_path, config, extra=["-n"]), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]


def test_a_missing_caption_is_refused_in_one_line_naming_it(tmp_path):
    copy_root = tmp_path / "repo"
    copy_root.mkdir()
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(REPO / name, copy_root / name)
    shutil.copytree(REPO / "workflow", copy_root / "workflow")
    shutil.copytree(REPO / "profiles", copy_root / "profiles")
    (copy_root / "src").symlink_to(REPO / "src")
    (copy_root / "workflow/report/scaling_convergence_time.rst").unlink()
    cmd = ["snakemake", "-s", str(copy_root / "Snakefile"), "-n", "--cores", "1", "-d", str(tmp_path / "w")]
    res = subprocess.run([*cmd, "--configfile", str(REPO / "configs/tiny.yaml")], capture_output=True, text=True)
    assert res.returncode != 0
    lines = [line for line in (res.stdout + res.stderr).splitlines() if "scaling_convergence_time.rst" in line]
    assert len(lines) == 1 and "does not exist" in lines[0], res.stderr[-2000:]


def report_study() -> dict:
    """The default study (config.yaml) shrunk: the same tasks, scaling and ablations, so the same
    figure set, on a 2 x 3 grid with 2 seeds and short runs."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["study_name"] = "report"
    cfg["pretrain"] |= SMALL_PRETRAIN
    methods = {"paper_model": ["pretrained_finetune", "pretrained_frozen_W"], "linear": ["logreg"]}
    cfg["transfer"] |= {
        "sizes": [8, 32, 128],
        "methods": [m for ms in methods.values() for m in ms],
        "method_groups": methods,
        "control_methods": ["pretrained_finetune", "logreg"],
        "test_size": 300,
        "selection": "fixed",
    }
    digits = cfg["tasks"]["digits"]
    digits["pretrain"] = {"sampling": "iid", "steps": 60, "batch": 128}
    digits["transfer"] = {"sizes": [8, 32, 128], "test_size": 300}
    s = cfg["scaling"]
    s |= {"d_grid": [3, 4], "D_grid": [3, 4, 5], "steps_per_D3": 1.0, "transfer_D_grid": [3, 5]}
    s["pretrain"] = dict(SMALL_PRETRAIN)
    s["batch_check"] = {"d": 4, "D": 5, "batches": [64]}
    s.pop("stability", None)
    s["transfer"] |= {"sizes": [8, 32, 128], "methods": ["pretrained_finetune", "logreg"], "test_size": 300}
    s["transfer"]["method_groups"] = {"scaling": ["pretrained_finetune", "logreg"]}
    s["transfer"]["selection"] = "fixed"
    s["analysis"] |= {
        "methods": ["pretrained_finetune", "logreg"],
        "n_boot": 200,
        "accuracy_targets": [0.8],
        "verdict_target": 0.8,
    }
    a = cfg["ablations"]
    a["pretrain"] = dict(SMALL_PRETRAIN)
    a["variants"] = {k: a["variants"][k] for k in ("added_positions", "iid_batches")}
    a["transfer"] |= {"sizes": [16, 64], "methods": ["pretrained_finetune", "logreg"], "test_size": 300}
    a["transfer"]["method_groups"] = {"ablation": ["pretrained_finetune", "logreg"]}
    a["transfer"]["selection"] = "fixed"
    a["analysis"]["sizes"] = [16, 64]
    return copy.deepcopy(cfg)


def planned_figures(workdir: Path, config: Path) -> set[str]:
    res = subprocess.run(snakemake_cmd(workdir, config, extra=["-n"]), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    out = set()
    for line in res.stdout.splitlines():
        if line.strip().startswith("output:"):
            out |= {p.strip().split("/figures/", 1)[1] for p in line.split(":", 1)[1].split(",") if "/figures/" in p}
    return out


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 32 jobs: about 4 minutes on 2 cores, much longer on a shared, loaded machine
def test_the_report_builds_for_a_study_with_the_default_figure_set(tmp_path):
    path = tmp_path / "report.yaml"
    path.write_text(yaml.safe_dump(report_study()))
    work = tmp_path / "w"
    assert planned_figures(tmp_path / "dry", path) == planned_figures(tmp_path / "dry2", REPO / "config.yaml")
    res = subprocess.run(snakemake_cmd(work, path), capture_output=True, text=True, timeout=1200)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "estimate: about" in out and "done: results in results/report/" in out
    report = work / "report.html"
    rep = subprocess.run(
        snakemake_cmd(work, path, extra=["--report", str(report)]), capture_output=True, text=True, timeout=600
    )
    assert rep.returncode == 0, (rep.stdout + rep.stderr)[-3000:]
    assert report.stat().st_size > 100_000
    # the report opens on the review's one-screen summary (rule review)
    summary = subprocess.run(
        ["groupsparse", "review", str(work / "results/report")], capture_output=True, text=True, timeout=120
    )
    assert summary.returncode == 0 and len(summary.stdout.splitlines()) <= 50, summary.stdout
    front = (work / "results/report/report_front.rst").read_text()
    assert summary.stdout.splitlines()[1] in front and "This run" in report.read_text()

    # the review answers from this study's tables: n at 90%, every claim with its verdict, the problems
    review = subprocess.run(
        ["groupsparse", "review", str(work / "results/report"), "--csv"], capture_output=True, text=True, timeout=120
    )
    assert review.returncode == 0, review.stderr
    rows = list(csv.DictReader(io.StringIO(review.stdout)))
    import pandas as pd

    tables = work / "results/report/tables"
    claims = pd.read_parquet(tables / "claims.parquet")
    reviewed = [r for r in rows if r["question"] == "claim"]
    assert len(reviewed) == len(claims) and {r["answer"] for r in reviewed} == set(claims["verdict"])
    # a claim with a power says it; descriptive rows (no alternative to have power against) say n/a
    powers = claims["power"].tolist() if "power" in claims.columns else [float("nan")] * len(claims)
    for r, power in zip(reviewed, powers):
        assert ("power n/a" in r["detail"]) == (not pd.notna(power)), (r, power)
    sc = pd.read_parquet(tables / "sample_complexity.parquet")
    at_90 = sc[sc["target_accuracy"] == 0.9]  # the full tables: every run
    n_rows = [r for r in rows if r["question"] == "n for 90%"]
    assert len(n_rows) == len(at_90)
    for r in n_rows:
        want = at_90[
            (at_90["run"] == r["run"]) & (at_90["method"] == r["what"]) & (at_90["downstream"] == r["downstream"])
        ]
        assert len(want) == 1
        if want["reached_on_grid"].iloc[0]:
            assert float(r["answer"]) == pytest.approx(want["n_needed"].iloc[0], abs=0.5)
        else:
            assert r["answer"].startswith("not reached")
    transfer = pd.read_parquet(tables / "transfer.parquet")
    edges = transfer.groupby(["run", "method"])["hp_at_edge"].apply(lambda s: int(s.fillna(False).astype(bool).sum()))
    flagged = {(r["run"], r["what"]): r["detail"] for r in rows if r["question"] == "hp at grid edge"}
    assert set(flagged) == {k for k, v in edges.items() if v > 0}
    for key, detail in flagged.items():
        assert detail.startswith(f"{edges[key]} of ")
