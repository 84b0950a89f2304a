"""What population gradient flow costs, beside population gradient descent at the same flow time (issue 41,
"Cost").

The flow (``pretrain.solver: flow``, ``training/flow.py``) integrates the invariant subspace's eight
coefficients by an implicit adaptive solver over a fixed outer sample of N inputs; population gradient descent
(``configs/population_gd.yaml``) takes tau / eta(D) steps of eta(D) = min(0.5, 6 / D) to reach flow time tau.
Per D of the grid, at flow time tau = kappa D^3:

- **the flow's side**, from one of two sources:

  * ``--from-results RESULTS`` (a flow study's results, ``configs/population.yaml``: finished or still
    running): every finished replicate of its grid run ``scale_d10_D<D>``
    (``RESULTS/pretrain/scale_d10_D<D>/seeds*.trajectory.parquet``), the counters its trajectory carries at
    the record at flow time kappa D^3 (``solver_steps``, ``field_evaluations``, ``cpu_seconds``: cumulative
    from the start; the octave ends kappa D^3, kappa a power of 2, are records, the ends of the solver's
    segments), and the peak memory of those jobs (Snakemake's ``max_rss``,
    ``RESULTS/benchmarks/pretrain/scale_d10_D<D>/seeds*.tsv``: the whole job's, to its own flow time);
  * live (default): one replicate (seed 0) of the same grid run with ``--flow-samples`` outer samples
    (LIVE_SAMPLES; its evaluation sample twice that, as the study's 4096 to 2048) to ``--flow-kappa`` D^3
    (LIVE_KAPPA), in a fresh process on ``--threads`` threads: the counters of its last record and the
    process's peak RSS (VmHWM). A quick check of the path and of the cost per evaluation, not the study's N.

  ``cpu_seconds`` is the process CPU time of the solver's segments, the records of the segments before
  included (a study job: one thread, ``--threads 1``);
- **gradient descent's side**, measured now in this process on ``--threads`` threads: the CPU seconds of a
  step of its grid run at that D (population_gd.yaml with configs/cluster/population_large_D.yaml merged over
  it; batch 128, 32 from D = 64 on; a D outside it at its rule's batch, ``workloads.population_gd_run``), as a
  run takes the steps between records, the best of several blocks of GD_STEPS steps after a warm-up; times
  tau / eta(D) steps (recordings left out: they add a few per cent to a GD run).

Printed per D: solver steps, vector-field evaluations and CPU seconds a replicate (the mean over the
replicates read), x REPLICATES replicates in CPU-hours, peak MB, gradient descent's CPU-hours for the same
flow time and replicates, and the ratio GD / flow. Read from RESULTS at kappa = 2, D = 128 and 256 are judged
against issue 41's caps (TARGET_HOURS: four replicates to 2 D^3).
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from workloads import ROOT, flow_grid_run, flow_spec, population_gd_run, spec_of, steps_as_a_run_takes_them

NAME = "flow"
d = 10
FLOW_D = (16, 64, 128, 256)  # read from a study's results (--from-results)
LIVE_D = (16, 64)  # run live (without --from-results); --quick: the first
KAPPA = 2.0  # flow time kappa D^3 read from results (issue 41: D = 128 and 256 to 2 D^3)
LIVE_KAPPA = 0.25  # a live flow's flow time / D^3
LIVE_SAMPLES, QUICK_SAMPLES = 256, 128  # a live flow's outer samples (the study's: 2048)
REPLICATES = 4  # the study's replicates per D: the CPU-hours of a D's point
TARGET_HOURS = {128: 2.0, 256: 16.0}  # CPU-hours of four replicates to 2 D^3 (issue 41)
GD_STEPS, QUICK_GD_STEPS = 300, 60  # gradient descent's steps per timed block
SEED = 0  # the live replicate


LIVE_FLOW = r"""
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[3]))
from groupsparse.config.specs import RunSpec
from groupsparse.training.flow import FlowRun
spec = RunSpec.from_dict(json.loads(sys.argv[1]))
t0 = time.perf_counter()
traj = FlowRun(spec, [int(sys.argv[2])]).run().trajectory
wall = time.perf_counter() - t0
last = traj[traj["record"].isin(("grid", "final"))].sort_values("flow_time", kind="stable").iloc[-1]
# VmHWM: this process's peak RSS (ru_maxrss would carry the parent's RSS over fork + exec)
peak_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({
    "flow_time": float(last["flow_time"]), "solver_steps": int(last["solver_steps"]),
    "field_evaluations": int(last["field_evaluations"]), "cpu_seconds": float(last["cpu_seconds"]),
    "samples": int(last["samples"]), "peak_mb": peak_kb / 1024, "wall": wall,
    "process_cpu": time.process_time(),
}))
"""


def run(ctx) -> list:
    """Per D: the flow's side (from --from-results, or live), gradient descent's measured now; the rows, the
    per-D table; targets at D = 128 and 256 where the results give 2 D^3."""
    args = ctx.args
    results = getattr(args, "from_results", None)
    Ds = args.flow_D or (FLOW_D if results else LIVE_D[:1] if args.quick else LIVE_D)
    kappa = args.flow_kappa or (KAPPA if results else LIVE_KAPPA)
    lines, targets = [], []
    for D in Ds:
        tau = kappa * D**3
        fl = recorded(results, D, tau) if results else live(ctx, D, tau)
        gd = gd_step(ctx, D)
        gd_steps = math.ceil(tau / gd["eta"] - 1e-9)
        gd_hours = REPLICATES * gd_steps * gd["seconds"] / 3600
        source = f"from {results}" if results else f"live, seed {SEED}"
        gd_note = (
            f"GD {gd['seconds'] * 1e3:.4g} CPU ms a step (batch {gd['batch']}, eta {gd['eta']:.4g}, {gd['kernel']}; "
            f"median {gd['median'] * 1e3:.4g}) x {gd_steps:,} steps x {REPLICATES} = {gd_hours:.3g} CPU-h"
        )
        if fl is None:
            ctx.table.add(
                "flow",
                f"D = {D}: flow to {kappa:g} D^3 ({source})",
                "-",
                note=f"no finished replicate reaches flow time {tau:g}; {gd_note}",
            )
            lines.append(table_line(D, None, gd, gd_steps, gd_hours))
            continue
        hours = REPLICATES * fl["cpu_seconds"] / 3600
        ratio = gd_hours / hours if hours > 0 else math.inf
        ctx.table.add(
            "flow",
            f"D = {D}: flow to {kappa:g} D^3, {REPLICATES} replicates ({source})",
            hours,
            "CPU-h",
            ratio=ratio,
            note=f"{fl['solver_steps']:.0f} solver steps, {fl['field_evaluations']:.0f} evaluations, "
            f"{fl['cpu_seconds']:.4g} CPU s a replicate (mean of {fl['replicates']}{fl['spread']}), "
            f"N = {fl['samples']}, peak {fl['peak_mb']:.0f} MB; {gd_note}; ratio = GD / flow",
        )
        lines.append(table_line(D, fl, gd, gd_steps, gd_hours))
        if results and kappa == KAPPA and D in TARGET_HOURS:
            name = f"flow CPU-hours, D = {D}, {REPLICATES} replicates to {kappa:g} D^3 (N = {fl['samples']}, recorded)"
            targets.append((name, hours, TARGET_HOURS[D], "CPU-h", "<="))
    print_table(lines, kappa, results)
    return targets


# -- the flow's side ----------------------------------------------------------------------------------------
def recorded(results: Path, D: int, tau: float) -> dict | None:
    """The flow's counters at flow time ``tau`` in the grid run's finished replicates, and its jobs' peak memory;
    None when no finished replicate has a record there."""
    import pandas as pd

    run = f"scale_d{d}_D{D}"
    columns = ["seed", "flow_time", "record", "solver_steps", "field_evaluations", "cpu_seconds", "samples"]
    reps = []
    for path in sorted((Path(results) / "pretrain" / run).glob("seeds*.trajectory.parquet")):
        traj = pd.read_parquet(path, columns=columns)
        at = traj[traj["record"].isin(("grid", "final")) & ((traj["flow_time"] - tau).abs() <= 1e-9 * tau)]
        reps += [g.iloc[0] for _, g in at.groupby("seed", sort=True)]
    if not reps:
        return None
    peaks = [
        max(number(r.get("max_rss")) for r in rows)
        for tsv in sorted((Path(results) / "benchmarks" / "pretrain" / run).glob("seeds*.tsv"))
        if (rows := read_tsv(tsv))
    ]
    cpu = [float(r["cpu_seconds"]) for r in reps]
    spread = f", {min(cpu):.4g} to {max(cpu):.4g}" if len(cpu) > 1 else ""
    return {
        "solver_steps": statistics.mean(int(r["solver_steps"]) for r in reps),
        "field_evaluations": statistics.mean(int(r["field_evaluations"]) for r in reps),
        "cpu_seconds": statistics.mean(cpu),
        "samples": "/".join(sorted({str(int(r["samples"])) for r in reps})),
        "peak_mb": max(peaks) if peaks else math.nan,
        "flow_time": tau,
        "replicates": len(reps),
        "spread": spread,
    }


def read_tsv(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def number(x) -> float:
    """A benchmark file's cell as a number (Snakemake writes NA where it could not measure)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def live(ctx, D: int, tau: float) -> dict:
    """One replicate of the grid run at D, ``--flow-samples`` outer samples, to flow time ``tau``, in a fresh
    process (its peak RSS is the flow's own)."""
    args = ctx.args
    N = args.flow_samples or (QUICK_SAMPLES if args.quick else LIVE_SAMPLES)
    spec = flow_spec(flow_grid_run(D, d), samples=N, eval_samples=2 * N, flow_time=float(tau))
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, "-c", LIVE_FLOW, json.dumps(spec.to_dict()), str(SEED), str(args.threads)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the live flow at D = {D} failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if abs(got["flow_time"] - tau) > 1e-9 * tau:
        raise RuntimeError(f"the live flow at D = {D} stopped at flow time {got['flow_time']:g}, not {tau:g}")
    return got | {"replicates": 1, "spread": f", {got['wall']:.1f} s wall"}


