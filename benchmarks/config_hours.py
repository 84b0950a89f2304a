#!/usr/bin/env python
"""Expected CPU-hours of the pretraining in each shipped config, from step costs measured here.

    python benchmarks/config_hours.py                          # config.yaml and configs/*.yaml
    python benchmarks/config_hours.py configs/scaling.yaml --markdown hours.md

For every pretraining job of a config (``groupsparse.study.runs.expand``: tasks, scaling grid, ablations; one
job per seed chunk) the job's distinct shape (d, D, batch, dtype, eval size, model, sampling) is
measured once, one seed on one thread: the training step (``Steps.step``: draw, gradients, descent),
one recording (``metrics``) and one attention checkpoint (``mean_attention``). A job then costs

    seeds x (steps x step + recordings x record + checkpoints x attention)   CPU-seconds

(seeds are independent and cost the same alone or batched, on one thread or on seed workers).
Image tasks are measured as a synthetic task of the same shape and sampling (the kernel is the same;
their draw is a gather of stored images). Transfer jobs are not included.

GPU-hours are an estimate, not a measurement: the study's one GPU-time model (``groupsparse.costs``:
``pretrain_cost(..., device="cuda")``, the figure Slurm requests are sized from, GPU_ASSUMPTIONS);
benchmarks/gpu_check.py measures the real figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(torch, spec, repeats: int) -> dict[str, float]:
    from groupsparse.training.pretrain import Trainer

    t = Trainer(spec, [0])
    active = torch.ones(1, dtype=torch.bool)
    t.rule.step(active)
    loss = t.rule.step(active)

    def best(fn, n):
        out = float("inf")
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out = min(out, time.perf_counter() - t0)
        return out

    return {
        "step": best(lambda: t.rule.step(active), repeats),
        "record": best(lambda: t.recorder.metrics(1, loss, active), 3),
        "attention": best(lambda: t.recorder.mean_attention(1, active), 2),
    }


def synthetic_twin(spec_dict: dict) -> dict:
    """An image task's run spec as a synthetic task of the same (d, D) (same kernel cost)."""
    task = spec_dict.get("task", {})
    if task.get("kind") != "images":
        return spec_dict
    from groupsparse.config.specs import RunSpec

    image_spec = RunSpec.from_dict(spec_dict).task
    return {**spec_dict, "task": {"d": image_spec.d, "D": image_spec.D}}


def config_hours(torch, path: Path, repeats: int, cache: dict) -> list[dict]:
    import yaml

    from groupsparse import costs
    from groupsparse.config.specs import RunSpec
    from groupsparse.study.runs import expand
    from groupsparse.training.pretrain import attention_steps, record_steps

    config = yaml.safe_load(path.read_text())
    rows = []
    for run in expand(config).values():
        spec_dict = synthetic_twin(run.spec)
        spec = RunSpec.from_dict({**spec_dict, "device": "cpu"})
        p, ts = spec.pretrain, spec.task
        key = json.dumps(
            [ts.d, ts.D, p.batch, p.eval_size, spec.dtype, spec_dict.get("model"), p.sampling, p.gradient],
            sort_keys=True,
            default=str,
        )
        if key not in cache:
            cache[key] = measure(torch, RunSpec.from_dict({**spec.to_dict(), "device": "cpu"}), repeats)
        c = cache[key]
        n_rec, n_att = (
            len(record_steps(p.steps, p.record_every)),
            len(attention_steps(p.steps, p.attention_checkpoints)),
        )
        seeds = len(run.seeds)
        cpu_s = seeds * (p.steps * c["step"] + n_rec * c["record"] + n_att * c["attention"])
        gpu_s = costs.pretrain_cost(run.spec, seeds, device="cuda").wall_s  # the cost model's GPU estimate
        rows.append(
            {
                "config": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
                "run": run.name,
                "d": ts.d,
                "D": ts.D,
                "batch": p.batch,
                "dtype": spec.dtype,
                "seeds": seeds,
                "steps": p.steps,
                "step_ms": 1e3 * c["step"],
                "cpu_h": cpu_s / 3600,
                "gpu_h": gpu_s / 3600,
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", type=Path)
    ap.add_argument("--repeats", type=int, default=3, help="timed steps per shape, best kept (default 3)")
    ap.add_argument("--markdown", type=Path, default=None)
    args = ap.parse_args(argv)
    configs = args.configs or [ROOT / "config.yaml", *sorted((ROOT / "configs").glob("*.yaml"))]
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    torch.set_num_threads(1)
    cache: dict = {}
    lines = [
        (
            "| config | runs | seeds x steps | pretraining CPU-hours (measured step costs) | "
            "GPU-hours (estimate) | largest run |"
        ),
        "| --- | --- | --- | --- | --- | --- |",
    ]
    detail = [
        "| config | run | d | D | batch | dtype | seeds | steps | ms / seed-step | CPU-h | GPU-h (est.) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in configs:
        rows = config_hours(torch, path.resolve(), args.repeats, cache)
        for r in rows:
            detail.append(
                f"| {r['config']} | {r['run']} | {r['d']} | {r['D']} | {r['batch']} | {r['dtype']} | "
                f"{r['seeds']} | {r['steps']} | {r['step_ms']:.2f} | {r['cpu_h']:.3f} | {r['gpu_h']:.3f} |"
            )
        big = max(rows, key=lambda r: r["cpu_h"])
        lines.append(
            f"| {rows[0]['config']} | {len(rows)} | {sum(r['seeds'] * r['steps'] for r in rows):,} | "
            f"{sum(r['cpu_h'] for r in rows):.2f} | {sum(r['gpu_h'] for r in rows):.2f} | "
            f"{big['run']} ({big['cpu_h']:.2f} CPU-h) |"
        )
        print(lines[-1], flush=True)
    out = "\n".join(lines) + "\n\n" + "\n".join(detail)
    print("\n" + out)
    if args.markdown:
        args.markdown.write_text(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
