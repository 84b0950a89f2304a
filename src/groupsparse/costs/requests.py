"""What the scheduler is asked for: per-job requests, the parse-time memory check, study totals."""

from __future__ import annotations

import math

from ..config.schema import default_of
from .model import (
    GPU_TIME_MARGIN,
    MEM_FLOOR_MB,
    MEM_MARGIN,
    TIME_FLOOR_MIN,
    TIME_MARGIN,
    Cost,
    pretrain_cost,
    transfer_cost,
)

__all__ = [
    "DEFAULT_MEM_LIMIT_MB",
    "SMALL_JOBS",
    "check_memory",
    "estimate_study",
    "pretrain_request",
    "request",
    "run_key",
    "transfer_request",
]

# -- requests for the scheduler ----------------------------------------------------------


def request(cost: Cost) -> dict:
    """Snakemake ``resources`` for a job: runtime (minutes) = TIME_MARGIN x predicted one-thread
    CPU time + TIME_FLOOR_MIN on a CPU (the thread speed-up is not measured, so a request
    assumes none), GPU_TIME_MARGIN x the GPU estimate on cuda; mem_mb = MEM_MARGIN x predicted
    + MEM_FLOOR_MB."""
    seconds, margin = (cost.cpu_s, TIME_MARGIN) if cost.measured else (cost.wall_s, GPU_TIME_MARGIN)
    return {
        "runtime": int(math.ceil(margin * seconds / 60 + TIME_FLOOR_MIN)),
        "mem_mb": int(math.ceil(MEM_MARGIN * cost.mem_mb + MEM_FLOOR_MB)),
    }


def _capped(req: dict, max_mem_mb: int | None) -> dict:
    """The memory request trimmed to ``max_mem_mb`` (the prediction fits: check_memory refuses
    a study otherwise; only the margin goes)."""
    return req if max_mem_mb is None else req | {"mem_mb": min(req["mem_mb"], int(max_mem_mb))}


def pretrain_request(
    run, chunk: str, device: str | None = None, threads: int = 1, max_mem_mb: int | None = None
) -> dict:
    """``resources`` of the pretrain rule for ``run`` (a study.Run) and seed ``chunk`` ("lo-hi")."""
    return _capped(request(pretrain_cost(run.spec, len(run.chunk_seeds(chunk)), device, threads)), max_mem_mb)


def transfer_request(
    run, chunk: str, group: str, device: str | None = None, threads: int = 1, max_mem_mb: int | None = None
) -> dict:
    """``resources`` of the transfer rule for ``run``, seed ``chunk`` and method ``group``."""
    methods = run.method_groups[group]
    cost = transfer_cost(run.spec, run.transfer, methods, run.sizes, len(run.chunk_seeds(chunk)), device, threads)
    return _capped(request(cost), max_mem_mb)


def run_key(run) -> str:
    """The config key a run comes from (for messages)."""
    if run.role == "scaling":
        return f"scaling[{run.name}]"
    if run.role == "ablation":
        return "ablations" if run.name == "ablation_none" else f"ablations.variants.{run.name[len('ablation_') :]}"
    return f"tasks.{run.name}"


# The schema's jobs.max_mem_mb: a node most partitions offer; the workflow passes the study's own.
DEFAULT_MEM_LIMIT_MB = default_of("jobs.max_mem_mb")


def check_memory(runs: dict, limit_mb: float | None = DEFAULT_MEM_LIMIT_MB, declared: dict | None = None) -> list[str]:
    """Jobs whose estimated memory exceeds ``limit_mb`` or their declared mem_mb: one line each.

    ``runs``: study.expand's result; ``limit_mb``: None for no limit; ``declared``: optional
    {("pretrain"|"transfer", run): mem_mb}. Fast (milliseconds for the scaling study).
    The estimate is the model's prediction without margin, so a refusal is a job that the
    model expects to need more, not one that merely requests more.
    """
    problems = []
    declared = declared or {}
    for name, run in runs.items():
        t, p = run.spec["task"], run.spec["pretrain"]
        chunk = max(run.chunks, key=lambda ch: len(run.chunk_seeds(ch)))
        jobs = [
            (
                "pretrain",
                pretrain_cost(run.spec, len(run.chunk_seeds(chunk)), "cpu"),
                f"task.D = {t['D']}, task.d = {t['d']}, pretrain.batch = {p['batch']}, "
                f"pretrain.eval_size = {p['eval_size']}, {len(run.chunk_seeds(chunk))} seeds per job",
            )
        ]
        if run.transfer is not None:
            for group, methods in run.method_groups.items():
                jobs.append(
                    (
                        f"transfer ({group})",
                        transfer_cost(run.spec, run.transfer, methods, run.sizes, len(run.chunk_seeds(chunk)), "cpu"),
                        f"task.D = {t['D']}, task.d = {t['d']}, transfer.test_size = "
                        f"{run.transfer.get('test_size', 10000)}, largest transfer size {max(run.sizes)}",
                    )
                )
        for kind, cost, why in jobs:
            cap = declared.get((kind.split(" ")[0], name))
            for bound, label in ((limit_mb, "the memory limit"), (cap, "its declared mem_mb")):
                if bound is not None and cost.mem_mb > bound:
                    problems.append(
                        f"{run_key(run)}: the {kind} job of run {name} needs about "
                        f"{cost.mem_mb:,.0f} MB (estimated from {why}), over {label} of {bound:,.0f} MB"
                    )
                    break
    return problems


# -- a whole study ---------------------------------------------------------------------------

# Small jobs, not measured by benchmarks/measure_costs.py: stated constants (CPU seconds, MB).
SMALL_JOBS = {
    "aggregate": (60.0, 1500.0),
    "figures": (60.0, 1500.0),
    "scaling": (180.0, 2000.0),
    "image_figures": (30.0, 1500.0),
}


def estimate_study(runs: dict, device: str = "cpu", pretrain_threads: int = 1, transfer_threads: int = 1) -> list[dict]:
    """One row per (rule, run): jobs, predicted per-job CPU minutes, wall minutes, mem_mb and
    totals. GPU rows carry ``note`` = GPU_NOTE."""
    rows = []
    for name, run in runs.items():
        pre = [pretrain_cost(run.spec, len(run.chunk_seeds(ch)), device, pretrain_threads) for ch in run.chunks]
        rows.append(_row("pretrain", name, pre))
        if run.transfer is not None:
            for group, methods in run.method_groups.items():
                tr = [
                    transfer_cost(
                        run.spec, run.transfer, methods, run.sizes, len(run.chunk_seeds(ch)), device, transfer_threads
                    )
                    for ch in run.chunks
                ]
                rows.append(_row(f"transfer:{group}", name, tr))
    return rows


def _row(rule: str, run: str, costs_: list[Cost]) -> dict:
    n = len(costs_)
    return {
        "rule": rule,
        "run": run,
        "jobs": n,
        "device": costs_[0].device,
        "cpu_min_per_job": max(c.cpu_s for c in costs_) / 60,
        "wall_min_per_job": max(c.wall_s for c in costs_) / 60,
        "mem_mb_per_job": max(c.mem_mb for c in costs_),
        "cpu_hours": sum(c.cpu_s for c in costs_) / 3600,
        "device_hours": sum(c.wall_s for c in costs_) / 3600,
        "request": request(max(costs_, key=lambda c: c.wall_s)),
        "note": costs_[0].note,
    }