# -- gradient descent's side --------------------------------------------------------------------------------
def gd_step(ctx, D: int) -> dict:
    """CPU seconds of a step of population gradient descent's grid run at D, one seed, as a run takes them:
    the best and the median of several blocks after a warm-up."""
    from groupsparse.training.pretrain import Trainer

    torch, args = ctx.torch, ctx.args
    run = population_gd_run(D, d)
    trainer = Trainer(spec_of(run), [0])
    n = QUICK_GD_STEPS if args.quick else GD_STEPS
    steps_as_a_run_takes_them(torch, trainer, max(n // 4, 1))  # warm-up: the loops' compilation
    per_step = []
    for _ in range(max(3, args.repeats // 3)):
        c0 = time.process_time()
        steps_as_a_run_takes_them(torch, trainer, n)
        per_step.append((time.process_time() - c0) / n)
    return {
        "seconds": min(per_step),
        "median": statistics.median(per_step),
        "batch": trainer.spec.pretrain.batch,
        "eta": trainer.eta,
        "kernel": trainer.plan.kernel,
    }


# -- the table ----------------------------------------------------------------------------------------------
HEADER = (
    "D", "N", "reps", "flow time", "solver steps", "evaluations", "CPU s/rep", f"x{REPLICATES} CPU-h", "peak MB",
    "GD ms/step", "GD batch", "GD steps", f"GD x{REPLICATES} CPU-h", "GD / flow",
)  # fmt: skip


def table_line(D, fl, gd, gd_steps, gd_hours) -> list[str]:
    gd_cells = [f"{gd['seconds'] * 1e3:.4g}", str(gd["batch"]), f"{gd_steps:,}", f"{gd_hours:.4g}"]
    if fl is None:
        return [str(D), "-", "0", "-", "-", "-", "-", "-", "-", *gd_cells, "-"]
    hours = REPLICATES * fl["cpu_seconds"] / 3600
    return [
        str(D), str(fl["samples"]), str(fl["replicates"]), f"{fl['flow_time']:.6g}",
        f"{fl['solver_steps']:.0f}", f"{fl['field_evaluations']:.0f}", f"{fl['cpu_seconds']:.4g}", f"{hours:.4g}",
        f"{fl['peak_mb']:.0f}", *gd_cells, f"{gd_hours / hours:.3g}" if hours > 0 else "-",
    ]  # fmt: skip


def print_table(lines: list[list[str]], kappa: float, results) -> None:
    where = f"read from {results}" if results else "live, one replicate"
    print(
        f"\nflow to {kappa:g} D^3 ({where}) against population gradient descent to the same flow time "
        f"(measured now); CPU-h for {REPLICATES} replicates:"
    )
    rows = [list(HEADER), *lines]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    for r in rows:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)), flush=True)
