"""Progress lines for long jobs, with an estimate of the time left, written to the job's log; and how a
job stops when asked to (SIGINT or SIGTERM: :func:`handle_stop_signals`).

One format, read back by `groupsparse status`:
    progress: 1200/3000 steps (40%), 12 s elapsed, about 18 s left
The estimate assumes the remaining units cost what the finished ones did on average; a job
whose units grow in cost (transfer: larger n) counts work units rather than items. The pace is
measured from the first update on (its time and count): a job resumed at step 59000 of 110592 reports
the pace of this process's steps, not 59000 steps in its first second.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
from collections.abc import Iterator

PATTERN = re.compile(
    r"^progress: (?P<done>\d+)/(?P<total>\d+) (?P<unit>\S+) \((?P<percent>\d+)%\), "
    r"(?P<elapsed>\S+) elapsed(?:, about (?P<left>\S+) left)?"
)


def duration(seconds: float) -> str:
    """12 s, 3.5 min, 2.1 h."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


class Progress:
    """Call ``update(done)`` as work finishes; a line is printed at most every ``every`` seconds
    (and always at the end), flushed so that a log followed with `tail -f` shows it at once."""

    def __init__(self, total: int, unit: str, every: float = 10.0, stream=None, clock=time.monotonic):
        self.total, self.unit, self.every = max(int(total), 1), unit, every
        self.stream, self.clock = stream or sys.stdout, clock
        self.start = clock()
        self.last = None
        self.first: tuple[float, int] | None = None  # (time, done) at the first update: where the pace starts

    def line(self, done: int) -> str:
        elapsed = self.clock() - self.start
        text = f"progress: {done}/{self.total} {self.unit} ({100 * done // self.total}%), {duration(elapsed)} elapsed"
        since, base = self.first if self.first is not None else (self.start, 0)
        if base < done < self.total:
            text += f", about {duration((self.clock() - since) / (done - base) * (self.total - done))} left"
        return text

    def update(self, done: int, force: bool = False) -> None:
        now = self.clock()
        if self.first is None:
            self.first = (now, done)
        if force or done >= self.total or self.last is None or now - self.last >= self.every:
            print(self.line(done), file=self.stream, flush=True)
            self.last = now


# -- stopping on request ----------------------------------------------------------------------
# A job is asked to stop by SIGINT (Ctrl-C in a terminal: the whole process group) or SIGTERM (snakemake
# forwards either to its running jobs, a scheduler's cancel sends it). A job that can save its state
# (pretraining) stops at its next step, saved: it polls :func:`stop_requested`. Any other job stops at once.
# Either way the first signal is the one that counts: the same request often arrives twice (from the
# terminal to the whole group, and forwarded by snakemake), and the second must not cut the state's save.

STOP_GRACE_S = 10.0  # a polling job that has not stopped this long after the request is stopped regardless
_stop = {"signal": None}


def stop_requested() -> bool:
    """True once SIGINT or SIGTERM has asked a polling job (``handle_stop_signals(poll=True)``) to stop."""
    return _stop["signal"] is not None


def stop_here(stop: bool, saved_step: int | None) -> None:
    """Where a polling job checks: KeyboardInterrupt if ``stop``, saying at which step its state was saved."""
    if stop:
        raise KeyboardInterrupt(f"{stop_signal_name()}" + (f"; state saved at step {saved_step}" if saved_step else ""))


def stop_signal_name() -> str | None:
    """The signal that asked this process to stop (SIGINT, SIGTERM), or None."""
    return signal.Signals(_stop["signal"]).name if _stop["signal"] is not None else None


@contextlib.contextmanager
def handle_stop_signals(poll: bool = False, grace_s: float = STOP_GRACE_S, restore: bool = True) -> Iterator[None]:
    """Within: SIGINT and SIGTERM stop the command: with ``poll``, at the next point where it checks
    :func:`stop_requested` (KeyboardInterrupt after ``grace_s`` if it never does); else at once
    (KeyboardInterrupt). Further stop signals are ignored. A SIGINT this process was started with
    ignored (a background job of a script) stays ignored. Left without a stop and with ``restore``, the
    handlers before are restored (a command run in-process, by a test, leaves its caller's as they were);
    after a stop, SIGINT and SIGTERM stay ignored while the process exits."""

    def first(signum, frame):
        _stop["signal"] = signum
        for each in (signal.SIGINT, signal.SIGTERM):
            signal.signal(each, signal.SIG_IGN)  # the one request counts once
        if not poll:
            raise KeyboardInterrupt(signal.Signals(signum).name)
        if hasattr(signal, "SIGALRM"):
            signal.signal(signal.SIGALRM, lambda *_: _overdue(grace_s))
            signal.setitimer(signal.ITIMER_REAL, grace_s)

    _stop["signal"] = None
    before = {}
    try:
        for each in (signal.SIGINT, signal.SIGTERM, *([signal.SIGALRM] if hasattr(signal, "SIGALRM") else [])):
            before[each] = signal.getsignal(each)
        for each in (signal.SIGINT, signal.SIGTERM):
            if not (each == signal.SIGINT and before[each] is signal.SIG_IGN):
                signal.signal(each, first)
    except ValueError:  # not the main thread: signals stay as they are
        before = {}
    try:
        yield
    finally:
        if hasattr(signal, "SIGALRM") and before:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before.pop(signal.SIGALRM))
        if restore and _stop["signal"] is None:  # once stopped, a late copy of the request must not kill the exit
            for each, handler in before.items():
                signal.signal(each, handler)


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM ignored from now on (a command whose work is done, exiting)."""
    for each in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(each, signal.SIG_IGN)


def _overdue(grace_s: float):
    raise KeyboardInterrupt(f"{stop_signal_name()}; not stopped at a step within {grace_s:g} s")
