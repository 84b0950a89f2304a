"""Fault injection: the study never loses results and never writes a silently wrong table.

Each test injects one fault and checks what must hold afterwards:

- kill and resume: SIGKILL to the training or transfer process, SIGINT to snakemake, Ctrl-C
  (SIGINT to the whole process group), SIGKILL to everything (a lost node); `--rerun-incomplete`
  then ends with tables equal, value for value (timing columns aside), to an
  uninterrupted run, and the killed pretraining job continued from its saved state;
- determinism: `--cores 1` and `--cores 2` give the same tables; adding a task changes no
  other task's numbers; provenance is in every Parquet file and in results/provenance.json;
- divergence: a diverging learning rate gives "diverged" rows, the summaries count them
  apart and never average NaN, transfer skips the diverged seeds, the figures mark them;
- corrupt inputs: truncated checkpoints and tables, a checkpoint of another config, a stale
  or truncated resume state, a CIFAR batch naming a forbidden class, a writer killed
  mid-write: refused (or safely discarded), nothing overwritten;
- concurrency: a second snakemake on the same folder is refused and changes nothing.

The workflow runs use a small study (d = D = 4) with enough steps (3000) that a training
job is still running when the test kills it: the test waits for the job's resume file to
appear, then kills, so the timing does not depend on the machine's speed.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from groupsparse.io import files as io

from conftest import snakemake_cmd as study_cmd
from conftest import snapshot, tiny_config

TINY = tiny_config()
PAPER_METHODS = ["pretrained_finetune", "pretrained_frozen_W", "scratch_transformer"]
TABLE_TARGET = "results/tiny/provenance.json"  # the aggregate rule: every table, no figures
CHUNK = "0-1"
RESUME_FILE = f"results/tiny/pretrain/base/.seeds{CHUNK}.resume.safetensors"
PRETRAIN_OUTPUTS = [
    f"results/tiny/pretrain/base/seeds{CHUNK}{ext}"
    for ext in (".safetensors", ".trajectory.parquet", ".attention.parquet")
]
WAIT_S = 240


def kill_config() -> dict:
    """Long enough to be killed mid-training (3000 steps, state saved every 200), small enough for CI."""
    cfg = copy.deepcopy(TINY)
    cfg["pretrain"] |= {
        "seeds": 2,
        "seeds_per_job": 2,
        "steps": 3000,
        "batch": 256,
        "eval_size": 256,
        "record_every": 100,
        "attention_checkpoints": 3,
    }
    cfg["transfer"] = {
        "enabled": True,
        "sizes": [8, 32],
        "methods": PAPER_METHODS + ["logreg"],
        "method_groups": {"paper_model": PAPER_METHODS, "linear": ["logreg"]},
        "test_size": 200,
    }
    # one thread per job (thread-count invariance is tested in-process below, at a fraction of the cost)
    cfg["jobs"] = {"pretrain_threads": 1, "transfer_threads": 1, "pretrain_resume_every": 200}
    return cfg


# -- running snakemake ---------------------------------------------------------------------


def write_config(folder: Path, cfg: dict, name: str = "study.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def snakemake_cmd(workdir: Path, config: Path, *extra: str, cores: int = 2) -> list[str]:
    return study_cmd(workdir, config, extra=extra, cores=cores)


def snakemake(workdir: Path, config: Path, *extra: str, cores: int = 2, timeout: int = 600):
    return subprocess.run(
        snakemake_cmd(workdir, config, *extra, cores=cores), capture_output=True, text=True, timeout=timeout
    )


def start(workdir: Path, config: Path, *extra: str, cores: int = 2) -> subprocess.Popen:
    """snakemake in its own process group (like a terminal job), output kept in workdir/../<name>.out."""
    out = open(workdir.parent / f"{workdir.name}.{time.monotonic_ns()}.out", "w")
    proc = subprocess.Popen(
        snakemake_cmd(workdir, config, *extra, cores=cores),
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # a shell's background job inherits SIGINT ignored, and Python then never raises KeyboardInterrupt:
        # give snakemake and its jobs the default disposition a terminal would (a local CI run under
        # `cmd &` saw every Ctrl-C ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    proc.log = out
    return proc


def output_of(proc: subprocess.Popen) -> str:
    proc.log.flush()
    return Path(proc.log.name).read_text()


def finish(proc: subprocess.Popen, timeout: int = WAIT_S) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.log.close()


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: int = WAIT_S):
    """Poll ``condition`` (every 20 ms) until it returns something truthy; fail if snakemake exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"snakemake exited ({proc.returncode}) before {what}:\n{output_of(proc)[-3000:]}")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"timed out waiting for {what}")


