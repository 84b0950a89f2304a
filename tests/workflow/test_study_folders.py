"""Studies never overwrite or mix: each writes under results/<study_name>/ only; results are
readable by colleagues (the umask's mode, not mkstemp's private 0600)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from groupsparse.io import files as io
from groupsparse.study import preflight

REPO = Path(__file__).resolve().parents[2]


def planned_outputs(workdir: Path, *configfiles: str) -> set[str]:
    """Every file a dry run plans to write (its 'output:' lines), relative to the workdir."""
    args = ["snakemake", "-s", str(REPO / "Snakefile"), "-n", "--cores", "1", "-d", str(workdir)]
    if configfiles:
        args += ["--configfile", *configfiles]
    res = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    outputs = set()
    for line in res.stdout.splitlines():
        if line.strip().startswith("output:"):
            outputs |= {p.strip() for p in line.split(":", 1)[1].split(",")}
    assert outputs
    return outputs


def test_each_shipped_study_plans_only_inside_its_own_folder(tmp_path):
    studies = {
        "default": [],
        "tiny": [str(REPO / "configs/tiny.yaml")],
        "paper": [str(REPO / "configs/paper.yaml")],
        "scaling": [str(REPO / "configs/scaling.yaml")],
    }
    planned = {name: planned_outputs(tmp_path / name, *files) for name, files in studies.items()}
    for name, outputs in planned.items():
        outside = sorted(p for p in outputs if not p.startswith(f"results/{name}/"))
        assert not outside, f"{name} writes outside results/{name}/: {outside[:5]}"
    names = list(planned)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not planned[a] & planned[b], f"{a} and {b} would write the same files"


def test_the_results_folder_is_named_by_study_name_or_by_the_config_file(tmp_path):
    assert preflight.study_name({"study_name": "mine"}, ["configs/paper.yaml"]) == "mine"
    assert preflight.study_name({}, ["configs/paper.yaml", "extra.yaml"]) == "paper"
    with pytest.raises(preflight.StudyRefused, match="study_name"):
        preflight.study_name({}, ["configs/my-study.yaml"])  # '-' cannot name a folder here: say so
    cfg = yaml.safe_load((REPO / "configs/tiny.yaml").read_text())
    del cfg["study_name"]
    (tmp_path / "smoke.yaml").write_text(yaml.safe_dump(cfg))
    outputs = planned_outputs(tmp_path / "w", str(tmp_path / "smoke.yaml"))
    assert all(p.startswith("results/smoke/") for p in outputs)


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_atomic_writes_take_the_mode_the_umask_gives(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        io.write_text_atomic(tmp_path / "a.txt", "x")
        io.write_text_atomic(tmp_path / "sub" / "b.txt", "y")
    finally:
        os.umask(old)
    for path in (tmp_path / "a.txt", tmp_path / "sub" / "b.txt"):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path


def dry_run(workdir: Path, configfile: Path) -> subprocess.CompletedProcess:
    args = ["snakemake", "-s", str(REPO / "Snakefile"), "-n", "--cores", "1", "-d", str(workdir)]
    return subprocess.run([*args, "--configfile", str(configfile)], capture_output=True, text=True, timeout=300)


def test_a_dry_run_writes_nothing_under_results(tmp_path):
    """Parsing only plans: the spec files and the owner record are written by jobs, so `snakemake -n`
    of a fresh folder leaves no file under results/ (the default study and one with every section)."""
    for configfile in (REPO / "config.yaml", REPO / "configs/theorem.yaml"):
        work = tmp_path / configfile.stem
        res = dry_run(work, configfile)
        assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
        assert re.search(r"^spec\s+\d+$", res.stdout, re.M), res.stdout[-2000:]  # the jobs that will write them
        assert not (work / "results").exists(), sorted(snapshot_names(work / "results"))[:5]


def test_a_copied_config_with_the_same_study_name_cannot_take_over_the_folder(tmp_path):
    """`cp config.yaml my.yaml`, edit, run: refused in one line naming study_name; the owning
    file itself may change any setting (results/<study>/study_config.json records the owner)."""
    cfg = yaml.safe_load((REPO / "configs/tiny.yaml").read_text())
    own, copy = tmp_path / "own.yaml", tmp_path / "copy.yaml"
    own.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "w"
    owner = work / "results/tiny" / preflight.OWNER_FILE
    res = subprocess.run(
        ["snakemake", "-s", str(REPO / "Snakefile"), "--cores", "1", "-d", str(work), str(owner.relative_to(work))]
        + ["--configfile", str(own)],  # last: it takes every argument after it
        capture_output=True,
        text=True,
        timeout=300,
    )  # the study's first job records the owner (a dry run records nothing)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    assert str(own) in owner.read_text()
    before = snapshot_names(work / "results")

    copy.write_text(yaml.safe_dump(cfg | {"pretrain": cfg["pretrain"] | {"seeds": 3}}))
    res = dry_run(work, copy)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    refused = [line for line in out.splitlines() if "study_name" in line]
    assert len(refused) == 1 and "'tiny'" in refused[0] and str(own) in refused[0] and str(copy) in refused[0], out
    assert snapshot_names(work / "results") == before  # no spec file of the copy was written

    own.write_text(yaml.safe_dump(cfg | {"pretrain": cfg["pretrain"] | {"steps": 40}}))  # same file, new setting
    res = dry_run(work, own)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    assert "pretrain" in res.stdout

    # a slice merged over the owning file (configs/slices/): the same study, its jobs reused
    piece = tmp_path / "slice.yaml"
    piece.write_text(yaml.safe_dump({"pretrain": {"steps": 30}}))
    args = ["snakemake", "-s", str(REPO / "Snakefile"), "-n", "--cores", "1", "-d", str(work)]
    res = subprocess.run([*args, "--configfile", str(own), str(piece)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    # ... but not over the copy: the first file names the study
    res = subprocess.run([*args, "--configfile", str(copy), str(piece)], capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "study_name" in res.stdout + res.stderr


def snapshot_names(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}
