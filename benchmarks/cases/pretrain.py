"""The project's whole step (``Steps.step``: draw, gradients, descent) against a plain reference written here
(one seed at a time, an ``nn.Module`` of the paper's formula, autograd, i.i.d. ``torch.randn`` batches,
``torch.optim.SGD``): 1 and 5 seeds, float32 and float64, d = D = 10, batch 2048; then the same without the
draw (each side reusing one batch). Ratio = reference time / project time."""

from __future__ import annotations

import functools
import statistics

from workloads import make_reference, project_step_fn, run_one_seed_at_a_time, run_spec

NAME = "pretrain"
DTYPES, SEEDS = ("float32", "float64"), (1, 5)
BASE = (2048, 10, 10)  # batch, D, d of run_spec's default
SPEEDUP_TARGET = 4.0  # whole step, 5 seeds, float32: >= 4x the reference
CEILING_TARGET = 0.30  # the same step: >= 30% of the float32 GEMM ceiling (dense count)


def run(ctx) -> list:
    from groupsparse.model.kernel_flops import dense_flops

    torch, table, args, ceilings, timed_blocks = ctx.torch, ctx.table, ctx.args, ctx.ceilings, ctx.timed
    results = {}
    for dtype in DTYPES:
        for n_seeds in SEEDS:
            spec = run_spec(dtype)
            seeds = list(range(n_seeds))
            _, project = project_step_fn(torch, spec, seeds)
            refs = [make_reference(torch, spec, s, getattr(torch, dtype)) for s in seeds]

            reference = functools.partial(run_one_seed_at_a_time, refs)
            project(2)
            reference(2)
            ts = timed_blocks(
                {"project": lambda p=project: p(args.steps), "reference": lambda r=reference: r(args.steps)},
                args.repeats,
            )
            B, D, d = spec.pretrain.batch, spec.task.D, spec.task.d
            flops = n_seeds * dense_flops(B, D, d)
            for who in ("project", "reference"):
                results[(who, dtype, n_seeds)] = min(ts[who]) / args.steps
            ratio = results[("reference", dtype, n_seeds)] / results[("project", dtype, n_seeds)]
            for who in ("project", "reference"):
                per_step = results[(who, dtype, n_seeds)]
                med = statistics.median(ts[who]) / args.steps
                table.add(
                    "pretrain",
                    f"{who}, {n_seeds} seed{'s' if n_seeds > 1 else ''}, {dtype}",
                    n_seeds * B / per_step,
                    "samples*steps/s",
                    flops / per_step / 1e9,
                    ceilings[dtype],
                    ratio if who == "project" else 1.0,
                    f"{per_step * 1e3:.2f} ms/step (median {med * 1e3:.2f})",
                )
    compute_only(ctx)
    project = results[("project", "float32", 5)]
    gflops = 5 * dense_flops(*BASE) / project / 1e9
    speedup = results[("reference", "float32", 5)] / project
    return [
        ("project / reference, 5 seeds, float32, d = D = 10, batch 2048", speedup, SPEEDUP_TARGET, "x"),
        (
            "achieved / float32 GEMM ceiling, 5 seeds, d = D = 10, batch 2048",
            gflops / ceilings["float32"],
            CEILING_TARGET,
            "",
        ),
    ]


def compute_only(ctx) -> None:
    """The same comparison without the data draw: each side reuses one batch (5 seeds, float32)."""
    from groupsparse.model.kernel_flops import dense_flops

    torch, table, args, ceilings, timed_blocks = ctx.torch, ctx.table, ctx.args, ctx.ceilings, ctx.timed
    spec = run_spec("float32")
    seeds = list(range(5))
    trainer, _ = project_step_fn(torch, spec, seeds)
    drawn = trainer.rule.draw()
    active = torch.ones(len(seeds), dtype=torch.bool)

    def project(steps):
        for _ in range(steps):
            trainer.rule.descend(trainer.rule.step_grads(drawn)[1], active)

    refs = [make_reference(torch, spec, s, torch.float32, fresh_data=False) for s in seeds]
    reference = functools.partial(run_one_seed_at_a_time, refs)
    project(2)
    reference(2)
    ts = timed_blocks(
        {"project": lambda p=project: p(args.steps), "reference": lambda r=reference: r(args.steps)}, args.repeats
    )
    best = {k: min(v) / args.steps for k, v in ts.items()}
    flops = len(seeds) * dense_flops(spec.pretrain.batch, spec.task.D, spec.task.d)
    for who in ("project", "reference"):
        table.add(
            "compute",
            f"{who}, 5 seeds, float32, one batch reused (no data draw)",
            len(seeds) * spec.pretrain.batch / best[who],
            "samples*steps/s",
            flops / best[who] / 1e9,
            ceilings["float32"],
            best["reference"] / best[who] if who == "project" else 1.0,
            f"{best[who] * 1e3:.2f} ms/step",
        )