def job_process(proc: subprocess.Popen, command: str) -> psutil.Process | None:
    """The running `groupsparse <command>` job started by snakemake ``proc``."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for child in children:
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        if command in argv and any(Path(a).name == "groupsparse" for a in argv[:2]):
            return child
    return None


def mid_transfer(proc: subprocess.Popen, workdir: Path):
    """A transfer job that has parsed its settings and is working (its log says so)."""
    job = job_process(proc, "transfer")
    if job is None:
        return None
    logs = list((workdir / "results/tiny/logs/transfer").rglob("*.log"))
    return job if any("transfer base:" in p.read_text() for p in logs) else None


def declared_output(job: psutil.Process, workdir: Path) -> Path:
    """The table a `groupsparse transfer` job writes (its --out)."""
    argv = job.cmdline()
    return workdir / argv[argv.index("--out") + 1]


def complete_or_absent(table: Path, reference: Path) -> bool:
    """A killed job's table is either absent or whole (the job may finish as the signal lands)."""
    return not table.exists() or len(io.read_parquet(table)) == len(io.read_parquet(reference))


def resumed_step(workdir: Path) -> int:
    log = (workdir / f"results/tiny/logs/pretrain/base/seeds{CHUNK}.log").read_text()
    match = re.search(r"resumed from saved state at step (\d+)", log)
    assert match, f"the rerun restarted pretraining instead of continuing it:\n{log[-2000:]}"
    return int(match.group(1))


# -- comparing results -----------------------------------------------------------------------


def is_timing(column: str) -> bool:
    return any(column == t or column.endswith("_" + t) for t in io.TIMING_COLUMNS)  # mean_fit_seconds too


def tables(workdir: Path) -> dict[str, pd.DataFrame]:
    """Every Parquet file a run wrote (per-job and aggregated), timing columns dropped."""
    out = {}
    for path in sorted((workdir / "results").rglob("*.parquet")):
        df = io.read_parquet(path)
        out[str(path.relative_to(workdir))] = df.drop(columns=[c for c in df if is_timing(c)])
    return out


def checkpoints(workdir: Path) -> dict[str, dict]:
    """Final checkpoints: tensors and metadata, the provenance (timings, argv) left out."""
    import torch

    out = {}
    for path in sorted((workdir / "results/tiny/pretrain").rglob("seeds*.safetensors")):
        tensors, meta = io.load_checkpoint(path)
        meta.pop("provenance", None)
        out[str(path.relative_to(workdir))] = (
            {k: t.to(torch.float64).numpy().tobytes() for k, t in tensors.items()},
            meta,
        )
    return out


def assert_same_results(a: Path, b: Path, rows=lambda df: df):
    ta, tb = tables(a), tables(b)
    assert set(ta) <= set(tb), sorted(set(ta) ^ set(tb))
    for name, df in ta.items():
        left, right = rows(df).reset_index(drop=True), rows(tb[name]).reset_index(drop=True)
        assert len(left), f"{name}: no rows to compare"
        pd.testing.assert_frame_equal(left, right, check_exact=True, obj=name)
    ca, cb = checkpoints(a), checkpoints(b)
    for name in ca:
        assert ca[name] == cb[name], f"{name}: checkpoints differ"


def leftover_partials(workdir: Path) -> list[Path]:
    """Temporary files of atomic writes whose process was killed (never at a declared path)."""
    return [p for p in (workdir / "results").rglob(".*.tmp")]


