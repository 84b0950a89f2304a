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
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from groupsparse import io

REPO = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
PAPER_METHODS = ["pretrained_finetune", "pretrained_frozen_W", "scratch_transformer"]
TABLE_TARGET = "results/provenance.json"  # the aggregate rule: every table, no figures
CHUNK = "0-1"
RESUME_FILE = f"results/pretrain/base/.seeds{CHUNK}.resume.safetensors"
PRETRAIN_OUTPUTS = [f"results/pretrain/base/seeds{CHUNK}{ext}"
                    for ext in (".safetensors", ".trajectory.parquet", ".attention.parquet")]
WAIT_S = 240


def kill_config() -> dict:
    """Long enough to be killed mid-training (3000 steps, state saved every 200), small enough for CI."""
    cfg = copy.deepcopy(TINY)
    cfg["pretrain"] |= {"seeds": 2, "seeds_per_job": 2, "steps": 3000, "batch": 256, "eval_size": 256,
                        "record_every": 100, "attention_checkpoints": 3}
    cfg["transfer"] = {"enabled": True, "sizes": [8, 32], "methods": PAPER_METHODS + ["logreg"],
                       "method_groups": {"paper_model": PAPER_METHODS, "linear": ["logreg"]}, "test_size": 200}
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
    return ["snakemake", "-s", str(REPO / "Snakefile"), "--cores", str(cores), "-d", str(workdir), *extra,
            "--configfile", str(config)]  # last: --configfile takes every argument after it


def snakemake(workdir: Path, config: Path, *extra: str, cores: int = 2, timeout: int = 600):
    return subprocess.run(snakemake_cmd(workdir, config, *extra, cores=cores), capture_output=True, text=True,
                          timeout=timeout)


