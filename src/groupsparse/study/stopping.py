"""How a running study stops: a SIGINT or SIGTERM to snakemake reaches its running jobs.

Ctrl-C in a terminal signals the whole process group, so every job gets it. A signal to snakemake
alone (``kill -INT``, a wrapper, a scheduler) does not: snakemake waits for its running jobs to finish
(minutes), and those that finish meanwhile are never recorded as finished, so the next run computes them
again. The workflow's onstart installs :func:`forward_stop_signals`: snakemake passes the request on, as
SIGTERM, to the processes of its running jobs (each stops at its next step with its state saved, or at
once: ``io.progress.handle_stop_signals``), then exits as its SIGTERM handler does (waiting for its
running jobs, now seconds). Torch-free.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc on Linux, else from ``ps``)."""
    proc = Path("/proc")
    if (proc / str(os.getpid())).is_dir():
        found = []
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                # /proc/<pid>/stat: "pid (comm) state ppid ...", comm may hold spaces and parentheses
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
        return found
    try:
        listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    pairs = [line.split() for line in listing.splitlines() if len(line.split()) == 2]
    return [int(p) for p, parent in pairs if parent.isdigit() and int(parent) == pid]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    out, todo = [], [pid]
    while todo:
        below = children_of(todo.pop())
        out += below
        todo += below
    return out


def stop_jobs(shells: Iterable[int]) -> list[int]:
    """SIGTERM to the processes each job shell (a pid snakemake started) runs, not to the shell itself:
    the shell waits for its job and exits as the job does (the workflow's shell prefix traps TERM). A
    shell with no process below it gets the signal itself. Returns the pids signalled."""
    sent = []
    for shell in shells:
        for pid in descendants(shell) or [shell]:
            try:
                os.kill(pid, signal.SIGTERM)
                sent.append(pid)
            except (ProcessLookupError, PermissionError):
                continue
    return sent


_requested: dict[str, str | None] = {"signal": None}


def stop_requested() -> str | None:
    """The signal that asked this snakemake to stop (SIGINT, SIGTERM), or None."""
    return _requested["signal"]


def _keep_stopping(running_shells: Callable[[], Iterable[int]], every_s: float = 0.5) -> None:
    while True:
        time.sleep(every_s)
        stop_jobs(running_shells())


def forward_stop_signals(running_shells: Callable[[], Iterable[int]], local: bool = True) -> None:
    """From now on, SIGINT and SIGTERM to this snakemake are passed on to its running jobs
    (``running_shells()``: the pids of their shells), then snakemake stops as its SIGTERM handler (the
    job scheduler's graceful exit, installed before this is called) does: it starts no new job and waits
    for the running ones, which now stop within seconds, recording each that finished meanwhile as
    finished (its KeyboardInterrupt path would leave their incomplete markers, and the next run would
    compute them again). Under a cluster executor (``local`` false) the jobs are not this machine's
    processes: both signals take snakemake's KeyboardInterrupt path, whose cancel reaches them. Later
    signals only pass the request on again: a second Ctrl-C must not break snakemake's clean-up (its
    lock, its records). A SIGINT this process ignores (a background job of a script) stays ignored.
    Main thread only."""
    before = {each: signal.getsignal(each) for each in (signal.SIGINT, signal.SIGTERM)}
    graceful = before[signal.SIGTERM] if local and callable(before[signal.SIGTERM]) else None
    if not local:  # snakemake's cancel, which cancels the cluster's jobs (they save, then stop)
        before[signal.SIGTERM] = signal.SIG_DFL

    def forward(signum, frame):
        stop_jobs(running_shells())
        if _requested["signal"] is not None:
            return
        _requested["signal"] = signal.Signals(signum).name
        # again every half second until snakemake exits: a job whose shell had not started it yet (its
        # shell traps TERM and goes on) gets the request once it runs (a job takes only the first)
        threading.Thread(target=_keep_stopping, args=(running_shells,), daemon=True).start()
        previous = graceful or before[signum]
        if callable(previous):
            previous(signum, frame)  # the scheduler's graceful exit, or snakemake's own SIGINT path
        else:
            raise KeyboardInterrupt(_requested["signal"])

    for each, previous in before.items():
        if previous is signal.SIG_IGN or previous is None:
            continue
        signal.signal(each, forward)


# -- the commands a stopped or finished run names ---------------------------------------------
# snakemake's options that say which study a command is about, and how many values each takes (None:
# every value up to the next option); the report command keeps these, and only these, of the run's own.
STUDY_OPTIONS = {
    "-s": 1,
    "--snakefile": 1,
    "-d": 1,
    "--directory": 1,
    "--configfile": None,
    "--configfiles": None,
    "-C": None,
    "--config": None,
    "--profile": 1,
    "--workflow-profile": 1,
}


def resume_command(argv: list[str]) -> str:
    """The command that resumes a stopped run: the run's own, as typed (the local profile reruns the
    incomplete jobs; pretraining continues from its saved state)."""
    import shlex

    return shlex.join(["snakemake", *argv[1:]])


def report_command(argv: list[str], report: str) -> str:
    """``snakemake --report <report>`` with the run's options that say which study (its Snakefile, folder,
    config files and config values), as typed."""
    import shlex

    kept, i = [], 1
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        if name not in STUDY_OPTIONS:
            i += 1
            continue
        kept.append(token)
        i += 1
        if "=" in token and token.startswith("--"):
            continue
        count = STUDY_OPTIONS[name]
        while i < len(argv) and not argv[i].startswith("-") and (count is None or count > 0):
            kept.append(argv[i])
            i += 1
            count = None if count is None else count - 1
    # --configfile and --config take every value after them: they go last, as in the run's own command
    return shlex.join(["snakemake", "--report", report, *kept])
