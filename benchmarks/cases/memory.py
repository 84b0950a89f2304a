"""Peak RSS of every pretraining job of ``--config`` (one job per distinct shape, 3 recorded steps in a fresh
process; PASS at most PEAK_GIB). Transfer jobs are judged from a finished run by ``--orchestration``."""

from __future__ import annotations

import sys
from pathlib import Path

NAME = "memory"
PEAK_GIB = 2.0


MEMORY_JOB = r"""
import json, sys, torch
torch.set_num_threads(1)
from groupsparse.training.pretrain import Trainer
from groupsparse.config.specs import RunSpec
spec, seeds, steps = RunSpec.from_dict(json.loads(sys.argv[1])), json.loads(sys.argv[2]), int(sys.argv[3])
t = Trainer(spec, seeds)
active = torch.ones(len(seeds), dtype=torch.bool)
for step in range(steps):
    loss = t.rule.step(active)
    t.recorder.metrics(step, loss, active)
    t.recorder.mean_attention(step, active)
# VmHWM: this process's peak RSS (ru_maxrss would carry the parent's RSS over fork + exec)
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def run(ctx) -> list:
    """Peak RSS of every pretraining job of the default study (one job per distinct shape, a few steps with
    recording, in a fresh process). Transfer jobs are judged from a finished run by --orchestration."""
    import json
    import os
    import subprocess

    import yaml

    from groupsparse.study.runs import expand

    table, config_path = ctx.table, ctx.args.config
    runs = expand(yaml.safe_load(config_path.read_text()))
    jobs = {}
    for run in runs.values():
        for chunk in run.chunks:
            seeds = run.chunk_seeds(chunk)
            sp = run.spec
            key = json.dumps(
                [
                    sp.get("task"),
                    sp.get("dtype"),
                    sp.get("pretrain", {}).get("batch"),
                    sp.get("pretrain", {}).get("eval_size"),
                    len(seeds),
                    sp.get("model"),
                ],
                sort_keys=True,
            )
            jobs.setdefault(key, (run.name, sp, seeds))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    for name, sp, seeds in jobs.values():
        out = subprocess.run(
            [sys.executable, "-c", MEMORY_JOB, json.dumps(sp), json.dumps(seeds), "3"],
            capture_output=True,
            text=True,
            env=env,
            cwd=config_path.parent,
            check=False,
        )
        if out.returncode != 0:
            table.add(
                "memory",
                f"pretraining job {name} ({len(seeds)} seeds)",
                "-",
                ratio="FAIL",
                note=f"failed: {out.stderr.strip().splitlines()[-1][:100] if out.stderr.strip() else out.returncode}",
            )
            continue
        gib = int(out.stdout.split()[-1]) / 1024**2
        ok = gib <= PEAK_GIB
        t = sp.get("task", {})
        table.add(
            "memory",
            f"pretraining job {name} ({len(seeds)} seeds, d = {t.get('d')}, D = {t.get('D')}, {sp.get('dtype')})",
            gib,
            "GiB",
            ratio="PASS" if ok else "FAIL",
            note=f"peak RSS (VmHWM) of a fresh process, 3 recorded steps; target <= {PEAK_GIB:g} GiB",
        )
    table.add(
        "memory", "transfer jobs", "-", note="not measured here: --orchestration RESULTS reads every job's max_rss"
    )
    return []
