"""Progress lines for long jobs, with an estimate of the time left, written to the job's log.

One format, read back by `groupsparse status`:
    progress: 1200/3000 steps (40%), 12 s elapsed, about 18 s left
The estimate assumes the remaining units cost what the finished ones did on average; a job
whose units grow in cost (transfer: larger n) counts work units rather than items. The pace is
measured from the first update on (its time and count): a job resumed at step 59000 of 110592 reports
the pace of this process's steps, not 59000 steps in its first second.
"""

from __future__ import annotations

import re
import sys
import time

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
