"""The step as a run takes it (``dispatch.plan``: the symmetric torch form from D = 32 on), one seed, float64,
batch 1024, d in SWEEP_d, D in SWEEP_D: ms a step, dense GFLOP/s and % of the float64 ceiling; ratio = time /
(the kernel's own FLOP count x the rate at the largest point): 1.0 when the cost grows as the count."""

from __future__ import annotations

import functools
import statistics

from workloads import project_step_fn, run_spec

NAME = "large"
LARGEST = {"d": 40, "D": 64, "dtype": "float64", "batch": 1024}  # configs/scaling.yaml's largest point
SWEEP_D, SWEEP_d = (4, 8, 16, 32, 64), (10, 40)
CEILING_TARGET = 0.50  # the largest point: >= 50% of the float64 GEMM ceiling (dense count)


def run(ctx) -> list:
    """The step (``Steps.step``: draw, kernel, descent) for one seed, float64, batch 1024 (the scaling grid's), at
    d in SWEEP_d and D in SWEEP_D, beside the FLOP model. Returns the largest point's fraction of the
    float64 GEMM ceiling (dense FLOP count) as a target."""
    from groupsparse.model import dispatch, kernel_flops
    from groupsparse.model.kernel_flops import dense_flops

    torch, table, args, ceilings, timed_blocks = ctx.torch, ctx.table, ctx.args, ctx.ceilings, ctx.timed
    dtype, B = LARGEST["dtype"], LARGEST["batch"]
    times = {}
    for d in SWEEP_d:
        for D in SWEEP_D:
            spec = run_spec(dtype, task={"d": d, "D": D}, pretrain={"batch": B, "eval_size": 256})
            _, block = project_step_fn(torch, spec, [0])
            block(1)
            steps = max(1, min(args.steps, int(2e9 // dense_flops(B, D, d)) or 1))
            # at least 5 blocks even with --quick: a step at D = 64 is one block of ~0.1 s, easily disturbed
            ts = timed_blocks({"step": functools.partial(block, steps)}, max(5, args.repeats // 2))["step"]
            times[(d, D)] = (min(ts) / steps, statistics.median(ts) / steps)

    def own_flops(B, D, d):  # the kernel the dispatch gives a run from the zero start at this D
        spec = run_spec(dtype, task={"d": d, "D": D}, pretrain={"batch": B})
        symmetric = dispatch.plan(spec).kernel.startswith("symmetric")
        return (kernel_flops.symmetric_flops if symmetric else kernel_flops.general_flops)(B, D, d)

    ref = (SWEEP_d[-1], SWEEP_D[-1])
    per_kflop = times[ref][0] / own_flops(B, ref[1], ref[0])  # seconds per kernel FLOP at the largest point
    fraction = None
    for (d, D), (best, med) in times.items():
        dense, kern = dense_flops(B, D, d), own_flops(B, D, d)
        model = kern * per_kflop
        table.add(
            "large D",
            f"step, 1 seed, {dtype}, batch {B}, d = {d}, D = {D}",
            best * 1e3,
            "ms",
            dense / best / 1e9,
            ceilings[dtype],
            ratio=best / model,
            note=f"median {med * 1e3:.1f} ms; dense {dense / 1e9:.3f} GFLOP, kernel model "
            f"{kern / 1e9:.3f} GFLOP; ratio = time / (kernel FLOPs x the d = {ref[0]}, D = {ref[1]} rate)",
        )
        if (d, D) == (LARGEST["d"], LARGEST["D"]):
            fraction = dense / best / 1e9 / ceilings[dtype]
    name = f"achieved / float64 GEMM ceiling at d = {LARGEST['d']}, D = {LARGEST['D']} (batch {LARGEST['batch']})"
    return [(name, fraction, CEILING_TARGET, "")]
