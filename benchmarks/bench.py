#!/usr/bin/env python
"""Performance benchmark of the groupsparse study: one table, measured side by side.

    python benchmarks/bench.py --threads 1             # full run (10-20 minutes)
    python benchmarks/bench.py --threads 1 --quick     # smoke run (a few minutes)
    python benchmarks/bench.py --orchestration results/ --wall-seconds 812 --cores 2

The harness: the table, the timing, the machine's ceilings, the target rows and the exit code (1 when any
row FAILs). What is measured is one module a case in ``benchmarks/cases/`` (see its ``__init__``), run in
the order of ``CASES``. Every number that is compared is measured in the same process, interleaved, and
each timing is the best of ``--repeats`` blocks (the median is printed next to it), because the machines
this runs on are shared and noisy. See benchmarks/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import machine

CASES = ("kernel", "generator", "pretrain", "theorem", "population", "flow", "large", "memory", "compile", "agree")
CASES += ("transfer",)


@dataclass
class Table:
    """The benchmark's rows; ``isa`` (the instruction set the kernels run, ``machine.instruction_set``) is
    printed beside every share of a ceiling."""

    rows: list[list[str]] = field(default_factory=list)
    header: tuple = ("section", "case", "value", "unit", "GFLOP/s", "% ceiling", "ISA", "ratio", "note")
    isa: str = ""

    def add(self, section, case, value=None, unit="", gflops=None, ceiling=None, ratio=None, note="", share=False):
        """``share``: the value itself is a share of a ceiling (a target row)."""

        def num(x, fmt):
            return "-" if x is None else format(x, fmt)

        pct = None if gflops is None or ceiling is None else 100 * gflops / ceiling
        row = [section, case, num(value, ".4g") if not isinstance(value, str) else value, unit, num(gflops, ".1f")]
        row += [num(pct, ".0f"), self.isa if pct is not None or share else "-"]
        row += [num(ratio, ".2f") if not isinstance(ratio, str) else ratio, note]
        self.rows.append(row)
        print("  " + " | ".join(row), flush=True)

    def markdown(self) -> str:
        widths = [max(len(r[i]) for r in [list(self.header)] + self.rows) for i in range(len(self.header))]
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(self.header), rule] + [line(r) for r in self.rows])


def timed_blocks(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Run each callable once per repeat, interleaved; the seconds of every call, per name."""
    out = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t0)
    return out


@dataclass
class Context:
    """What a case is given (``benchmarks/cases/__init__.py``)."""

    torch: Any
    table: Table
    args: argparse.Namespace
    ceilings: dict[str, float] | None = None
    allocator_tuned: bool = False
    timed: Any = staticmethod(timed_blocks)


def case(name: str):
    return importlib.import_module(f"cases.{name}")


