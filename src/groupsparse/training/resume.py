"""Resume states: a killed pretraining job continues from its last saved step, to the same bits.

A state is saved every ``resume_every`` steps and at least every ``resume_seconds`` of wall time, before
the step's batch is drawn: the descent rule's state (parameters, generators, the update's own), the
divergence checks' and the rows recorded so far. A state of another science hash or other seeds, or one
that cannot be read, is ignored (training restarts from scratch); the file is removed when the run ends.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..io import files as io
from .divergence import Divergence
from .recording import ATT_COLUMNS, Recorder

# A resume state at least this often (wall time), besides every ``resume_every`` steps: a killed D = 64 run
# (seconds per step with 5 seeds) loses at most this much work whatever resume_every says.
RESUME_SECONDS = 120.0


def rows_of(table: torch.Tensor, columns: list[str], ints: set[str]) -> list[dict]:
    """Rows saved as a float64 matrix back as dicts, the integer columns as int."""
    return [{c: int(x) if c in ints else x for c, x in zip(columns, r)} for r in table.tolist()]


class ResumeStore:
    """The resume state of a run (``path``; None: none is kept) of ``steps`` steps."""

    def __init__(
        self,
        path: str | Path | None,
        every: int,
        seconds: float | None,
        science_hash: str,
        seeds: list[int],
        steps: int,
    ):
        self.path = Path(path) if path else None
        self.every, self.seconds, self.science_hash, self.seeds, self.steps = every, seconds, science_hash, seeds, steps
        self.start = 0  # the step the run started (or resumed) at
        self.saved = time.perf_counter()  # wall time of the last state (or the start)
        self._tables: dict[str, tuple[int, torch.Tensor]] = {}  # see _table

    def due(self, step: int) -> bool:
        """Whether a state is saved before step ``step``'s batch is drawn."""
        if not (self.path and self.start < step < self.steps):
            return False
        late = self.seconds is not None and time.perf_counter() - self.saved >= self.seconds
        return step % self.every == 0 or late

    def holds_work(self, step: int) -> bool:
        """Whether a state saved before step ``step`` keeps work that this process did (a stop's save)."""
        return bool(self.path and self.start < step)

    def next_save(self, step: int) -> int:
        """The first step after ``step`` with a state by count (the run's end where none is kept)."""
        return (step // self.every + 1) * self.every if self.path else self.steps

    def save(self, step: int, rule, guard: Divergence, recorder: Recorder) -> None:
        tensors, rule_meta = rule.state()
        # the recorded rows as float64 matrices (exact for their floats and integer ids), not JSON: a D = 64
        # run records some 10^5 rows, which as JSON would near safetensors' 100 MB header limit
        rows, att_rows = recorder.rows, recorder.attention_rows
        cols = list(rows[0]) if rows else []
        tensors["rows"] = self._table("rows", rows, cols)
        tensors["attention_rows"] = self._table("attention_rows", att_rows, ATT_COLUMNS)
        meta = {
            "science_hash": self.science_hash,
            "seeds": self.seeds,
            "step": step,
            "row_columns": cols,
            "int_columns": [c for c in cols if isinstance(rows[0][c], int)],
            **guard.state(),
            **rule_meta,
        }
        io.save_checkpoint(self.path, tensors, meta)
        self.saved = time.perf_counter()

    def _table(self, key: str, rows: list[dict], cols: list[str]) -> torch.Tensor:
        """``rows`` as a float64 matrix, converting only the rows added since the last call: the lists only
        grow, and converting a D = 64 run's 10^5 rows anew would take seconds at every save."""
        done, table = self._tables.get(key, (0, torch.zeros(0, len(cols), dtype=torch.float64)))
        if done > len(rows) or table.shape[1] != len(cols):
            done, table = 0, torch.zeros(0, len(cols), dtype=torch.float64)
        new = torch.tensor([[row[c] for c in cols] for row in rows[done:]], dtype=torch.float64)
        table = torch.cat([table, new.reshape(len(rows) - done, len(cols))])
        self._tables[key] = (len(rows), table)
        return table

    def load(self, rule, guard: Divergence, recorder: Recorder, device) -> int:
        """Restores the saved state, if there is one of this run: the step it was saved at (else 0)."""
        meta = self.read(rule, device)
        if meta is not None:
            self.start = meta["step"]
            recorder.rows = [{c: row[c] for c in meta["row_columns"]} for row in meta["rows"]]
            recorder.attention_rows = meta["attention_rows"]
            guard.load(meta)
        self.saved = time.perf_counter()
        return self.start

    def read(self, rule, device) -> dict | None:
        """The saved state's metadata with its rows (the rule restored from it); None where there is none."""
        if not (self.path and self.path.exists()):
            return None
        try:
            tensors, meta = io.load_checkpoint(self.path)
        except io.InputError:
            return None  # a state we cannot read is discarded: training restarts from scratch
        if meta.get("science_hash") != self.science_hash or meta.get("seeds") != self.seeds:
            return None
        rule.load(tensors, meta, device)
        if "rows" not in meta:  # rows stored as tensors (a state written before they were is JSON)
            ints = set(meta["int_columns"])
            meta["rows"] = rows_of(tensors["rows"], meta["row_columns"], ints)
            meta["attention_rows"] = rows_of(tensors["attention_rows"], ATT_COLUMNS, {"seed", "step", "key", "query"})
        return meta

    def remove(self) -> None:
        if self.path and self.path.exists():
            self.path.unlink()


class FlowResumeFile:
    """The resume state of a population-flow run (``training/flow.py``): each seed's state at the end of its
    last finished segment, as metadata, and its recorded rows as float64 matrices. Saved after every segment,
    so a resumed flow takes the same solver steps as an uninterrupted one (the same bits)."""

    def __init__(self, path: str | Path | None, science_hash: str, seeds: list[int]):
        self.path = Path(path) if path else None
        self.science_hash, self.seeds = science_hash, seeds

    def save(self, states: list[dict | None], rows: list[torch.Tensor | None]) -> None:
        """``states``: per seed its metadata (with ``row_columns``) or None (not started); ``rows`` its rows."""
        if not self.path:
            return
        tensors = {f"rows.{i}": r for i, r in enumerate(rows) if r is not None}
        meta = {"science_hash": self.science_hash, "seeds": self.seeds, "states": states}
        io.save_checkpoint(self.path, tensors or {"none": torch.zeros(1)}, meta)

    def load(self) -> list[tuple[dict, torch.Tensor] | None]:
        """Per seed its saved metadata and rows, or None: all None where no state of this run can be read."""
        empty = [None] * len(self.seeds)
        if not (self.path and self.path.exists()):
            return empty
        try:
            tensors, meta = io.load_checkpoint(self.path)
        except io.InputError:
            return empty  # a state we cannot read is discarded: the flow restarts
        if meta.get("science_hash") != self.science_hash or meta.get("seeds") != self.seeds:
            return empty
        return [None if m is None else (m, tensors[f"rows.{i}"]) for i, m in enumerate(meta["states"])]

    def remove(self) -> None:
        if self.path and self.path.exists():
            self.path.unlink()