def start(workdir: Path, config: Path, *extra: str, cores: int = 2) -> subprocess.Popen:
    """snakemake in its own process group (like a terminal job), output kept in workdir/../<name>.out."""
    out = open(workdir.parent / f"{workdir.name}.{time.monotonic_ns()}.out", "w")
    proc = subprocess.Popen(snakemake_cmd(workdir, config, *extra, cores=cores), stdout=out,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
    logs = list((workdir / "results/logs/transfer").rglob("*.log"))
    return job if any("transfer base:" in p.read_text() for p in logs) else None


def declared_output(job: psutil.Process, workdir: Path) -> Path:
    """The table a `groupsparse transfer` job writes (its --out)."""
    argv = job.cmdline()
    return workdir / argv[argv.index("--out") + 1]


def complete_or_absent(table: Path, reference: Path) -> bool:
    """A killed job's table is either absent or whole (the job may finish as the signal lands)."""
    return not table.exists() or len(io.read_parquet(table)) == len(io.read_parquet(reference))


def resumed_step(workdir: Path) -> int:
    log = (workdir / f"results/logs/pretrain/base/seeds{CHUNK}.log").read_text()
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
    for path in sorted((workdir / "results/pretrain").rglob("seeds*.safetensors")):
        tensors, meta = io.load_checkpoint(path)
        meta.pop("provenance", None)
        out[str(path.relative_to(workdir))] = ({k: t.to(torch.float64).numpy().tobytes() for k, t in tensors.items()},
                                               meta)
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


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


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
    job = wait_for(lambda: (work / RESUME_FILE).exists() and job_process(proc, "pretrain"), proc,
                   "the training job saved its first resume state")
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
    study = json.loads((work / "results/provenance.json").read_text())
    assert keys <= set(study)
    assert study["config_hash"] == io.read_provenance(work / "results/tables/summary.parquet")["config_hash"]


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
    assert (io.read_provenance(work / "results/tables/summary.parquet")["config_hash"]
            == io.read_provenance(reference["work"] / "results/tables/summary.parquet")["config_hash"])


@pytest.mark.slow
def test_adding_a_task_changes_no_other_result(reference, tmp_path):
    cfg = kill_config()
    cfg["tasks"]["other"] = {"task": {"d": 3, "D": 5}, "pretrain": {"steps": 200}}
    work, path = tmp_path / "work", write_config(tmp_path, cfg)
    res = snakemake(work, path, TABLE_TARGET)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert set(io.read_parquet(work / "results/tables/summary.parquet")["task_name"]) == {"base", "other"}
    only_base = lambda df: df[df["task_name"] == "base"] if "task_name" in df else df  # noqa: E731
    assert_same_results(reference["work"], work, rows=only_base)
    study = lambda w: io.read_provenance(w / "results/tables/summary.parquet")["config_hash"]  # noqa: E731
    assert study(work) != study(reference["work"])  # the study changed, base's numbers did not


def test_thread_count_changes_no_number():
    """What --cores changes inside a job: torch's thread count (snakemake caps threads at --cores)."""
    import torch

    from groupsparse.pretrain import Trainer

    spec, runs = _small_spec(), []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            res = Trainer(spec, [0, 1]).run()
            runs.append((res.trajectory, res.attention, {k: t.clone() for k, t in res.params.items()}))
    finally:
        torch.set_num_threads(before)
    (t1, a1, p1), (t2, a2, p2) = runs
    pd.testing.assert_frame_equal(t1, t2, check_exact=True)
    pd.testing.assert_frame_equal(a1, a2, check_exact=True)
    assert all(torch.equal(p1[k], p2[k]) for k in p1)


# -- divergence ------------------------------------------------------------------------------

@pytest.mark.slow
def test_diverging_study_finishes_with_diverged_rows_counted_apart(tmp_path):
    cfg = copy.deepcopy(TINY)
    cfg["pretrain"] |= {"eta": 1e20, "on_diverge": "record"}  # overflows float32 within a few steps
    cfg["transfer"] = {"enabled": True, "sizes": [8, 32], "methods": PAPER_METHODS + ["logreg"],
                       "method_groups": {"all": PAPER_METHODS + ["logreg"]}, "test_size": 200}
    work, path = tmp_path / "work", write_config(tmp_path, cfg)
    res = snakemake(work, path)  # the default target: tables and figures
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    t = work / "results/tables"
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
            f = work / "results/figures/base" / f"{name}.{ext}"
            assert f.is_file() and f.stat().st_size > 1000, f


def _trajectory(statuses: dict[int, str]) -> pd.DataFrame:
    """Two recorded steps per seed; a diverged seed's metrics are NaN and inf (as overflow leaves them)."""
    from groupsparse.aggregate import FINAL_METRICS

    rows = []
    for seed, status in statuses.items():
        for step in (0, 10):
            bad = status == "diverged" and step == 10
            rows.append({"run": "r", "task_name": "r", "d": 2, "D": 3, "seed": seed, "step": step,
                         "status": status, "wall_seconds": 1.0,
                         **{m: (float("nan") if i % 2 else float("inf")) if bad else float(seed + step + i)
                            for i, m in enumerate(FINAL_METRICS)}})
    return pd.DataFrame(rows)


def test_pretrain_summary_counts_diverged_seeds_apart_and_never_averages_them():
    from groupsparse.aggregate import FINAL_METRICS, pretrain_summary

    s = pretrain_summary(_trajectory({0: "ok", 1: "diverged", 2: "ok"})).iloc[0]
    assert (s["n_seeds_ok"], s["n_seeds_diverged"]) == (2, 1)
    for i, m in enumerate(FINAL_METRICS):
        assert s[f"{m}_mean"] == ((0 + 10 + i) + (2 + 10 + i)) / 2, m  # seeds 0 and 2 only
        assert s[f"{m}_ci_low"] <= s[f"{m}_mean"] <= s[f"{m}_ci_high"]


def test_transfer_summary_counts_skipped_and_diverged_rows_apart():
    from groupsparse.aggregate import transfer_summary

    nan = float("nan")
    rows = [{"run": "r", "task_name": "r", "downstream": "transfer", "method": "m", "n": 8, "seed": s,
             "test_accuracy": acc, "test_loss": 0.5, "train_accuracy": 1.0, "fit_seconds": 0.1, "status": st}
            for s, acc, st in ((0, 0.6, "ok"), (1, nan, "skipped_pretrain_diverged"), (2, 0.8, "ok"),
                               (3, nan, "diverged"))]
    s = transfer_summary(pd.DataFrame(rows)).iloc[0]
    assert s["mean_test_accuracy"] == pytest.approx(0.7, abs=1e-15)
    assert (s["n_seeds_ok"], s["n_seeds_not_ok"]) == (2, 2)
    assert s["statuses_not_ok"] == "diverged,skipped_pretrain_diverged"


def test_pretrain_figures_mark_diverged_seeds_red_with_an_x(tmp_path, monkeypatch):
    from groupsparse import plots

    figures = {}
    real_save = plots.save
    monkeypatch.setattr(plots, "save", lambda fig, outdir, name: figures.setdefault(name, fig) and
                        real_save(fig, outdir, name))
    traj = _trajectory({0: "ok", 1: "diverged"})
    plots.pretrain_curves(traj, "t", tmp_path)
    marks = [line for ax in figures["pretrain_curves"].axes for line in ax.get_lines()
             if line.get_marker() == "x" and line.get_color() == "tab:red"]
    assert len(marks) == 3  # one per panel: loss, accuracy, attention mass
    assert all(list(line.get_xdata()) == [10] for line in marks)  # at the diverged seed's last step
    assert (tmp_path / "pretrain_curves.png").stat().st_size > 1000


def test_on_diverge_fail_exits_non_zero_and_writes_no_checkpoint(tmp_path):
    spec = {"study_seed": 7, "task_name": "base", "task": {"d": 4, "D": 4},
            "pretrain": {"steps": 30, "batch": 64, "eval_size": 64, "eta": 1e20, "on_diverge": "fail"}}
    res = subprocess.run(["groupsparse", "pretrain", "--spec", json.dumps(spec), "--seeds", "0-1",
                          "--checkpoint", str(tmp_path / "c.safetensors"), "--trajectory", str(tmp_path / "t.parquet"),
                          "--attention", str(tmp_path / "a.parquet")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 3, res.stderr
    assert "pretrain.eta" in res.stderr and "on_diverge: record" in res.stderr
    assert not (tmp_path / "c.safetensors").exists()


# -- corrupt inputs --------------------------------------------------------------------------

def _small_spec(**pretrain):
    from groupsparse.specs import RunSpec

    return RunSpec.from_dict({"study_seed": 3, "task_name": "base", "task": {"d": 3, "D": 4},
                              "pretrain": {"steps": 40, "batch": 32, "eval_size": 32, "record_every": 10,
                                           "attention_checkpoints": 2} | pretrain})


def save_small_checkpoint(spec, folder: Path) -> Path:
    """Pretrain ``spec`` in-process and save checkpoint and tables as the pretrain command does."""
    from groupsparse.pretrain import Trainer, checkpoint_payload

    res = Trainer(spec, [0, 1]).run()
    tensors, meta = checkpoint_payload(spec, res, [0, 1])
    prov = io.provenance(spec.science_hash(), "cpu")
    io.save_checkpoint(folder / "ck.safetensors", tensors, meta | {"provenance": prov})
    io.write_parquet(res.trajectory.assign(wall_seconds=0.0), folder / "traj.parquet", prov)
    io.write_parquet(res.attention, folder / "att.parquet", prov)
    return folder / "ck.safetensors"


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """A real pretraining checkpoint and tables of a small run."""
    folder, spec = tmp_path_factory.mktemp("small"), _small_spec()
    save_small_checkpoint(spec, folder)
    return folder, spec


def truncate(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return dst


def test_stale_or_truncated_resume_state_is_discarded_and_a_good_one_is_used(tmp_path, monkeypatch):
    """A resume state from another config, or a damaged one, must never be continued from."""
    from groupsparse.pretrain import Trainer

    spec, other = _small_spec(), _small_spec(eta=0.25)
    fresh = Trainer(spec, [0, 1]).run().trajectory
    fresh_other = Trainer(other, [0, 1]).run().trajectory
    state = tmp_path / "state.safetensors"
    real_save = Trainer._save_resume

    def save_then_die(self, *args):  # a job killed right after its first saved state
        real_save(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save_resume", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        Trainer(spec, [0, 1], resume_path=state, resume_every=10).run()
    monkeypatch.setattr(Trainer, "_save_resume", real_save)
    assert state.exists()
    saved = state.read_bytes()

    res = Trainer(other, [0, 1], resume_path=state, resume_every=10).run()  # another config's state
    assert res.resumed_from_step == 0
    pd.testing.assert_frame_equal(res.trajectory, fresh_other, check_exact=True)

    state.write_bytes(saved[: len(saved) // 2])  # damaged state
    res = Trainer(spec, [0, 1], resume_path=state, resume_every=10).run()
    assert res.resumed_from_step == 0
    pd.testing.assert_frame_equal(res.trajectory, fresh, check_exact=True)

    state.write_bytes(saved)  # the intact state: continued, same numbers
    res = Trainer(spec, [0, 1], resume_path=state, resume_every=10).run()
    assert res.resumed_from_step == 10
    pd.testing.assert_frame_equal(res.trajectory, fresh, check_exact=True)
    assert not state.exists()


def test_truncated_checkpoint_is_refused_naming_the_file(small_checkpoint, tmp_path):
    folder, _ = small_checkpoint
    bad = truncate(folder / "ck.safetensors", tmp_path / "truncated.safetensors")
    with pytest.raises(io.InputError, match=re.escape(str(bad))):
        io.load_checkpoint(bad)


def _transfer(spec, checkpoint: Path, out: Path) -> subprocess.CompletedProcess:
    payload = {"run": spec.to_dict(), "transfer": {"test_size": 100}}
    return subprocess.run(["groupsparse", "transfer", "--spec", json.dumps(payload), "--checkpoint", str(checkpoint),
                           "--methods", "logreg", "--sizes", "8", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)


def test_transfer_rows_name_their_run_so_runs_sharing_a_task_never_merge(small_checkpoint, tmp_path):
    """Ablation runs share their base task's data (same task_name); without the run's name in
    every transfer row, the summary would silently average different models together."""
    from groupsparse.aggregate import transfer_summary
    from groupsparse.specs import RunSpec

    _, spec = small_checkpoint
    variant = RunSpec.from_dict(spec.to_dict() | {"run_name": "ablation_x"})
    checkpoint = save_small_checkpoint(variant, tmp_path)
    out = tmp_path / "t.parquet"
    res = _transfer(variant, checkpoint, out)
    assert res.returncode == 0, res.stderr[-2000:]
    table = io.read_parquet(out)
    assert "run" in table and set(table["run"]) == {"ablation_x"}
    both = pd.concat([table, table.assign(run="ablation_y", test_accuracy=1.0)], ignore_index=True)
    summary = transfer_summary(both)
    assert set(summary["run"]) == {"ablation_x", "ablation_y"}
    assert (summary.loc[summary["run"] == "ablation_y", "mean_test_accuracy"] == 1.0).all()


@pytest.mark.parametrize("fault", ["truncated", "other_config"])
def test_transfer_refuses_a_bad_checkpoint_and_overwrites_nothing(fault, small_checkpoint, tmp_path):
    folder, spec = small_checkpoint
    if fault == "truncated":
        checkpoint = truncate(folder / "ck.safetensors", tmp_path / "truncated.safetensors")
        expected = "not a readable groupsparse checkpoint"
    else:  # the checkpoint is fine, but it was pretrained with another learning rate
        checkpoint, spec = folder / "ck.safetensors", _small_spec(eta=0.25)
        expected = "pretrained with another configuration"
    out = tmp_path / "out.parquet"
    out.write_bytes(b"an earlier result")
    res = _transfer(spec, checkpoint, out)
    assert res.returncode == 4, res.stderr[-2000:]
    assert str(checkpoint) in res.stderr and expected in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert out.read_bytes() == b"an earlier result"


def test_aggregate_refuses_a_truncated_table_before_writing_anything(small_checkpoint, tmp_path):
    folder, _ = small_checkpoint
    out = tmp_path / "out"
    base = ["groupsparse", "aggregate", "--attention", str(folder / "att.parquet"), "--study-json",
            json.dumps({"study_seed": 3}), "--outdir", str(out / "tables"), "--provenance-json", str(out / "prov.json")]
    good = subprocess.run(base + ["--trajectories", str(folder / "traj.parquet")],
                          capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stderr[-2000:]
    before = snapshot(out)
    bad = truncate(folder / "traj.parquet", tmp_path / "truncated.parquet")
    # a truncated pretraining table, and a truncated transfer table read after good pretraining ones
    good_traj = str(folder / "traj.parquet")
    for args in (["--trajectories", str(bad)], ["--trajectories", good_traj, "--transfer", str(bad)]):
        res = subprocess.run(base + args, capture_output=True, text=True, timeout=300)
        assert res.returncode == 4, res.stderr[-2000:]
        assert str(bad) in res.stderr and "not a readable Parquet table" in res.stderr, res.stderr[-2000:]
        assert snapshot(out) == before, "a refused aggregation rewrote earlier tables"


@pytest.mark.slow
def test_a_corrupt_job_table_stops_the_workflow_before_any_aggregated_table_is_removed(reference, tmp_path):
    """Snakemake removes a job's outputs before running it: the per-table check job comes first,
    so a foreign table (valid Parquet, wrong schema) leaves every earlier aggregated table in place."""
    work = tmp_path / "work"
    shutil.copytree(reference["work"], work, symlinks=True)
    before = snapshot(work / "results" / "tables")
    assert any(name.endswith(".parquet") for name in before)
    foreign = work / "results/transfer/base" / f"seeds{CHUNK}" / "linear.parquet"
    io.write_parquet(pd.DataFrame({"something": [1.0, 2.0]}), foreign, {"note": "not ours"})
    res = snakemake(work, reference["config"], TABLE_TARGET, cores=1)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "not a transfer table" in out and "linear.parquet" in out, out[-3000:]
    assert snapshot(work / "results" / "tables") == before, "earlier aggregated tables were removed or rewritten"
    assert (work / "results/provenance.json").exists()


def test_cifar_batch_with_a_forbidden_class_is_refused_and_never_run(tmp_path):
    import pickle

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [n.encode() for n in names]}))
    marker = tmp_path / "code_ran"

    class Payload:  # unpickling this calls os.system: what a malicious "batch" would do
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        (folder / name).write_bytes(pickle.dumps({b"data": Payload(), b"labels": [0]}))
    spec = {"study_seed": 1, "task_name": "img", "pretrain": {"steps": 5, "sampling": "iid", "batch": 16,
                                                              "eval_size": 16},
            "task": {"kind": "images", "dataset": "cifar10", "path": str(tmp_path), "classes": ["cat", "dog"],
                     "transfer_classes": ["ship", "truck"], "D": 4, "d": 48}}
    outputs = {k: tmp_path / f"earlier.{k}" for k in ("checkpoint", "trajectory", "attention")}
    for path in outputs.values():
        path.write_bytes(b"an earlier result")
    res = subprocess.run(["groupsparse", "pretrain", "--spec", json.dumps(spec), "--seeds", "0",
                          *[a for k, p in outputs.items() for a in (f"--{k}", str(p))]],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 4, res.stderr[-2000:]
    assert str(folder / "data_batch_1") in res.stderr and "refused to load class" in res.stderr, res.stderr[-2000:]
    assert "system" in res.stderr
    assert not marker.exists(), "unpickling ran code"
    assert all(p.read_bytes() == b"an earlier result" for p in outputs.values())


WRITER = textwrap.dedent("""
    import os, signal, sys
    import pandas as pd
    import pyarrow.parquet as pq
    from groupsparse import io
    real = pq.write_table
    def write_then_die(table, where, **kw):  # the process dies after writing, before the rename
        real(table, where, **kw)
        os.kill(os.getpid(), signal.SIGKILL)
    pq.write_table = write_then_die
    io.write_parquet(pd.DataFrame({"x": range(100000)}), sys.argv[1], {"config_hash": "new"})
""")


def test_a_writer_killed_mid_write_leaves_the_earlier_file_intact(tmp_path):
    target = tmp_path / "table.parquet"
    io.write_parquet(pd.DataFrame({"x": [1, 2, 3]}), target, {"config_hash": "old"})
    before = target.read_bytes()
    res = subprocess.run([sys.executable, "-c", WRITER, str(target)], capture_output=True, text=True, timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert target.read_bytes() == before
    assert io.read_provenance(target)["config_hash"] == "old"
    partial = list(tmp_path.glob(".table.parquet.*.tmp"))
    assert len(partial) == 1  # the killed write's temporary file, never at the declared path
