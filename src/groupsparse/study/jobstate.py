"""What each job of a study is doing, read from what snakemake and the jobs record (never from log ages).

The workflow writes ``results/<study>/jobs.json`` when a run starts: every job of the study, keyed as
its log (``pretrain/<run>/seeds<chunk>``), with its output files, log and benchmark. A job then is

- **done**: every output exists and snakemake holds no incomplete marker for it (``.snakemake/incomplete/``:
  written when a job starts, removed when snakemake records it finished);
- **running**: marked incomplete while its process runs here (a process in the study's folder whose
  command line names an output), or while the snakemake that started it runs (a cluster job);
- **interrupted**: marked incomplete with neither running (snakemake was stopped or killed), or its last
  run ended on a stop signal (its log's last line says "interrupted"); the next run continues it
  (pretraining from its saved state);
- **failed**: not done and its log names an error;
- **not started**: anything else.

Torch-free; the live processes are read from /proc (Linux), elsewhere only snakemake's lock tells.
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

JOBS_FILE = "jobs.json"
STATES = ("done", "running", "interrupted", "failed", "not started")
ERROR = re.compile(r"^(groupsparse [\w-]+: .*|Traceback \(most recent call last\):|\w+Error: .*)$")
INTERRUPTED = re.compile(r"^groupsparse [\w-]+: interrupted\b.*$")


def jobs_record(jobs: dict[str, dict]) -> str:
    """The text of results/<study>/jobs.json: ``jobs`` maps a job's key to its ``rule``, ``outputs``
    (``temp``: those snakemake deletes once used), ``log`` and ``benchmark``, paths relative to the
    workflow's folder."""
    return json.dumps({"jobs": jobs}, indent=1, sort_keys=True) + "\n"


def workdir_of(results: str | os.PathLike) -> Path:
    """The workflow's folder of a results folder (results/<study> lives in it)."""
    return Path(results).resolve().parent.parent


