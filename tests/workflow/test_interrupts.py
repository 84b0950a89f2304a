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

import contextlib
import copy
import json
import os
import re
import shlex
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
    if not proc.log.closed:
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


pytestmark = pytest.mark.xdist_group("interrupts")  # the reference study runs once, on one worker


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


# A stop, however it arrives: (what to wait for, how to stop), in order, on one study. Each stopped run is
# resumed by the next one; the last resumes to the end.
STOPS = [
    ("training", "SIGINT to snakemake"),  # kill -INT, a wrapper: the jobs get it from snakemake
    ("training", "SIGKILL to the job"),  # a job killed by the system: it continues from its saved state
    ("training finished", "SIGTERM to the group"),  # a scheduler's cancel, as the job ends: it is kept
    ("transfer", "SIGTERM to snakemake"),  # kill, a scheduler signalling snakemake alone
    ("transfer", "SIGINT to the group"),  # Ctrl-C in a terminal
    ("transfer", "SIGKILL to the job"),
]
KEPT_KEY = f"results/tiny/pretrain/base/.seeds{CHUNK}.safetensors.kept/key.json"  # written once the job finished


def moment(what: str, proc: subprocess.Popen, work: Path, since: float):
    """The running job to stop at ``what`` (its psutil.Process), once it is there: "training", once this run's
    job has saved a periodic state; "training finished", once it kept its outputs; "transfer", at work."""
    if what == "training":
        resume = work / RESUME_FILE
        return resume.exists() and resume.stat().st_mtime > since and job_process(proc, "pretrain")
    if what == "training finished":
        return (work / KEPT_KEY).exists() and (job_process(proc, "pretrain") or psutil.Process(proc.pid))
    return mid_transfer(proc, work)


def stop(how: str, proc: subprocess.Popen, job: psutil.Process) -> None:
    signum = getattr(signal, how.split()[0])
    if how.endswith("to the job"):
        job.send_signal(signum)
    elif how.endswith("to the group"):
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)