# -- the uninterrupted reference, with a second snakemake refused while it runs -------------


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The kill study run once without faults (--cores 2). While its training job is paused
    (SIGSTOP), a second snakemake on the same folder must be refused and change nothing."""
    root = tmp_path_factory.mktemp("reference")
    work, cfg = root / "work", write_config(root, kill_config())
    proc = start(work, cfg, TABLE_TARGET)
    job = wait_for(
        lambda: (work / RESUME_FILE).exists() and job_process(proc, "pretrain"),
        proc,
        "the training job saved its first resume state",
    )
    job.suspend()
    try:
        before = snapshot(work / "results")
        second = snakemake(work, cfg, TABLE_TARGET, cores=1)
        after = snapshot(work / "results")
    finally:
        job.resume()
    rc = finish(proc)
    assert rc == 0, output_of(proc)[-3000:]
    return {"work": work, "config": cfg, "second": second, "before": before, "after": after}


@pytest.mark.slow
def test_second_snakemake_on_the_same_folder_is_refused_and_changes_nothing(reference):
    second = reference["second"]
    out = second.stdout + second.stderr
    assert second.returncode != 0, out[-2000:]
    assert "cannot be locked" in out, out[-2000:]
    assert reference["after"] == reference["before"]
    assert not leftover_partials(reference["work"])
    for path in (reference["work"] / "results").rglob("*.parquet"):  # every table complete and readable
        io.read_parquet(path)


@pytest.mark.slow
def test_provenance_is_in_every_table_and_in_provenance_json(reference):
    work = reference["work"]
    keys = {"config_hash", "git_commit", "versions", "host", "device"}
    parquets = sorted((work / "results").rglob("*.parquet"))
    assert len(parquets) >= 9  # 2 per-job pretraining, 2 transfer, 5 aggregated
    for path in parquets:
        prov = io.read_provenance(path)
        assert keys <= set(prov), (path, sorted(prov))
        assert prov["versions"]["torch"] and prov["device"] == "cpu" and prov["git_commit"]
    study = json.loads((work / "results/tiny/provenance.json").read_text())
    assert keys <= set(study)
    assert study["config_hash"] == io.read_provenance(work / "results/tiny/tables/summary.parquet")["config_hash"]


# -- kill and resume -------------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_training_then_sigint_snakemake_during_transfer_resume_to_the_same_tables(reference, tmp_path):
    work, cfg = tmp_path / "work", write_config(tmp_path, kill_config())
    # 1. SIGKILL the training process once it has saved a resume state
    proc = start(work, cfg, TABLE_TARGET)
    job = wait_for(lambda: (work / RESUME_FILE).exists() and job_process(proc, "pretrain"), proc, "a resume state")
    job.kill()
    assert finish(proc) != 0
    assert (work / RESUME_FILE).exists(), "the saved state must survive the kill"
    assert not any((work / p).exists() for p in PRETRAIN_OUTPUTS), "a killed job left a declared output"
    # 2. rerun; SIGINT to snakemake alone in the middle of transfer (snakemake stops its jobs)
    proc = start(work, cfg, TABLE_TARGET, "--rerun-incomplete")
    job = wait_for(lambda: mid_transfer(proc, work), proc, "a transfer job at work")
    table = declared_output(job, work)
    os.kill(proc.pid, signal.SIGINT)
    assert finish(proc) != 0
    same_table = reference["work"] / table.relative_to(work)
    assert complete_or_absent(table, same_table), "an interrupted job left a partial table"
    assert resumed_step(work) >= 200
    assert not (work / RESUME_FILE).exists(), "a finished job deletes its resume state"
    # 3. rerun to the end
    res = snakemake(work, cfg, TABLE_TARGET, "--rerun-incomplete")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert_same_results(reference["work"], work)


@pytest.mark.slow
def test_ctrl_c_during_training_then_sigkill_transfer_resume_to_the_same_tables(reference, tmp_path):
    work, cfg = tmp_path / "work", write_config(tmp_path, kill_config())
    proc = start(work, cfg, TABLE_TARGET)
    wait_for(lambda: (work / RESUME_FILE).exists() and job_process(proc, "pretrain"), proc, "a resume state")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: snakemake and its jobs all get SIGINT
    assert finish(proc) != 0
    ends = [line for line in Path(proc.log.name).read_text().splitlines() if line.startswith("interrupted: ")]
    assert len(ends) == 1 and "again to resume" in ends[0], "Ctrl-C must end with one line saying how to resume"
    assert (work / RESUME_FILE).exists()
    assert not any((work / p).exists() for p in PRETRAIN_OUTPUTS)
    proc = start(work, cfg, TABLE_TARGET, "--rerun-incomplete")
    job = wait_for(lambda: mid_transfer(proc, work), proc, "a transfer job at work")
    table = declared_output(job, work)
    job.kill()
    assert finish(proc) != 0
    same_table = reference["work"] / table.relative_to(work)
    assert complete_or_absent(table, same_table), "a killed job left a partial table"
    assert resumed_step(work) >= 200
    res = snakemake(work, cfg, TABLE_TARGET, "--rerun-incomplete")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert_same_results(reference["work"], work)


@pytest.mark.slow
def test_lost_node_sigkill_everything_unlock_and_resume(reference, tmp_path):
    """SIGKILL to snakemake and its jobs: its lock stays, so a rerun is refused until --unlock."""
    work, cfg = tmp_path / "work", write_config(tmp_path, kill_config())
    proc = start(work, cfg, TABLE_TARGET)
    wait_for(lambda: (work / RESUME_FILE).exists() and job_process(proc, "pretrain"), proc, "a resume state")
    os.killpg(proc.pid, signal.SIGKILL)
    finish(proc)
    assert (work / RESUME_FILE).exists() and not any((work / p).exists() for p in PRETRAIN_OUTPUTS)
    refused = snakemake(work, cfg, TABLE_TARGET, "--rerun-incomplete")
    assert refused.returncode != 0 and "cannot be locked" in refused.stdout + refused.stderr
    unlock = snakemake(work, cfg, "--unlock")
    assert unlock.returncode == 0, unlock.stderr[-2000:]
    res = snakemake(work, cfg, TABLE_TARGET, "--rerun-incomplete")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert resumed_step(work) >= 200
    assert_same_results(reference["work"], work)


# -- determinism -----------------------------------------------------------------------------


@pytest.mark.slow
def test_one_core_gives_the_same_tables_as_two(reference, tmp_path):
    work, cfg = tmp_path / "work", write_config(tmp_path, kill_config())
    res = snakemake(work, cfg, TABLE_TARGET, cores=1)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert_same_results(reference["work"], work)
    # and provenance tells the two studies apart from nothing: same config, same hash
    assert (
        io.read_provenance(work / "results/tiny/tables/summary.parquet")["config_hash"]
        == io.read_provenance(reference["work"] / "results/tiny/tables/summary.parquet")["config_hash"]
    )


@pytest.mark.slow
def test_adding_a_task_changes_no_other_result(reference, tmp_path):
    cfg = kill_config()
    cfg["tasks"]["other"] = {"task": {"d": 3, "D": 5}, "pretrain": {"steps": 200}}
    work, path = tmp_path / "work", write_config(tmp_path, cfg)
    res = snakemake(work, path, TABLE_TARGET)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert set(io.read_parquet(work / "results/tiny/tables/summary.parquet")["task_name"]) == {"base", "other"}
    only_base = lambda df: df[df["task_name"] == "base"] if "task_name" in df else df  # noqa: E731
    assert_same_results(reference["work"], work, rows=only_base)
    study = lambda w: io.read_provenance(w / "results/tiny/tables/summary.parquet")["config_hash"]  # noqa: E731
    assert study(work) != study(reference["work"])  # the study changed, base's numbers did not


# -- divergence ------------------------------------------------------------------------------


@pytest.mark.slow
def test_diverging_study_finishes_with_diverged_rows_counted_apart(tmp_path):
    cfg = copy.deepcopy(TINY)
    cfg["pretrain"] |= {"eta": 1e20, "on_diverge": "record"}  # overflows float32 within a few steps
    cfg["transfer"] = {
        "enabled": True,
        "sizes": [8, 32],
        "methods": PAPER_METHODS + ["logreg"],
        "method_groups": {"all": PAPER_METHODS + ["logreg"]},
        "test_size": 200,
    }
    work, path = tmp_path / "work", write_config(tmp_path, cfg)
    res = snakemake(work, path)  # the default target: tables and figures
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    t = work / "results/tiny/tables"
    traj = io.read_parquet(t / "pretrain_trajectories.parquet")
    last = traj.sort_values("step").groupby("seed").tail(1)
    assert (last["status"] == "diverged").all()
    assert (last["diverged_step"] >= 1).all() and (last["diverged_step"] < 60).all()
    assert last["last_finite_loss"].map(lambda x: pd.notna(x) and x < float("inf")).all()
    assert traj.groupby("seed")["step"].max().lt(last["diverged_step"].max() + 1).all()  # no rows after it
    ps = io.read_parquet(t / "pretrain_summary.parquet").iloc[0]
    assert (ps["n_seeds_ok"], ps["n_seeds_diverged"]) == (0, 2)
    assert pd.isna(ps["eval_loss_mean"])  # nothing to average, so no number, never a NaN-polluted one
    tr = io.read_parquet(t / "transfer.parquet")
    pre = tr[tr["method"].isin(PAPER_METHODS[:2])]
    assert len(pre) and (pre["status"] == "skipped_pretrain_diverged").all()
    assert pre["test_accuracy"].isna().all()
    rest = tr[~tr["method"].isin(PAPER_METHODS[:2])]
    assert len(rest) and (rest["status"] == "ok").all()  # methods that do not use pretraining still run
    summary = io.read_parquet(t / "summary.parquet")
    skipped = summary[summary["method"].isin(PAPER_METHODS[:2])]
    assert (skipped["n_seeds_ok"] == 0).all() and (skipped["n_seeds_not_ok"] == 2).all()
    assert skipped["mean_test_accuracy"].isna().all()
    assert (skipped["statuses_not_ok"] == "skipped_pretrain_diverged").all()
    ran = summary[~summary["method"].isin(PAPER_METHODS[:2])]
    assert ran["mean_test_accuracy"].between(0, 1).all() and (ran["n_seeds_ok"] == 2).all()
    for name in ("pretrain_curves", "attention_heatmaps", "parameters", "transfer_accuracy"):
        for ext in ("png", "pdf"):
            f = work / "results/tiny/figures/base" / f"{name}.{ext}"
            assert f.is_file() and f.stat().st_size > 1000, f


@pytest.mark.slow
def test_a_corrupt_job_table_stops_the_workflow_before_any_aggregated_table_is_removed(reference, tmp_path):
    """Snakemake removes a job's outputs before running it: the per-table check job comes first,
    so a foreign table (valid Parquet, wrong schema) leaves every earlier aggregated table in place."""
    work = tmp_path / "work"
    shutil.copytree(reference["work"], work, symlinks=True)
    before = snapshot(work / "results/tiny" / "tables")
    assert any(name.endswith(".parquet") for name in before)
    foreign = work / "results/tiny/transfer/base" / f"seeds{CHUNK}" / "linear.parquet"
    io.write_parquet(pd.DataFrame({"something": [1.0, 2.0]}), foreign, {"note": "not ours"})
    res = snakemake(work, reference["config"], TABLE_TARGET, cores=1)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "not a transfer table" in out and "linear.parquet" in out, out[-3000:]
    assert snapshot(work / "results/tiny" / "tables") == before, "earlier aggregated tables were removed or rewritten"
    assert (work / "results/tiny/provenance.json").exists()