def parse_args(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, as a study job would use (default 1)")
    ap.add_argument("--quick", action="store_true", help="smoke run: fewer steps, repeats and transfer sizes")
    ap.add_argument("--steps", type=int, default=None, help="training steps per timed block (default 5; quick 2)")
    ap.add_argument(
        "--repeats", type=int, default=None, help="timed blocks per case, best reported (default 12; quick 3)"
    )
    ap.add_argument(
        "--agree-steps", type=int, default=None, help="steps of the agree case's runs (default 3000; quick 100)"
    )
    ap.add_argument("--transfer-pretrain-steps", type=int, default=300, help="steps of the transfer case's checkpoint")
    ap.add_argument(
        "--skip", nargs="*", default=[], choices=list(CASES), help="cases to leave out (targets not judged)"
    )
    ap.add_argument(
        "--isa",
        choices=("native", "avx2"),
        default="native",
        help="avx2: run the kernels as on a CPU without AVX-512 (torch, MKL, OpenBLAS and numba told so; "
        "numba with its own cache directory); native (default): this CPU's own",
    )
    ap.add_argument(
        "--config",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "config.yaml",
        help="study config whose pretraining jobs the memory case runs (default: config.yaml)",
    )
    ap.add_argument(
        "--from-results",
        type=Path,
        default=None,
        metavar="RESULTS",
        help="flow case: read the flow's side from a flow study's results (e.g. results/population: its grid "
        "runs' trajectories and job benchmarks) instead of running a short flow live",
    )
    ap.add_argument("--flow-D", type=int, nargs="+", default=None, help="flow case: the D grid (default: the case's)")
    ap.add_argument(
        "--flow-kappa",
        type=float,
        default=None,
        help="flow case: flow time kappa D^3 compared (default 2 from --from-results, 0.25 live)",
    )
    ap.add_argument(
        "--flow-samples", type=int, default=None, help="flow case, live: outer samples (default 256; quick 128)"
    )
    ap.add_argument("--markdown", type=Path, default=None, help="also write the table as Markdown here")
    ap.add_argument(
        "--orchestration",
        type=Path,
        default=None,
        metavar="RESULTS",
        help="instead: judge a finished study from RESULTS/benchmarks/**/*.tsv and --wall-seconds",
    )
    ap.add_argument("--wall-seconds", type=float, default=None, help="wall time of that study run")
    ap.add_argument("--cores", type=int, default=None, help="cores the study ran on (default: this machine's)")
    args = ap.parse_args(argv)
    if args.orchestration is not None:
        if args.wall_seconds is None or args.wall_seconds <= 0:
            ap.error("--orchestration needs --wall-seconds N (the study's wall time, > 0)")
        if not args.orchestration.is_dir():
            ap.error(f"--orchestration: {args.orchestration} is not a directory")
        return args
    if args.from_results is not None and not (args.from_results / "pretrain").is_dir():
        ap.error(f"--from-results: {args.from_results} has no pretrain/ folder (a flow study's results/<study>)")
    if args.flow_kappa is not None and args.flow_kappa <= 0:
        ap.error("--flow-kappa must be > 0")
    # short blocks, many of them: on a shared machine the best block is the one nobody disturbed
    args.steps = args.steps or (2 if args.quick else 5)
    args.repeats = args.repeats or (3 if args.quick else 12)
    args.agree_steps = args.agree_steps or (100 if args.quick else 3000)
    for name in ("steps", "repeats", "agree_steps", "threads", "flow_samples"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.isa == "avx2" and os.environ.get(machine.EMULATED) != "avx2":  # the settings act at import: a fresh process
        argv = sys.argv[1:] if argv is None else list(argv)
        env = os.environ | machine.emulated_avx2_environment() | {machine.EMULATED: "avx2"}
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)
    table = Table()
    if args.orchestration is not None:
        case("orchestration").run(Context(None, table, args))
        return finish(table, args)
    import torch

    from groupsparse.cli import set_threads

    set_threads(args.threads)
    table.isa, described = machine.instruction_set(torch)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {machine.cpu_name()}; {described}")
    table.add("machine", "instruction set of the kernels", table.isa, note=described)
    table.add("machine", "load average at the start (1, 5, 15 min)", machine.load_average(), note="/proc/loadavg")
    ctx = Context(torch, table, args)
    targets = run_cases(ctx)
    judge(ctx, targets)
    table.add("machine", "load average at the end (1, 5, 15 min)", machine.load_average(), note="/proc/loadavg")
    table.add(
        "target",
        "orchestration overhead, peak memory of transfer jobs",
        "-",
        note="judged by --orchestration RESULTS --wall-seconds N (cases/orchestration.py)",
    )
    return finish(table, args)


def run_cases(ctx: Context) -> list[tuple]:
    """Every case not skipped, in order; their targets. The cases' ``run_first`` before anything large is
    allocated and freed (glibc then raises its mmap threshold by itself) and before the allocator is tuned."""
    from groupsparse.model.cpu import keep_freed_memory

    cases = [case(name) for name in CASES if name not in ctx.args.skip]
    for module in cases:
        if hasattr(module, "run_first"):
            module.run_first(ctx)
    ctx.ceilings = ceilings(ctx, "start")
    ctx.allocator_tuned = keep_freed_memory()
    targets = []
    for module in cases:
        targets += module.run(ctx)
    return targets


def ceilings(ctx: Context, when: str) -> dict[str, float]:
    n = 1024 if ctx.args.quick else 2048
    return machine.measure_ceilings(ctx.torch, ctx.table, ctx.args, n, when, timed_blocks)


def judge(ctx: Context, targets: list[tuple]) -> None:
    """A target row each, PASS or FAIL: a floor, or a cap where it says "<=". The ceilings are measured again
    and the higher kept: on a shared machine a long GEMM is more often disturbed than the short blocks
    measured between, which would flatter the "% of ceiling" targets."""
    again = ceilings(ctx, "end")
    for dt in ctx.ceilings:
        if again[dt] > ctx.ceilings[dt]:
            scale, ctx.ceilings[dt] = ctx.ceilings[dt] / again[dt], again[dt]
            targets = [
                (name, value * scale if name.startswith("achieved") and dt in name else value, *rest)
                for name, value, *rest in targets
            ]
    for name, value, target, unit, *how in targets:
        cap = how == ["<="]
        ctx.table.add(
            "target",
            name,
            value,
            unit,
            ratio="PASS" if (value <= target if cap else value >= target) else "FAIL",
            note=f"target {'<=' if cap else '>='} {target:g}",
            share="ceiling" in name,
        )


def finish(table: Table, args) -> int:
    md = table.markdown()
    print("\n" + md)
    if args.markdown:
        args.markdown.write_text(md + "\n")
    at = table.header.index("ratio")
    failed = [r[1] for r in table.rows if r[at] == "FAIL"]
    passed = sum(r[at] == "PASS" for r in table.rows)
    print(f"\n{passed} PASS, {len(failed)} FAIL" + ("".join(f"\n  FAIL: {f}" for f in failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