def jobs_in(work: Path) -> list[psutil.Process]:
    """groupsparse processes still running in the study's folder (a stopped run must leave none)."""
    found = []
    for each in psutil.process_iter(["cwd", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            argv = each.info["cmdline"] or []
            if each.info["cwd"] == str(work) and any(Path(a).name == "groupsparse" for a in argv[:2]):
                found.append(each)
    return found


def finished_jobs(work: Path) -> dict[str, tuple[int, str]]:
    """The jobs `groupsparse status` calls done, with their log's mtime and text."""
    from groupsparse.study.jobstate import job_states

    done = {}
    for state in job_states(work / "results/tiny") or []:
        log = work / "results/tiny/logs" / f"{state.key}.log"
        if state.state == "done" and log.exists():
            done[state.key] = (log.stat().st_mtime_ns, log.read_text())
    return done


def assert_nothing_finished_was_computed_again(before: dict[str, tuple[int, str]], work: Path) -> None:
    """Each job done before a run was either not run again (its log untouched) or returned its kept outputs."""
    for key, (mtime, _) in before.items():
        log = work / "results/tiny/logs" / f"{key}.log"
        if log.stat().st_mtime_ns == mtime or not key.startswith(("pretrain/", "transfer/")):
            continue
        assert "nothing recomputed" in log.read_text(), f"{key} finished before, and ran again:\n{log.read_text()}"


def saved_step(log_text: str) -> int | None:
    match = re.search(r"interrupted \(SIG\w+; state saved at step (\d+)\)", log_text)
    return int(match.group(1)) if match else None


@pytest.mark.slow
def test_stopped_however_the_signal_arrives_resumes_redoing_nothing_to_the_same_tables(reference, tmp_path, capsys):
    """SIGINT and SIGTERM to snakemake alone and to its process group, SIGKILL to a job, during training, as
    training ends and during transfer: each stops the run with every job process gone, the stopped
    pretraining job saves its state at the step it stopped at, the last line names the command to resume,
    and `groupsparse status` tells running from interrupted. Each next run (the same command) continues:
    no job done before is computed again (a forced one returns its kept outputs), a stopped pretraining
    job resumes at its saved step, and the last run ends with the uninterrupted run's tables."""
    from groupsparse import cli

    work, cfg = tmp_path / "work", write_config(tmp_path, kill_config())
    command = shlex.join(["snakemake", *snakemake_cmd(work, cfg, TABLE_TARGET)[1:]])
    saved = None  # the step the last stopped pretraining job saved its state at
    for what, how in STOPS:
        before = finished_jobs(work) if (work / "results").exists() else {}
        since = time.time()
        proc = start(work, cfg, TABLE_TARGET)
        job = wait_for(lambda: moment(what, proc, work, since), proc, what)  # noqa: B023
        table = declared_output(job, work) if what == "transfer" else None
        if what == "training":
            assert cli.main(["status", str(work / "results/tiny")]) == 0
            running = capsys.readouterr().out
            assert re.search(rf"pretrain/base/seeds{CHUNK}\s+running", running), running
        stop(how, proc, job)
        assert finish(proc) != 0, f"{how} at {what}: the run went on"
        out = output_of(proc)
        assert not jobs_in(work), f"{how} at {what}: jobs still running after snakemake exited"
        last = [line for line in out.splitlines() if line.strip()][-1]
        expected = "failed: " if how.startswith("SIGKILL") else "interrupted: "
        assert last.startswith(expected) and f"run `{command}` again" in last, last
        assert_nothing_finished_was_computed_again(before, work)
        log = (work / f"results/tiny/logs/pretrain/base/seeds{CHUNK}.log").read_text()
        if saved is not None:  # this run continued the job the one before stopped, at the step it saved
            assert f"continuing from its saved state at step {saved}" in log, log
        if what == "training" and how.startswith("SIGKILL"):
            saved = None  # killed, not stopped: the next run continues from its last periodic state
        elif what == "training":
            saved = saved_step(log)
            assert saved is not None and (work / RESUME_FILE).exists(), log
            assert cli.main(["status", str(work / "results/tiny")]) == 0
            stopped = capsys.readouterr().out
            assert re.search(rf"pretrain/base/seeds{CHUNK}\s+interrupted .*state saved at step {saved}", stopped)
        else:
            saved = None
        if what == "training finished":  # the job killed before continued from its last periodic state
            assert resumed_step(work) >= 200
        if how == "SIGKILL to the job" and what == "transfer":
            assert complete_or_absent(table, reference["work"] / table.relative_to(work))
    before = finished_jobs(work)
    res = snakemake(work, cfg, TABLE_TARGET)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert_nothing_finished_was_computed_again(before, work)
    assert not (work / RESUME_FILE).exists(), "a finished job deletes its resume state"
    assert_same_results(reference["work"], work)


@pytest.mark.slow
def test_status_of_a_finished_study_says_its_jobs_are_done(reference, capsys):
    """The reference ran to the tables (figures and review not asked for): every job they need is done."""
    from groupsparse import cli

    assert cli.main(["status", str(reference["work"] / "results/tiny"), "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    states = {line.split()[0]: line.split()[1] for line in lines if line.startswith(("pretrain/", "transfer/"))}
    states |= {line.split()[0]: line.split()[1] for line in lines if line.startswith(("aggregate", "specs/"))}
    assert len(states) >= 7 and set(states.values()) == {"done"}, lines
    counts = next(line for line in lines if line.startswith("jobs: "))
    assert not any(s in counts for s in ("running", "interrupted", "failed")), counts


@pytest.mark.slow
def test_a_folder_handed_over_with_a_corrupt_table_is_refused_on_its_first_run_naming_the_table(reference, tmp_path):
    """A copied config that keeps another's study_name is refused until study_config.json is deleted, as the
    refusal says; the first run after that checks the folder's tables as a normal run checks those it reruns
    (snakemake would rerun nothing past the owner's new record) and refuses, naming the corrupt table."""
    work = tmp_path / "work"
    shutil.copytree(reference["work"], work, symlinks=True)
    copied = write_config(tmp_path, kill_config(), name="copied.yaml")  # the same study_name, another file
    refused = snakemake(work, copied, TABLE_TARGET)
    assert refused.returncode != 0 and "study_config.json to hand the folder over" in refused.stderr, refused.stderr
    table = work / "results/tiny/pretrain/base" / f"seeds{CHUNK}.trajectory.parquet"
    table.write_bytes(b"garbage, not a Parquet table")
    (work / "results/tiny/study_config.json").unlink()
    before = snapshot(work / "results")
    res = snakemake(work, copied, TABLE_TARGET)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and str(table.relative_to(work)) in out and "not a readable Parquet table" in out, out
    assert "done:" not in out
    assert snapshot(work / "results") == before, "a refused hand-over changed the folder"


@pytest.mark.slow
def test_done_means_every_output_is_there_even_when_snakemake_runs_part_of_the_study(reference, tmp_path):
    """A job snakemake marked incomplete (a spec job that finished as snakemake was killed) makes its next run
    consider that job alone: with its target deleted, snakemake would end "successfully" without it. The run
    says "not done", naming the missing file, and exits non-zero; the next run finishes the study."""
    import base64

    work = tmp_path / "work"
    shutil.copytree(reference["work"], work, symlinks=True)
    spec = next((work / "results/tiny/specs").glob("study.*.json"))
    marker = work / ".snakemake/incomplete" / base64.urlsafe_b64encode(str(spec.relative_to(work)).encode()).decode()
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text('{"external_jobid": null}')
    target = work / TABLE_TARGET  # the aggregated tables' provenance: the run's target
    target.unlink()
    res = snakemake(work, reference["config"], TABLE_TARGET)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and f"not done: {TABLE_TARGET} missing" in out, out[-3000:]
    assert not target.exists()  # snakemake ran the spec job alone
    again = snakemake(work, reference["config"], TABLE_TARGET)
    assert again.returncode == 0 and "done: results in results/tiny/" in again.stderr, again.stderr[-3000:]
    assert target.exists()


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
