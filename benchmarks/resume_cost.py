#!/usr/bin/env python
"""Cost of a resume state at the end of a D = 64 theorem-size run: 5 seeds, d = 10, 2 D^3 steps,
eval rows every 16 steps and 6 attention matrices. Prints the rows saved, the file size, the first save
(every row converted), a later save (only the rows added since), and the load.

    python benchmarks/resume_cost.py
"""

from __future__ import annotations

import os
import tempfile
import time

import torch
from workloads import run_spec

from groupsparse.training.pretrain import Trainer
from groupsparse.training.recording import record_steps


def main() -> None:
    torch.set_num_threads(1)
    steps, D = 2 * 64**3, 64
    spec = run_spec("float32", steps=steps, task={"d": 10, "D": D}, pretrain={"batch": 512, "record_every": 16})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.safetensors")
        tr = Trainer(spec, list(range(5)), resume_path=path)
        loss, active = torch.zeros(5), torch.ones(5, dtype=torch.bool)
        one = tr.recorder.metrics(0, loss, active)
        rows = [dict(r, step=s) for s in record_steps(steps, 16) for r in one]
        att = tr.recorder.mean_attention(0, active) * 6
        tr.guard.check(0, torch.full((5,), 0.69), [True] * 5)
        tr.recorder.rows, tr.recorder.attention_rows = rows[:-5], att
        t0 = time.perf_counter()
        tr.resume.save(steps - 16, tr.rule, tr.guard, tr.recorder)
        t1 = time.perf_counter()
        tr.recorder.rows = rows
        tr.resume.save(steps, tr.rule, tr.guard, tr.recorder)
        t2 = time.perf_counter()
        meta = tr.resume.read(tr.rule, tr.device)
        t3 = time.perf_counter()
        assert meta["rows"] == rows
        print(f"{len(rows)} rows, {len(att)} attention rows, {os.path.getsize(path) / 1e6:.1f} MB")
        print(f"first save {t1 - t0:.2f} s, next save {t2 - t1:.2f} s, load {t3 - t2:.2f} s")


if __name__ == "__main__":
    main()
