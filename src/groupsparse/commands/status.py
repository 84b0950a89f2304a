"""`groupsparse status`: one line per job of a study: done, running, interrupted, failed or not started.

Read from what snakemake and the jobs record (``groupsparse.study.jobstate``): the run's list of jobs
(results/<study>/jobs.json), snakemake's incomplete markers and lock, the outputs, the processes running
in the study's folder, the logs' error and progress lines. A study run before jobs.json was written is
read from its logs and benchmark files alone.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from ..study.jobstate import ERROR, STATES, benchmark_seconds


def register(sub) -> None:
    from ._args import InputFolder

    p = sub.add_parser("status", help="what is done, running, interrupted, failed or not started, one line per job")
    p.add_argument(
        "results",
        nargs="?",
        type=InputFolder(missing_ok=True),  # a study not started yet: status says so
        default="results/default",
        help="the study's results folder (default: results/default)",
    )
    p.add_argument("--all", action="store_true", help="also list finished jobs (default: only the others)")
    p.set_defaults(func=run)


def logged_states(results: Path) -> list[tuple[str, str, str]]:
    """(job, state, detail) from the logs alone (a study without jobs.json): done where snakemake wrote
    the job's benchmark, failed where the log names an error, else unfinished."""
    from ..io.progress import PATTERN

    logs, out = results / "logs", []
    for log in sorted(logs.rglob("*.log")):
        job = log.relative_to(logs).with_suffix("")
        text = log.read_text(errors="replace").splitlines()
        errors = [line for line in text if ERROR.match(line)]
        progress = [m.group(0)[len("progress: ") :] for m in map(PATTERN.match, text) if m]
        if (results / "benchmarks" / job.with_suffix(".tsv")).is_file() and not errors:
            out.append((str(job), "done", progress[-1] if progress else ""))
        elif errors:
            out.append((str(job), "failed", errors[-1][:160]))
        else:
            out.append((str(job), "unfinished", progress[-1] if progress else ""))
    return out


def run(args) -> int:
    from ..study.jobstate import JOBS_FILE, job_states

    results = Path(args.results)
    states = job_states(results)
    if states is not None:
        rows = [(s.key, s.state, s.detail) for s in states]
        order = STATES
    elif (results / "logs").is_dir():
        rows, order = logged_states(results), ("done", "unfinished", "failed")
        print(f"(no {results / JOBS_FILE}: this study's runs predate it; read from its logs alone)")
    else:
        folders = ", ".join(sorted(p.name for p in results.parent.glob("*") if p.is_dir())) or "none"
        print(
            f"groupsparse status: no job of {results} has started ({results / JOBS_FILE} and {results / 'logs'} "
            f"do not exist; results folders here: {folders})"
        )
        return 1
    counts = {state: sum(r[1] == state for r in rows) for state in order}
    lines = [f"{job:<48} {state:<12} {detail}".rstrip() for job, state, detail in rows if args.all or state != "done"]
    print("\n".join(lines) if lines else "every job is done")
    print(f"jobs: {len(rows)}: " + ", ".join(f"{n} {state}" for state, n in counts.items() if n))
    left = time_left_line(results, time.time())
    if left and counts.get("done", 0) < len(rows):
        print(left)
    return 1 if counts.get("failed") else 0


def seconds_of(text: str) -> float:
    """Inverse of io.progress.duration: '12s', '3.5min', '2.1h' -> seconds (0 if unreadable)."""
    match = re.fullmatch(r"([0-9.]+)(s|min|h)", text.strip())
    return float(match.group(1)) * {"s": 1, "min": 60, "h": 3600}[match.group(2)] if match else 0.0


def time_left_line(results: Path, now: float) -> str | None:
    """From results/<study>/estimate.json (the calibrated per-job predictions the run's start wrote),
    corrected by the run so far: a running job's own progress line gives its time left; a job not
    started is its prediction scaled by how long the finished jobs took against theirs."""
    import json

    from ..costs.calibrate import ESTIMATE_FILE, study_seconds
    from ..io.progress import PATTERN, duration

    try:
        estimate = json.loads((results / ESTIMATE_FILE).read_text())
        jobs = estimate["jobs"]
    except (OSError, ValueError, KeyError):
        return None
    finished = {}
    for job, seconds in jobs.items():
        took = benchmark_seconds(results / "benchmarks" / f"{job}.tsv")
        if took is not None:
            finished[job] = (took, seconds)
    predicted = sum(p for _, p in finished.values())
    scale = sum(t for t, _ in finished.values()) / predicted if predicted > 0 else 1.0
    left = {}
    for job, seconds in jobs.items():
        if job in finished or (results / "benchmarks" / f"{job}.tsv").is_file():
            continue
        log = results / "logs" / f"{job}.log"
        found = []
        if log.is_file():
            found = [m for m in map(PATTERN.match, log.read_text(errors="replace").splitlines()) if m]
        if found and found[-1].group("left"):
            left[job] = seconds_of(found[-1].group("left"))  # the job's own rate so far
        else:
            spent = seconds_of(found[-1].group("elapsed")) if found else 0.0
            left[job] = max(seconds * scale - spent, 0.0)
    if not left:
        return None
    total = study_seconds(left, estimate.get("cores", 1), estimate.get("threads", 1))
    basis = (
        f"the start's calibrated estimate scaled by the {len(finished)} finished jobs' time against theirs "
        f"({scale:.2f}x) and running jobs' own progress"
        if finished
        else "the start's calibrated estimate and running jobs' own progress; no job has finished to correct it"
    )
    return f"about {duration(total)} left on this machine for {len(left)} jobs ({basis})"
