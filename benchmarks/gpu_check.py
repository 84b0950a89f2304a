#!/usr/bin/env python
"""GPU check: run from the repository root on a machine with a CUDA device.

    python benchmarks/gpu_check.py                 # everything, about 5 minutes on one recent GPU
    python benchmarks/gpu_check.py --skip workflow # tests and benchmark only
    python benchmarks/gpu_check.py --cpu-dry-run   # the benchmark part on a CPU (a smoke test, no GPU)

1. the tests written for CUDA (`pytest -k cuda tests/unit/test_fastpath.py tests/unit/test_pretrain.py
   tests/unit/test_symmetric.py`): the fast path
   on the device keeps v2 and W's cross blocks exactly 0 with antithetic batches, batched seeds equal
   single seeds and reruns equal runs bit for bit, and the device computes the CPU's numbers on the same
   samples;
2. the tiny config on the device: `snakemake --configfile configs/tiny.yaml --config device=cuda` in a
   scratch directory;
3. the benchmark at the largest scaling point (d = 40, D = 64, float64, batch 1024, 5 seeds: one job of
   configs/scaling.yaml) and at the default size (float32, d = D = 10, batch 2048, 5 seeds): steps per
   second, and the share of the GPU's matmul peak measured here (torch.mm, square 8192) by the dense
   FLOP count (what benchmarks/bench.py reports on a CPU) and by the kernel's own FLOP model;
4. the theorem test's points: d = 10, D = 32 and 64, float32, batch 512, 5 seeds batched, on the
   symmetric-subspace kernel (model/symmetric.py, pure torch on a GPU): steps/s and the projected
   hours of the D = 64 point (5 seeds x 2 D^3 steps);
5. population mode (pretrain.gradient: population) at D = 64, 96 and 128: the runs of
<<<<<<< HEAD
   configs/population_gd.yaml and configs/cluster/population_large_D.yaml (batch 128 and the batch check's
   512, one seed a job): ms per seed-step and the hours of each point's steps.
=======
   configs/population_gd.yaml and configs/cluster/population_large_D.yaml (batch 32 and the batch check's
   128, one seed a job): ms per seed-step and the hours of each point's steps.
>>>>>>> flowbench

Each implementation is chosen by ``dispatch.plan`` (or, for the general kernel's two forms of its
contractions, passed to the trainer's step as a callable); no module setting is changed.

Exits 1 if a test or the workflow fails. Nothing here needs a network.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sh(cmd: list[str], **kw) -> int:
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, **kw)
    print(f"-> exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
    return rc


DEVICE = "cuda"


def sync(torch) -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def matmul_peak(torch, dtype, n: int = 8192, repeats: int = 10) -> float:
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    a @ b
    sync(torch)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        sync(torch)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def run_spec(d: int, D: int, dtype: str, batch: int, **pretrain):
    from groupsparse.config.specs import RunSpec

    return RunSpec.from_dict(
        {
            "study_seed": 20250411,
            "task_name": "gpu_check",
            "dtype": dtype,
            "device": DEVICE,
            "task": {"d": d, "D": D},
            "pretrain": {"steps": 10, "batch": batch, "eval_size": 256, **pretrain},
        }
    )


def step_rate(torch, spec, seeds: int, kernel=None, seconds: float = 5.0) -> float:
    """Training steps per second of ``seeds`` seeds batched in one Trainer: its own step by the plan
    ``dispatch.plan`` gives (``kernel`` a kernel name: that one forced), or ``kernel`` a callable with
    ``fastpath.seed_loss_and_grads``'s signature run in the trainer's draw and descent
    (``workloads.kernel_step``)."""
    from workloads import kernel_step

    from groupsparse.model import dispatch
    from groupsparse.training.pretrain import Trainer

    plan = dispatch.plan(spec, kernel=kernel) if isinstance(kernel, str) else None
    trainer = Trainer(spec, list(range(seeds)), plan=plan)
    active = torch.ones(seeds, dtype=torch.bool)

    def step():
        if callable(kernel):
            kernel_step(torch, trainer, kernel, active, 1)
        else:
            trainer.rule.step(active)

    for _ in range(3):
        step()
    sync(torch)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        steps += 1
        if steps % 10 == 0:
            sync(torch)
    sync(torch)
    return steps / (time.perf_counter() - t0)


def contractions(batched: bool):
    """The general kernel's torch form with its two per-sample contractions as one batched einsum
    (``batched``, a GPU's default) or as loops of multiply-adds (a CPU's)."""
    from groupsparse.model import fastpath

    def kernel(W, v, X, y, P, scale, antithetic):
        return fastpath.seed_loss_and_grads(W, v, X, y, P, scale, antithetic, batched=batched)

    return kernel


def benchmark(torch) -> None:
    n = 8192 if DEVICE == "cuda" else 1024
    seconds = 5.0 if DEVICE == "cuda" else 1.0
    peaks = {dt: matmul_peak(torch, getattr(torch, dt), n) for dt in ("float32", "float64")}
    if DEVICE == "cuda":
        print(
            f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
            f"TF32 matmul allowed: {torch.backends.cuda.matmul.allow_tf32}"
        )
    for dt, g in peaks.items():
        print(f"measured matmul peak (torch.mm {n}^2) {dt}: {g:,.0f} GFLOP/s")
    rows = Rows(peaks)
    general_rows(torch, rows, seconds)
    theorem_rows(torch, rows, seconds)
    population_rows(torch, rows, seconds)
    rows.print()


class Rows:
    """The benchmark's rows: steps/s, ms a seed-step, shares of the measured matmul peak."""

    def __init__(self, peaks: dict):
        self.peaks, self.rows = peaks, []

    def add(self, label, spec, S, rate, own):
        """``own``: the kernel's FLOPs of one seed-step (the dense formula's beside it)."""
        from groupsparse.model.kernel_flops import dense_flops

        dense, kern = S * dense_flops(spec.pretrain.batch, spec.task.D, spec.task.d), S * own
        peak = self.peaks[spec.dtype]
        self.rows.append((label, rate, 1e3 / rate / S, 100 * rate * dense / 1e9 / peak, 100 * rate * kern / 1e9 / peak))

    def print(self) -> None:
        columns = (
            "case | steps/s | ms per seed-step | % of the matmul peak (dense FLOPs) | % of the peak (kernel's FLOPs)"
        )
        print(f"\n| {columns} |")
        print("| --- | --- | --- | --- | --- |")
        for case, rate, ms, p_dense, p_kern in self.rows:
            print(f"| {case} | {rate:.1f} | {ms:.3f} | {p_dense:.1f} | {p_kern:.1f} |")
        print(
            "\nGPU-hours of a config: steps x seeds x points / (steps/s x seeds per job) / 3600 per job shape; "
            "compare benchmarks/config_hours.py's GPU-hours (estimates made without a GPU)."
        )


