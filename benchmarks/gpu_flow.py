#!/usr/bin/env python
"""The flow's vector field on a GPU against the CPU loops, at D = 256 and 512 (issue 41, "Cost").

    python benchmarks/gpu_flow.py                       # on a CUDA machine
    python benchmarks/gpu_flow.py --out flow_gpu.json   # and the numbers as JSON
    python benchmarks/gpu_flow.py --cpu-dry-run         # the same code path on the CPU, small sizes (seconds)

Per (D, N), d = 10, the flow study's settings (configs/population.yaml: Sobol' outer samples, 32 nodes,
float64, score scale of its spec): one outer sample drawn as a replicate's (``flow.draw``), then

- ``flow.Field(..., implementation="torch")`` on the GPU: ``gradient(coef)`` timed after WARMUP calls,
  ``--timed`` calls (EVALUATIONS; fewer where a call is slow: about a minute of them a D), each between
  ``torch.cuda.synchronize()``; best and median; and one record's ``flow.evaluate`` on an evaluation sample
  of 2 N (the study's 4096 to 2048), timed the same way;
- the CPU loops (``implementation="loops"``, numba) on the same sample and coefficients, in the same run, on
  1 thread (a study job) and on all cores: one call each after a small warm-up (compilation), skipped when
  the time they would take (scaled from the warm-up by D^2 N) would pass ``--budget-s``;
- the largest difference between the two gradients (relative to the largest component): they compute the
  same sums;
- the GPU's peak memory (``torch.cuda.max_memory_allocated``) against its total: the torch field works on
  fixed chunks of 64 samples (not a setting of ``flow.Field``), a few arrays of 64 x D^2 float64 at a time
  (about 130 MB each at D = 512);
- an estimate of one replicate's time to 8 D^3 (the study's flow time above D = 64): ``--evaluations``
  (ASSUMED_EVALUATIONS: a live D = 64 flow at N = 256 took 2,403 to 2 D^3, 2,084 of them before 0.25 D^3;
  the study's own counts are in its trajectories, ``benchmarks/cases/flow.py --from-results``) x the
  gradient's time, plus the records (``training.flow.record_times``, the study's 4 an octave) x (a record's
  evaluate + a gradient), plus the targets' crossings (CROSSINGS x CROSSING_EVALUATES evaluates). The same
  on the CPU (1 thread, gradients only).

The coefficients (``--coef``, 8 numbers in ``model.population.COEFFICIENTS``' order) default to COEF, the
flow's at D = 64, flow time 2 D^3 (a live N = 256 flow, 1 - min attention 0.0046: attention formed): the
field's cost barely depends on them (only through the margin's root-finding, at most 60 iterations).

**Budget: a 15-minute GPU lease.** Expected on an H100 machine (16 cores): the draws a few seconds, the GPU
timings at most about a minute a D (the timed calls are cut to fit), the CPU loops at D = 512, N = 4096 on
one thread about 5-15 s a call (measured on the 2-core development VM: 0.10 s at D = 128 and 0.22 s at
D = 256, N = 256, on one loaded core; the cost grew about as D N there, at most as D^2 N) and on all cores a
second or two: the whole script about 2-4 minutes, and ``--budget-s`` (default 420) skips a CPU call that
would end past 7 minutes (predicted from the warm-up by D^2 N, an overestimate). Run it with a ``timeout_s``
of about 540, so that a rerun still fits the lease.

Public names only (``flow.Field``, ``flow.draw``, ``flow.evaluate``, ``flow.Sample``); exits 2 without a
CUDA device unless ``--cpu-dry-run``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

d = 10
SIZES = ((256, 2048), (512, 4096))  # (D, N): the study's N at D = 256, twice it at 512
DRY_SIZES = ((8, 64), (12, 128))
WARMUP, EVALUATIONS = 2, 5
GPU_SECONDS_A_D = 60.0  # the timed GPU calls of a D at most about this
KAPPA_ESTIMATE = 8.0  # the study's flow time / D^3 above D = 64
ASSUMED_EVALUATIONS = 3000  # a replicate's vector-field evaluations to 8 D^3 (see the docstring)
CROSSINGS, CROSSING_EVALUATES = 3, 30  # targets c = 0.02, 0.05, 0.1; evaluates a crossing (Brent's method)
COEF = (-0.33532, -0.0038923, 23.42975, 10.06865, 9.59490, -0.15982, -0.099242, -0.15316)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-dry-run", action="store_true", help="the same code path on the CPU at small sizes")
    ap.add_argument("--D", type=int, nargs="+", default=None, help="D values (default 256 512; dry run 8 12)")
    ap.add_argument("--samples", type=int, nargs="+", default=None, help="N for each D (default 2048 4096)")
    ap.add_argument("--evaluations", type=int, default=ASSUMED_EVALUATIONS, help="assumed a replicate to 8 D^3")
    ap.add_argument("--timed", type=int, default=EVALUATIONS, help="timed GPU calls after the warm-up")
    ap.add_argument("--coef", type=str, default=None, help="8 comma-separated coefficients (default COEF)")
    ap.add_argument("--cpu-threads", type=int, nargs="+", default=None, help="CPU loops' threads (default 1, all)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip CPU calls that would end past this")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    args = ap.parse_args(argv)
    sizes = DRY_SIZES if args.cpu_dry_run else SIZES
    Ds = args.D or [D for D, _ in sizes]
    Ns = args.samples or ([N for _, N in sizes] if args.D is None else [2048 * max(1, D // 256) for D in Ds])
    if len(Ns) != len(Ds):
        ap.error("--samples: one N per D")
    args.sizes = list(zip(Ds, Ns))
    args.coef = tuple(float(x) for x in args.coef.split(",")) if args.coef else COEF
    if len(args.coef) != 8:
        ap.error("--coef: 8 numbers")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import numba
    import numpy as np
    import torch

    from groupsparse.config.seeding import task_identity, torch_generator
    from groupsparse.model import flow
    from groupsparse.training.flow import record_times

    if args.cpu_dry_run:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        print("no CUDA device: --cpu-dry-run runs the same code path on the CPU", file=sys.stderr)
        return 2
    cuda = device.type == "cuda"
    start = time.perf_counter()
    all_threads = numba.config.NUMBA_NUM_THREADS
    threads = sorted({min(k, all_threads) for k in args.cpu_threads or (1, all_threads)})
    name = torch.cuda.get_device_name(device) if cuda else "CPU (dry run: the torch field on the CPU)"
    print(f"torch {torch.__version__}, {name}; CPU loops on {threads} of {all_threads} threads; d = {d}")

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def timed(fn, n):
        out = []
        for _ in range(n):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t0)
        return out

    coef = np.array(args.coef, dtype=np.float64)
    # the CPU loops' compilation, and their cost per D^2 N (to skip calls past the budget)
    numba.set_num_threads(1)
    small = flow.draw(d, 32, 128, torch_generator("gpu_flow", "warm-up"), "sobol")
    warm = flow.Field(small, d, implementation="loops")
    warm.gradient(coef)
    rate = min(timed(lambda: warm.gradient(coef), 3)) / (32**2 * 128)
    results = []
    for D, N in args.sizes:
        spec, scale = study_spec(D)
        nodes, ident = spec.pretrain.flow.nodes, task_identity(spec, 0)  # replicate 0's samples, as the study's
        sample = flow.draw(d, D, N, torch_generator(*ident, "flow_sample"), spec.pretrain.flow.sampler)
        evaluation = flow.draw(d, D, 2 * N, torch_generator(*ident, "flow_eval"), spec.pretrain.flow.sampler)
        on = flow.Sample(sample.w.to(device), sample.across.to(device))
        on_eval = flow.Sample(evaluation.w.to(device), evaluation.across.to(device))
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        field = flow.Field(on, d, scale, nodes, implementation="torch")
        first = timed(lambda f=field: f.gradient(coef), WARMUP)[-1]
        grad_t = timed(lambda f=field: f.gradient(coef), max(1, min(args.timed, int(GPU_SECONDS_A_D / first))))
        g_torch = field.gradient(coef)[1]
        record = lambda s=on_eval, a=scale, q=nodes: flow.evaluate(coef, s, a, q, implementation="torch")  # noqa: E731
        first = timed(record, 1)[0]
        eval_t = timed(record, 2 if first < GPU_SECONDS_A_D / 4 else 1)
        peak = torch.cuda.max_memory_allocated(device) if cuda else None
        total = torch.cuda.get_device_properties(device).total_memory if cuda else None
        row = {
            "D": D, "N": N, "device": name, "gradient_s": min(grad_t), "gradient_median_s": statistics.median(grad_t),
            "evaluate_s": min(eval_t), "peak_bytes": peak, "total_bytes": total, "cpu": {},
        }  # fmt: skip
        for k in threads:
            predicted = rate * D**2 * N / k
            if time.perf_counter() - start + predicted > args.budget_s:
                row["cpu"][k] = {"skipped": f"about {predicted:.0f} s would pass --budget-s {args.budget_s:g}"}
                continue
            numba.set_num_threads(k)
            cpu_field = flow.Field(sample, d, scale, nodes, implementation="loops")
            t = timed(lambda f=cpu_field: f.gradient(coef), 1)[0]
            g_loops = cpu_field.gradient(coef)[1] if k == threads[-1] else None
            row["cpu"][k] = {"gradient_s": t, "ratio": t / row["gradient_s"]}
            if g_loops is not None:
                row["max_rel_difference"] = float(np.abs(g_torch - g_loops).max() / np.abs(g_loops).max())
        T = KAPPA_ESTIMATE * D**3
        records = len(record_times(T, spec.pretrain.flow.records_per_octave))
        row["estimate"] = {
            "flow_time": T, "evaluations": args.evaluations, "records": records,
            "seconds": args.evaluations * row["gradient_s"] + records * (row["evaluate_s"] + row["gradient_s"])
            + CROSSINGS * CROSSING_EVALUATES * row["evaluate_s"],
        }  # fmt: skip
        one = row["cpu"].get(1, {})
        if "gradient_s" in one:
            row["estimate"]["cpu_1_thread_seconds"] = args.evaluations * one["gradient_s"]
        results.append(row)
        report(row)
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


def study_spec(D: int):
    """The flow study's grid run at D (configs/population.yaml) and its score scale."""
    from workloads import flow_grid_run, flow_spec

    from groupsparse.model.transformer import token_width

    spec = flow_spec(flow_grid_run(D, d))
    scale = 1.0 / math.sqrt(token_width(spec.model, d, D)) if spec.model.score_scale == "sqrt" else 1.0
    return spec, scale


