"""`groupsparse status`: one line per job of a study, read from its logs and benchmark files.

Snakemake writes a job's benchmark file when the job ends; a log without one is running (or
was killed: its age says which), a log with an error line is failed.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

ERROR = re.compile(r"^(groupsparse [\w-]+: .*|Traceback \(most recent call last\):|\w+Error: .*)$")


def register(sub) -> None:
    p = sub.add_parser("status", help="what is running, how far it is and what failed, one line per job")
    p.add_argument(
        "results", nargs="?", default="results/default", help="the study's results folder (default: results/default)"
    )
    p.add_argument("--all", action="store_true", help="also list finished jobs (default: only the others)")
    p.set_defaults(func=run)


def job_status(log: Path, benchmark: Path, now: float) -> tuple[str, str]:
    from ..io.progress import PATTERN

    text = log.read_text(errors="replace").splitlines() if log.is_file() else []
    errors = [line for line in text if ERROR.match(line)]
    progress = [m for m in map(PATTERN.match, text) if m]
    if benchmark.is_file() and not errors:
        return "done", progress[-1].group(0)[len("progress: ") :] if progress else ""
    if errors:
        return "failed", errors[-1][:160]
    age = now - log.stat().st_mtime
    where = progress[-1].group(0)[len("progress: ") :] if progress else "started"
    return ("running" if age < 600 else "stalled?"), f"{where} (log written {age:.0f} s ago)"


def run(args) -> int:
    results = Path(args.results)
    logs = results / "logs"
    if not logs.is_dir():
        folders = ", ".join(sorted(p.name for p in results.parent.glob("*") if p.is_dir())) or "none"
        print(
            f"groupsparse status: {logs} does not exist: no job of this study has started "
            f"(results folders here: {folders})"
        )
        return 1
    now = time.time()
    counts: dict[str, int] = {}
    lines = []
    for log in sorted(logs.rglob("*.log")):
        job = log.relative_to(logs).with_suffix("")
        state, detail = job_status(log, results / "benchmarks" / job.with_suffix(".tsv"), now)
        counts[state] = counts.get(state, 0) + 1
        if args.all or state != "done":
            lines.append(f"{str(job):<48} {state:<9} {detail}")
    print("\n".join(lines) if lines else "no job running or failed")
    print("jobs: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    left = time_left_line(results, now)
    if left:
        print(left)
    return 1 if counts.get("failed") else 0


def seconds_of(text: str) -> float:
    """Inverse of io.progress.duration: '12s', '3.5min', '2.1h' -> seconds (0 if unreadable)."""
    match = re.fullmatch(r"([0-9.]+)(s|min|h)", text.strip())
    return float(match.group(1)) * {"s": 1, "min": 60, "h": 3600}[match.group(2)] if match else 0.0


def recorded_seconds(benchmark: Path) -> float | None:
    """A finished job's wall seconds (the `s` column snakemake wrote), None if unreadable."""
    try:
        header, row = benchmark.read_text().splitlines()[:2]
        return float(row.split("\t")[header.split("\t").index("s")])
    except (OSError, ValueError, IndexError):
        return None


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
        took = recorded_seconds(results / "benchmarks" / f"{job}.tsv")
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