def own_flops(spec) -> int:
    """One seed-step's FLOPs by the kernel the dispatch gives ``spec`` (its own model, ``dispatch.step_flops``)."""
    from groupsparse.model import dispatch

    t, B = spec.task, spec.pretrain.batch
    return dispatch.step_flops(dispatch.plan(spec), B, t.D, t.d, t.d + t.D)


def general_rows(torch, rows: Rows, seconds: float) -> None:
    """The largest scaling point and the default size: the general kernel's two forms of its contractions,
    and the largest point's own kernel from the zero start (the symmetric one from D = 24 on)."""
    from groupsparse.model import dispatch, kernel_flops

    for d, D, dt, B, S in ((40, 64, "float64", 1024, 5), (10, 10, "float32", 2048, 5)):
        spec = run_spec(d, D, dt, B)
        for batched, label in ((True, "einsum contractions (GPU default)"), (False, "loop contractions (CPU default)")):
            rate = step_rate(torch, spec, S, contractions(batched), seconds)
            label = f"d = {d}, D = {D}, {dt}, batch {B}, {S} seeds, general kernel, {label}"
            rows.add(label, spec, S, rate, kernel_flops.general_flops(B, D, d))
        plan = dispatch.plan(spec)
        if plan.kernel.startswith("symmetric"):
            rate = step_rate(torch, spec, S, None, seconds)
            rows.add(
                f"d = {d}, D = {D}, {dt}, batch {B}, {S} seeds, {plan.kernel} (the run's)",
                spec,
                S,
                rate,
                own_flops(spec),
            )


