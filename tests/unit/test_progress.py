"""Progress lines with the time left, and `groupsparse status` reading the logs of a study without jobs.json."""

from __future__ import annotations

import io as stdio
import os
import time

from groupsparse import cli
from groupsparse.io.progress import PATTERN, Progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_estimates_the_time_left_from_the_average_pace():
    clock, out = Clock(), stdio.StringIO()
    bar = Progress(100, "steps", every=5, stream=out, clock=clock)
    bar.update(0)  # the first update starts the pace (pretraining reports step 0)
    clock.t = 10.0
    bar.update(25)  # 25 steps in 10 s: 75 left at that pace is 30 s
    clock.t = 11.0
    bar.update(27)  # throttled: within 5 s of the last line
    clock.t = 40.0
    bar.update(100)  # the end is always printed
    lines = out.getvalue().splitlines()
    assert lines == [
        "progress: 0/100 steps (0%), 0s elapsed",
        "progress: 25/100 steps (25%), 10s elapsed, about 30s left",
        "progress: 100/100 steps (100%), 40s elapsed",
    ]
    assert all(PATTERN.match(line) for line in lines)


def test_a_resumed_job_estimates_from_its_own_pace():
    """Resumed at step 60 of 100: 20 steps in the next 10 s leave 20 steps, about 10 s (not 60 + 20 steps
    in 10 s, which would promise 2.5 s)."""
    clock, out = Clock(), stdio.StringIO()
    bar = Progress(100, "steps", every=5, stream=out, clock=clock)
    bar.update(60)
    clock.t = 10.0
    bar.update(80)
    assert out.getvalue().splitlines() == [
        "progress: 60/100 steps (60%), 0s elapsed",
        "progress: 80/100 steps (80%), 10s elapsed, about 10s left",
    ]


def _job(results, name, log_text, benchmark=False, age=0.0):
    log = results / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(log_text)
    if age:
        os.utime(log, (time.time() - age, time.time() - age))
    if benchmark:
        tsv = results / "benchmarks" / f"{name}.tsv"
        tsv.parent.mkdir(parents=True, exist_ok=True)
        tsv.write_text("s\n1.0\n")


def test_status_of_a_study_without_jobs_json_reads_its_logs_never_their_ages(tmp_path, capsys):
    """A study whose runs predate results/<study>/jobs.json: done where snakemake wrote the benchmark, failed
    where the log names an error, else unfinished, whatever the log's age (groupsparse.study.jobstate reads
    studies with jobs.json: tests/unit/test_stopping.py)."""
    results = tmp_path / "results" / "study"
    _job(results, "pretrain/base/seeds0-4", "progress: 3000/3000 steps (100%), 30s elapsed\n", benchmark=True)
    _job(results, "pretrain/big/seeds0-4", "x\nprogress: 1200/3000 steps (40%), 12s elapsed, about 18s left\n")
    _job(results, "transfer/base/seeds0-4/linear", "groupsparse transfer: bad input: ck.safetensors: truncated\n")
    _job(results, "transfer/old/seeds0-4/linear", "progress: 1/9 fits (11%), 1s elapsed, about 8s left\n", age=3600)
    code = cli.main(["status", str(results)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1  # a failed job
    assert "jobs.json" in out[0] and len(out) == 5  # the note, three jobs not done, the counts
    big = next(line for line in out if "pretrain/big" in line)
    assert "unfinished" in big and "1200/3000 steps (40%)" in big
    assert "failed" in next(line for line in out if "transfer/base" in line)
    assert "unfinished" in next(line for line in out if "transfer/old" in line)  # an old log is no state
    assert out[-1] == "jobs: 4: 1 done, 2 unfinished, 1 failed"
    assert cli.main(["status", str(results), "--all"]) == 1
    assert any("pretrain/base" in line and "done" in line for line in capsys.readouterr().out.splitlines())


def test_status_of_a_study_that_never_started_says_so(tmp_path, capsys):
    assert cli.main(["status", str(tmp_path / "results" / "nothing")]) == 1
    assert "no job of" in capsys.readouterr().out


def test_a_transfer_jobs_progress_counts_only_the_fits_it_performs():
    """A method kept off the negative control (control_methods) fits on the transfer task alone: its job's
    progress total is the sizes' sum once, not once per downstream task (it read 35% when half done)."""
    from groupsparse.commands.transfer import fits_total
    from groupsparse.transfer.spec import TransferSpec

    spec = TransferSpec.from_dict({"control_methods": ["logreg"]})
    assert set(spec.downstream) == {"transfer", "negative_control"}
    assert fits_total(spec, ["std_transformer"], [8, 32]) == 40
    assert fits_total(spec, ["logreg", "std_transformer"], [8, 32]) == 40 * 3