def study_jobs(results: str | os.PathLike) -> dict[str, dict] | None:
    """jobs.json's ``jobs`` (see jobs_record), or None where no run wrote it or it cannot be read."""
    try:
        return json.loads((Path(results) / JOBS_FILE).read_text())["jobs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def study_benchmarks(results: str | os.PathLike) -> set[Path] | None:
    """The benchmark files of the study's jobs as jobs.json names them (the last run's config), resolved; None
    without jobs.json."""
    jobs = study_jobs(results)
    if jobs is None:
        return None
    return {(workdir_of(results) / job["benchmark"]).resolve() for job in jobs.values() if job.get("benchmark")}


def incomplete_outputs(workdir: Path) -> set[str]:
    """The files snakemake marked incomplete in ``workdir`` (.snakemake/incomplete/: one file per output,
    named by the output path in URL-safe base64, split into folders '@<part>' when too long)."""
    root = workdir / ".snakemake" / "incomplete"
    found = set()
    if not root.is_dir():
        return found
    for marker in root.rglob("*"):
        if not marker.is_file():
            continue
        parts = marker.relative_to(root).parts
        encoded = "".join(p[1:] if p.startswith("@") else p for p in parts)
        try:
            found.add(base64.urlsafe_b64decode(encoded.encode()).decode())
        except (ValueError, UnicodeDecodeError):
            continue
    return found


@dataclass
class Processes:
    """The processes running in a folder: their command lines (None where /proc cannot tell)."""

    argv: list[list[str]] | None

    @classmethod
    def in_folder(cls, workdir: Path) -> Processes:
        proc = Path("/proc")
        if not (proc / str(os.getpid())).is_dir():
            return cls(None)
        found = []
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if Path(os.readlink(entry / "cwd")) != workdir:
                    continue
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            found.append([a.decode(errors="replace") for a in argv if a])
        return cls(found)

    def naming(self, path: str) -> bool:
        return bool(self.argv) and any(path in arg for argv in self.argv for arg in argv)

    def snakemake(self) -> bool | None:
        """A snakemake among them (its console script, or ``python -m snakemake``); None if unknown."""
        if self.argv is None:
            return None
        return any(
            any(Path(a).name == "snakemake" for a in argv[:2]) or argv[1:3] == ["-m", "snakemake"] for argv in self.argv
        )


def snakemake_running(workdir: Path, processes: Processes) -> bool:
    """A snakemake runs in ``workdir``: one of its processes (where /proc tells), else its lock."""
    alive = processes.snakemake()
    if alive is not None:
        return alive
    locks = workdir / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


@dataclass
class JobState:
    key: str
    state: str
    detail: str


def last_lines(log: Path) -> list[str]:
    try:
        return log.read_text(errors="replace").splitlines()
    except OSError:
        return []


def job_states(results: str | os.PathLike) -> list[JobState] | None:
    """The state of every job of the study (see the module's doc), or None if no run has written its
    jobs.json (a study run before it was written: ``groupsparse status`` then reads the logs alone)."""
    from ..io.progress import PATTERN

    results = Path(results)
    jobs = study_jobs(results)
    if jobs is None:
        return None
    workdir = workdir_of(results)
    marked = incomplete_outputs(workdir)
    processes = Processes.in_folder(workdir)
    snakemake = snakemake_running(workdir, processes)
    states = []
    for key, job in sorted(jobs.items()):
        outputs = job["outputs"]
        kept = [o for o in outputs if o not in job.get("temp", [])]
        lines = last_lines(workdir / job["log"])
        progress = [m.group(0)[len("progress: ") :] for m in map(PATTERN.match, lines) if m]
        where = progress[-1] if progress else ""
        is_marked = any(o in marked for o in outputs)
        exists = all((workdir / o).exists() for o in kept)
        benchmark = (workdir / job["benchmark"]).is_file()
        if is_marked:
            here = any(processes.naming(o) for o in outputs)
            if here or snakemake:
                state, detail = "running", where or "started"
            else:
                resume = f"; {resumed_at(lines)}" if resumed_at(lines) else ""
                state, detail = "interrupted", f"{where or 'stopped'} (the next run continues it{resume})"
        elif (exists and kept) or (not kept and benchmark):
            took = benchmark_seconds(workdir / job["benchmark"])
            state, detail = "done", "" if took is None else f"took {took:.1f} s"
        elif lines and INTERRUPTED.match(lines[-1]):
            state, detail = "interrupted", f"{lines[-1]} (the next run continues it)"
        elif errors := [line for line in lines if ERROR.match(line)]:
            state, detail = "failed", errors[-1][:160]
        else:
            state, detail = "not started", ""
        states.append(JobState(key, state, detail))
    return states


def benchmark_seconds(benchmark: Path) -> float | None:
    """A finished job's wall seconds (the `s` column snakemake wrote), None if unreadable."""
    try:
        header, row = benchmark.read_text().splitlines()[:2]
        return float(row.split("\t")[header.split("\t").index("s")])
    except (OSError, ValueError, IndexError):
        return None


def resumed_at(lines: list[str]) -> str:
    saved = [m.group(1) for m in (re.search(r"state saved at step (\d+)", line) for line in lines) if m]
    return f"state saved at step {saved[-1]}" if saved else ""


def finished_jobs(results: str | os.PathLike) -> int | None:
    """How many jobs of the study are done (None without jobs.json)."""
    states = job_states(results)
    return None if states is None else sum(s.state == "done" for s in states)


# -- what a "done" line guarantees ------------------------------------------------------------
# Snakemake says a run succeeded when every job it decided to run succeeded. That is not the study done:
# its needrun pass can leave jobs out (a job forced by an incomplete marker masks everything downstream of
# it, and where the way down passes an ancient() input it never comes back to them), and it never rereads a
# table it does not rerun. The workflow's "done" line is printed only when this finds nothing.


def done_problem(outputs_by_rule: dict[str, list[str]]) -> str | None:
    """Why the run's jobs (their rule -> output files, temporary ones left out) do not make a finished
    study, or None: an output missing, or a per-job table (pretraining trajectory and attention, transfer)
    unreadable or without its columns. One line naming the first file."""
    from .preflight import tables_problem

    missing = [f for files in outputs_by_rule.values() for f in files if not Path(f).exists()]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return f"{missing[0]}{more} missing: snakemake ran part of the study only"
    kinds = {".trajectory.parquet": "trajectory", ".attention.parquet": "attention"}
    tables = [(kinds[s], p) for p in outputs_by_rule.get("pretrain", []) for s in kinds if p.endswith(s)]
    return tables_problem(tables + [("transfer", p) for p in outputs_by_rule.get("transfer", [])])
