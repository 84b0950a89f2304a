#!/usr/bin/env python
"""GPU check: run from the repository root on a machine with a CUDA device.

    python benchmarks/gpu_check.py                 # everything, about 5 minutes on one recent GPU
    python benchmarks/gpu_check.py --skip workflow # tests and benchmark only

1. the tests written for CUDA (`pytest -k cuda tests/unit/test_fastpath.py tests/unit/test_pretrain.py`): the fast path
   on the device keeps v2 and W's cross blocks exactly 0 with antithetic batches, batched seeds equal
   single seeds and reruns equal runs bit for bit, and the device computes the CPU's numbers on the same
   samples;
2. the tiny config on the device: `snakemake --configfile configs/tiny.yaml --config device=cuda` in a
   scratch directory;
3. the benchmark at the largest scaling point (d = 40, D = 64, float64, batch 1024, 5 seeds: one job of
   configs/scaling.yaml) and at the default size (float32, d = D = 10, batch 2048, 5 seeds): steps per
   second, and the share of the GPU's matmul peak measured here (torch.mm, square 8192) by the dense
   FLOP count (what benchmarks/bench.py reports on a CPU) and by the kernel's own FLOP model;
4. the theorem test's points: d = 10, D = 32 and 64, float32, batch 512, 5 seeds batched,
   on the symmetric-subspace kernel (model/symmetric.py, pure torch): steps/s and the projected
   hours of the D = 64 point (5 seeds x 2 D^3 steps).

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


def step_rate(torch, d: int, D: int, dtype: str, batch: int, seeds: int, batched: bool | None, seconds: float = 5.0):
    from groupsparse.config.specs import RunSpec
    from groupsparse.model import fastpath
    from groupsparse.training.pretrain import Trainer

    spec = RunSpec.from_dict(
        {
            "study_seed": 20250411,
            "task_name": "gpu_check",
            "dtype": dtype,
            "device": DEVICE,
            "task": {"d": d, "D": D},
            "pretrain": {"steps": 10, "batch": batch, "eval_size": 256},
        }
    )
    before = fastpath.BATCHED_CONTRACTIONS
    fastpath.BATCHED_CONTRACTIONS = batched
    try:
        trainer = Trainer(spec, list(range(seeds)))
        active = torch.ones(seeds, dtype=torch.bool)
        for _ in range(3):
            trainer.step(active)
        sync(torch)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            trainer.step(active)
            steps += 1
            if steps % 10 == 0:
                sync(torch)
        sync(torch)
        return steps / (time.perf_counter() - t0)
    finally:
        fastpath.BATCHED_CONTRACTIONS = before


def benchmark(torch) -> None:
    from groupsparse.model import fastpath, symmetric
    from groupsparse.model.fastpath import dense_flops, kernel_flops

    n = 8192 if DEVICE == "cuda" else 1024
    peaks = {dt: matmul_peak(torch, getattr(torch, dt), n) for dt in ("float32", "float64")}
    if DEVICE == "cuda":
        print(
            f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}; "
            f"TF32 matmul allowed: {torch.backends.cuda.matmul.allow_tf32}"
        )
    for dt, g in peaks.items():
        print(f"measured matmul peak (torch.mm {n}^2) {dt}: {g:,.0f} GFLOP/s")
    rows = []
    for d, D, dt, B, S in ((40, 64, "float64", 1024, 5), (10, 10, "float32", 2048, 5)):
        for batched, label in ((True, "einsum contractions (GPU default)"), (False, "loop contractions (CPU default)")):
            rate = step_rate(torch, d, D, dt, B, S, batched, 5.0 if DEVICE == "cuda" else 1.0)
            # the kernel that runs: antithetic batches from the zero start take the symmetric one from D = 24
            own = symmetric.flops if D >= fastpath.SYMMETRIC_MIN_D else kernel_flops
            dense, kern = S * dense_flops(B, D, d), S * own(B, D, d)
            rows.append(
                (
                    f"d = {d}, D = {D}, {dt}, batch {B}, {S} seeds, {label}",
                    rate,
                    100 * rate * dense / 1e9 / peaks[dt],
                    100 * rate * kern / 1e9 / peaks[dt],
                )
            )
    # the theorem test's points: d = 10, batch 512, 5 seeds, float32, on the symmetric subspace
    for D in (32, 64):
        rate = step_rate(torch, 10, D, "float32", 512, 5, None, 5.0 if DEVICE == "cuda" else 1.0)
        dense, kern = 5 * dense_flops(512, D, 10), 5 * symmetric.flops(512, D, 10)
        rows.append(
            (
                f"d = 10, D = {D}, float32, batch 512, 5 seeds (symmetric kernel)",
                rate,
                100 * rate * dense / 1e9 / peaks["float32"],
                100 * rate * kern / 1e9 / peaks["float32"],
            )
        )
        if D == 64:
            point = 2 * D**3 / rate / 3600
            print(f"D = 64 point (5 seeds batched x {2 * D**3} steps, recording not included): {point:.2f} h")
    print("\n| case | steps/s | % of the matmul peak (dense FLOPs) | % of the peak (kernel FLOP model) |")
    print("| --- | --- | --- | --- |")
    for case, rate, p_dense, p_kern in rows:
        print(f"| {case} | {rate:.1f} | {p_dense:.1f} | {p_kern:.1f} |")
    print(
        "\nGPU-hours of a config: steps x seeds x points / (steps/s x seeds per job) / 3600 per job shape; "
        "compare README 'Performance' (estimates made without a GPU)."
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