def report(row: dict) -> None:
    D, N = row["D"], row["N"]
    print(f"\nD = {D}, N = {N}, {row['device']}:")
    print(f"  torch field, gradient: {row['gradient_s'] * 1e3:.4g} ms (median {row['gradient_median_s'] * 1e3:.4g})")
    print(f"  torch evaluate (a record, 2N = {2 * N} samples): {row['evaluate_s'] * 1e3:.4g} ms")
    if row["peak_bytes"] is not None:
        print(f"  peak memory {row['peak_bytes'] / 2**30:.2f} GiB of {row['total_bytes'] / 2**30:.1f} GiB")
    for k, c in row["cpu"].items():
        if "skipped" in c:
            print(f"  CPU loops, {k} thread(s): skipped ({c['skipped']})")
        else:
            print(f"  CPU loops, {k} thread(s): {c['gradient_s'] * 1e3:.4g} ms, CPU / torch {c['ratio']:.3g}x")
    if "max_rel_difference" in row:
        print(f"  torch - loops, largest gradient difference / largest component: {row['max_rel_difference']:.2e}")
    e = row["estimate"]
    line = (
        f"  a replicate to {KAPPA_ESTIMATE:g} D^3 = {e['flow_time']:.4g}: {e['evaluations']} evaluations (assumed) + "
        f"{e['records']} records: {e['seconds'] / 60:.3g} min here"
    )
    if "cpu_1_thread_seconds" in e:
        line += f"; CPU loops, 1 thread, evaluations only: {e['cpu_1_thread_seconds'] / 3600:.3g} h"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
