"""The machine the benchmark runs on: its GEMM and loop ceilings, the instruction set its kernels run,
its load, and the environment that runs them as an AVX2-only CPU would."""

from __future__ import annotations

import os
import re
from pathlib import Path


def measure_ceilings(torch, table, args, n: int, when: str, timed_blocks) -> dict[str, float]:
    """GEMM GFLOP/s per dtype: the best of square n, n/2 and n/4 (shorter blocks, more of them: on a shared
    machine a short block more often runs undisturbed, so the ceiling is not underestimated)."""
    out = {}
    for dt in ("float32", "float64"):
        sizes = (n, n // 2, n // 4)
        rates = [
            gemm_gflops(torch, getattr(torch, dt), k, (args.repeats + 2) * 4**i, timed_blocks)
            for i, k in enumerate(sizes)
        ]
        out[dt] = max(rates)
        table.add(
            "ceiling",
            f"GEMM {dt}, best of {'^2, '.join(map(str, sizes))}^2 ({when})",
            out[dt],
            "GFLOP/s",
            out[dt],
            out[dt],
            note="torch.mm, best of repeats: " + ", ".join(f"{k}^2 {r:.1f}" for k, r in zip(sizes, rates)),
        )
    import loop_ceiling  # beside this script

    for D, rate in loop_ceiling.rates(repeats=args.repeats + 2).items():
        table.add(
            "ceiling",
            f"numba four-row multiply-add, float32, rows of {D} floats in L1 ({when})",
            rate,
            "GFLOP/s",
            rate,
            out["float32"],
            note="the float32 loops' access pattern (loop_ceiling.py); % of the GEMM ceiling beside it",
        )
    return out


def gemm_gflops(torch, dtype, n: int, repeats: int, timed_blocks) -> float:
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    a @ b
    ts = timed_blocks({"mm": lambda: a @ b}, repeats)["mm"]
    return 2 * n**3 / min(ts) / 1e9


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


# the AVX-512 family and what came with or after it (AMX, AVX10, AVX-VNNI, ...): off on an AVX2-only CPU
AFTER_AVX2 = re.compile(r"\+((?:avx512|avx10|amx|avxvnni|avxifma|avxneconvert)[\w.-]*)")
EMULATED = "GROUPSPARSE_BENCH_ISA"  # set in the process that runs as on another instruction set


def emulated_avx2_environment() -> dict[str, str]:
    """The environment under which this machine runs the kernels as an AVX2-only CPU (AMD Zen 3) would:
    torch's vectorised ops (ATen's dispatch), MKL's GEMM, numpy's OpenBLAS and numba's code (the
    host's features with every AVX-512 one off). numba gets its own cache directory: its cache index
    does tell targets apart, but one directory per target keeps an AVX-512 build from ever being loaded."""
    import tempfile

    import llvmlite.binding as ll

    return {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "OPENBLAS_CORETYPE": "Zen",
        "NUMBA_CPU_NAME": "znver3",
        "NUMBA_CPU_FEATURES": AFTER_AVX2.sub(r"-\1", ll.get_host_cpu_features().flatten()),
        "NUMBA_CACHE_DIR": str(Path(tempfile.gettempdir()) / "groupsparse-numba-avx2"),
    }


def instruction_set(torch) -> tuple[str, str]:
    """(tag, description) of the instruction set the kernels run: torch's vectorised ops (ATen's CPU
    capability) and numba's compiled loops (its target's features), against the CPU's own flags
    (/proc/cpuinfo). The tag is e.g. "AVX-512", "AVX2", or "AVX2 on AVX-512" when emulated."""
    import llvmlite.binding as ll
    from numba.core import config

    def level(has) -> str:
        return "AVX-512" if has("avx512f") else "AVX2" if has("avx2") else "pre-AVX2"

    try:
        flags = next(
            set(line.split(":", 1)[1].split())
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("flags")
        )
    except (OSError, StopIteration):
        flags = set()
    cpu = level(flags.__contains__) if flags else "unknown"
    aten = torch.backends.cpu.get_cpu_capability()
    torch_isa = {"AVX512": "AVX-512", "AVX2": "AVX2"}.get(aten, aten)
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else ll.get_host_cpu_features().flatten()
    numba_isa = level(lambda f: f"+{f}" in features.split(","))
    tag = torch_isa if torch_isa == numba_isa else f"torch {torch_isa}, numba {numba_isa}"
    if cpu not in (tag, "unknown"):
        tag += f" on {cpu}"
    numba_cpu = config.CPU_NAME or ll.get_host_cpu_name()
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "its own choice")
    openblas = os.environ.get("OPENBLAS_CORETYPE", "its own choice")
    described = (
        f"instruction set {tag}: CPU flags {cpu}; torch (ATen) {aten}; numba {numba_cpu} ({numba_isa}); "
        f"MKL {mkl}; OpenBLAS {openblas}"
    )
    return tag, described


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"
