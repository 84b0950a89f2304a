"""How jobs stop and what a rerun of a finished job does, one piece at a time (the whole workflow, stopped
in every way: tests/workflow/test_interrupts.py).

- a pretraining job asked to stop (SIGTERM) stops at its next step with its state saved there, and the same
  command continues from that step to the numbers of an uninterrupted run;
- a finished pretraining or transfer job keeps its outputs (study/finished.py): run again with the same
  spec and code, it puts them back without computing; another spec, or a kept file changed, computes anew;
- snakemake's signal reaches the processes of its job shells (study/stopping.py), and the end lines name
  the run's own command;
- `groupsparse status` tells done, running, interrupted, failed and not started apart from snakemake's
  markers, the outputs, the processes and the logs (study/jobstate.py), whatever the logs' ages.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from groupsparse import cli
from groupsparse.io import files as io
from groupsparse.study import jobstate, stopping

from conftest import drop_timing, tiny_spec_dict


def pretrain_argv(folder: Path, spec: Path, *extra: str) -> list[str]:
    return [
        "pretrain",
        "--spec",
        f"@{spec}",
        "--seeds",
        "0-1",
        "--checkpoint",
        str(folder / "c.safetensors"),
        "--trajectory",
        str(folder / "t.parquet"),
        "--attention",
        str(folder / "a.parquet"),
        *extra,
    ]


def write_spec(folder: Path, steps: int, **pretrain) -> Path:
    spec = folder / f"spec{steps}.json"
    spec.write_text(json.dumps(tiny_spec_dict(pretrain={"steps": steps, "record_every": 50, **pretrain})))
    return spec


def stop_when(argv: list[str], log: Path, needle: str) -> str:
    """Run ``argv``, send it SIGTERM once its log holds ``needle``; its log once it exited (130)."""
    with open(log, "w") as out:
        job = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while needle not in log.read_text() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=120)
    assert code == 130, log.read_text()
    return log.read_text()


def test_a_stopped_pretraining_job_saves_the_step_it_stopped_at_and_continues_from_it(tmp_path):
    """Stopped (SIGTERM) during training, the job saves its state at the step it reached, writes none of its
    outputs and exits 130; the same command continues from that step (the numbers of a continued run equal
    an uninterrupted one's: tests/unit/test_pretrain.py, and the whole workflow in test_interrupts.py)."""
    spec = write_spec(tmp_path, 10**7)  # never finishes here: stopped
    resume = tmp_path / ".resume.safetensors"
    argv = [sys.executable, "-m", "groupsparse.cli"]
    argv += pretrain_argv(tmp_path, spec, "--resume-state", str(resume), "--resume-every", str(10**8))
    first = stop_when(argv, tmp_path / "log1", "progress: ")
    saved = int(first.split("state saved at step ")[1].split(")")[0])
    assert saved > 0 and resume.exists() and "groupsparse pretrain: interrupted (SIGTERM; state saved" in first
    assert not any((tmp_path / n).exists() for n in ("c.safetensors", "t.parquet", "a.parquet"))
    second = stop_when(argv, tmp_path / "log2", "continuing from its saved state")
    assert f"continuing from its saved state at step {saved}\n" in second
    assert int(second.split("state saved at step ")[1].split(")")[0]) >= saved


def test_a_finished_job_run_again_returns_its_kept_outputs_without_computing(tmp_path, capsys, monkeypatch):
    spec = write_spec(tmp_path, 30)
    assert cli.main(pretrain_argv(tmp_path, spec)) == 0
    outputs = [tmp_path / n for n in ("c.safetensors", "t.parquet", "a.parquet")]
    first = {p: p.read_bytes() for p in outputs}
    for p in outputs:  # snakemake deletes a job's outputs before it runs the job
        p.unlink()
    from groupsparse.training import pretrain as training

    def no_training(*args, **kwargs):
        raise AssertionError("a finished job was computed again")

    with monkeypatch.context() as patched:
        patched.setattr(training, "Trainer", no_training)
        capsys.readouterr()
        assert cli.main(pretrain_argv(tmp_path, spec)) == 0
    assert "nothing recomputed" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in outputs} == first
    # a kept file changed (or another spec): computed anew, and kept again
    kept = tmp_path / ".c.safetensors.kept"
    next(kept.glob("1.*")).write_bytes(b"changed")
    for p in outputs:
        p.unlink()
    capsys.readouterr()
    assert cli.main(pretrain_argv(tmp_path, spec)) == 0
    out = capsys.readouterr().out
    assert "nothing recomputed" not in out and "wall time" in out
    (tmp_path / "first.parquet").write_bytes(first[outputs[1]])
    pd.testing.assert_frame_equal(
        drop_timing(io.read_parquet(tmp_path / "t.parquet")), drop_timing(io.read_parquet(tmp_path / "first.parquet"))
    )
    other = write_spec(tmp_path, 31)
    capsys.readouterr()
    assert cli.main(pretrain_argv(tmp_path, other)) == 0
    assert "nothing recomputed" not in capsys.readouterr().out