def theorem_rows(torch, rows: Rows, seconds: float) -> None:
    """The theorem test's points: d = 10, batch 512, 5 seeds, float32, on the symmetric subspace."""
    from groupsparse.model import dispatch

    for D in (32, 64):
        spec = run_spec(10, D, "float32", 512)
        rate = step_rate(torch, spec, 5, None, seconds)
        rows.add(
            f"d = 10, D = {D}, float32, batch 512, 5 seeds ({dispatch.plan(spec).kernel})",
            spec,
            5,
            rate,
            own_flops(spec),
        )
        if D == 64:
            point = 2 * D**3 / rate / 3600
            print(f"D = 64 point (5 seeds batched x {2 * D**3} steps, recording not included): {point:.2f} h")


def population_rows(torch, rows: Rows, seconds: float) -> None:
    """Population mode (configs/population_gd.yaml, D = 96 and 128 from configs/cluster/population_large_D.yaml):
    one seed a job, the projected step at each run's batch; the point's hours (steps only)."""
    import workloads

    from groupsparse.model import dispatch

    for D in (64, 96, 128):
        runs = workloads.point_runs(workloads.population_config(large_d=True), D)
        hours = 0.0
        for run in runs:
            p = run.spec["pretrain"]
            spec = workloads.spec_of(run, device=DEVICE, steps=10, eval_size=256)
            rate = step_rate(torch, spec, 1, None, seconds)
            kernel = dispatch.plan(spec).kernel
            label = f"population, d = 10, D = {D}, float32, batch {p['batch']}, 1 seed ({kernel}, projected)"
            rows.add(label, spec, 1, rate, own_flops(spec))
            hours += len(run.seeds) * p["steps"] / rate / 3600
        print(
            f"population D = {D} point ({' + '.join(r.name for r in runs)}, one seed a job, steps only): {hours:.2f} h"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip", nargs="*", default=[], choices=["tests", "workflow", "bench"])
    ap.add_argument("--cores", type=int, default=4, help="snakemake --cores for the tiny config")
    ap.add_argument("--cpu-dry-run", action="store_true", help="exercise the benchmark part on the CPU (no GPU needed)")
    args = ap.parse_args()
    global DEVICE
    if args.cpu_dry_run:
        DEVICE = "cpu"
        import torch

        torch.set_num_threads(1)  # as a study job runs on a CPU
        benchmark(torch)
        return 0
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device visible to torch: nothing to check here")
        return 1
    failed = []
    tests = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rs",
        "-k",
        "cuda",
        "tests/unit/test_fastpath.py",
        "tests/unit/test_pretrain.py",
        "tests/unit/test_symmetric.py",
    ]
    if "tests" not in args.skip and sh(tests, cwd=ROOT):
        failed.append("CUDA tests")
    if "workflow" not in args.skip:
        with tempfile.TemporaryDirectory() as tmp:
            rc = sh(
                [
                    "snakemake",
                    "-s",
                    str(ROOT / "Snakefile"),
                    "--directory",
                    tmp,
                    "--configfile",
                    str(ROOT / "configs" / "tiny.yaml"),
                    "--config",
                    "device=cuda",
                    "--cores",
                    str(args.cores),
                    "--resources",
                    "gpu=1",
                ],
                cwd=ROOT,
            )
            if rc or not (Path(tmp) / "results" / "tables" / "pretrain_trajectories.parquet").is_file():
                failed.append("tiny config with device=cuda")
    if "bench" not in args.skip:
        benchmark(torch)
    print("\nFAILED: " + ", ".join(failed) if failed else "\nall GPU checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