def test_snakemakes_stop_reaches_the_processes_its_job_shells_run(tmp_path):
    """SIGTERM goes to the job under the shell, not to the shell (which traps it and waits for its job)."""
    shell = subprocess.Popen(
        ["bash", "-c", f"trap : TERM; {sys.executable} -c 'import time; time.sleep(60)'; echo job $? > {tmp_path}/rc"]
    )
    deadline = time.monotonic() + 60
    while not stopping.descendants(shell.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = stopping.stop_jobs([shell.pid])
    assert sent and shell.pid not in sent
    assert shell.wait(timeout=60) == 0  # the shell went on after its job, which SIGTERM ended
    assert (tmp_path / "rc").read_text().strip() == f"job {128 + signal.SIGTERM}"


def test_the_end_lines_name_the_runs_own_command_and_the_report_its_study_options():
    argv = ["/venv/bin/snakemake", "--cores", "2", "-d", "/tmp/my dir", "results/tiny/provenance.json"]
    argv += ["--configfile", "configs/tiny.yaml", "more.yaml"]
    assert stopping.resume_command(argv) == (
        "snakemake --cores 2 -d '/tmp/my dir' results/tiny/provenance.json --configfile configs/tiny.yaml more.yaml"
    )
    assert stopping.report_command(argv, "results/tiny/report.html") == (
        "snakemake --report results/tiny/report.html -d '/tmp/my dir' --configfile configs/tiny.yaml more.yaml"
    )
    assert stopping.resume_command(["snakemake"]) == "snakemake"  # no stray space
    assert stopping.report_command(["snakemake", "--cores", "all"], "r.html") == "snakemake --report r.html"


# -- status -------------------------------------------------------------------------------------


def study(tmp_path: Path) -> Path:
    """A study folder with five jobs, one in each state (running: a live process naming its output)."""
    results = tmp_path / "results" / "s"
    jobs = {}
    for key in ("done", "running", "interrupted", "failed", "waiting"):
        jobs[key] = {
            "rule": "pretrain",
            "outputs": [f"results/s/out/{key}.parquet"],
            "temp": [],
            "log": f"results/s/logs/{key}.log",
            "benchmark": f"results/s/benchmarks/{key}.tsv",
        }
    (results / "out").mkdir(parents=True)
    (results / "logs").mkdir()
    io.write_text_atomic(results / jobstate.JOBS_FILE, jobstate.jobs_record(jobs))
    (results / "out/done.parquet").write_text("x")
    (results / "logs/done.log").write_text("wall time 1.0 s\n")
    (results / "logs/running.log").write_text("progress: 10/100 steps (10%), 1s elapsed, about 9s left\n")
    (results / "logs/interrupted.log").write_text(
        "groupsparse pretrain: interrupted (SIGTERM; state saved at step 7)\n"
    )
    (results / "logs/failed.log").write_text("groupsparse pretrain: bad input: x: truncated\n")
    old = time.time() - 86400
    for log in (results / "logs").iterdir():
        os.utime(log, (old, old))  # ages say nothing
    for key in ("running", "interrupted"):
        name = base64.urlsafe_b64encode(f"results/s/out/{key}.parquet".encode()).decode()
        marker = tmp_path / ".snakemake/incomplete" / name
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("{}")
    return results


def test_status_reads_snakemakes_records_and_the_processes_not_the_log_ages(tmp_path, capsys):
    results = study(tmp_path)
    job = subprocess.Popen(
        [sys.executable, "-c", "import time, sys; time.sleep(60)", "results/s/out/running.parquet"], cwd=tmp_path
    )
    try:
        # the child's command line, once /proc shows it (a loaded machine may take a moment to exec it)
        deadline = time.monotonic() + 30
        while not jobstate.Processes.in_folder(tmp_path).naming("results/s/out/running.parquet"):
            assert time.monotonic() < deadline, "the stand-in job never appeared in /proc"
            time.sleep(0.05)
        states = {s.key: s.state for s in jobstate.job_states(results)}
    finally:
        job.kill()
        job.wait()
    assert states == {
        "done": "done",
        "running": "running",
        "interrupted": "interrupted",
        "failed": "failed",
        "waiting": "not started",
    }
    assert cli.main(["status", str(results)]) == 1  # a failed job
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "jobs: 5: 1 done, 2 interrupted, 1 failed, 1 not started"  # its process gone: stopped
    assert any(line.startswith("interrupted") and "state saved at step 7" in line for line in out)


@pytest.mark.parametrize("what", ["claims.csv", "summary.parquet"])
def test_review_names_a_corrupt_table_and_what_is_wrong_never_internal_error(tmp_path, capsys, what):
    from conftest import REPO

    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    for table in (REPO / "docs/results/tables").iterdir():
        (results / "tables" / table.name).write_bytes(table.read_bytes())
    (results / "tables" / what).write_bytes(
        b'a,b\n"unclosed,1\n\x00\xff,2,3,4\n' if what.endswith(".csv") else b"PAR1x"
    )
    code = cli.main(["review", str(results)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == cli.EXIT_INPUT and len(err) == 1, err
    assert str(results / "tables" / what) in err[0] and "internal error" not in err[0] and "not a readable" in err[0]
