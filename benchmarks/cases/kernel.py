"""One step's gradients for 5 seeds, float32, d = D = 10, batch 2048, on a fixed antithetic batch, by
implementation (the dense closed form, the general kernel fused, unfolded, as torch ops), and the draws;
first with glibc's default allocator (before anything large is allocated: ``run_first``), then with freed
memory kept (``model.cpu.keep_freed_memory``, as a run has it)."""

from __future__ import annotations

import statistics

from workloads import run_spec

NAME = "kernel"
SEEDS = 5


def run_first(ctx) -> list:
    rows(ctx, "glibc default malloc")
    return []


def run(ctx) -> list:
    rows(ctx, "freed memory kept" if ctx.allocator_tuned else "allocator unchanged (not glibc)")
    return []


def rows(ctx, allocator: str) -> None:
    """One step's gradients for 5 seeds in float32 on a fixed antithetic batch, by implementation."""
    from groupsparse.config.seeding import task_identity, torch_generator
    from groupsparse.config.specs import ModelSpec
    from groupsparse.data.synthetic import draw_task, standard_normal
    from groupsparse.model import dispatch, fastpath
    from groupsparse.model.kernel_flops import dense_flops
    from groupsparse.model.transformer import embed, loss_and_grads_closed_form, sine_positions

    torch, table, timed_blocks = ctx.torch, ctx.table, ctx.timed
    spec = run_spec("float32")
    S, B, D, d = SEEDS, spec.pretrain.batch, spec.task.D, spec.task.d
    gens = [torch_generator(*task_identity(spec, s), "bench") for s in range(S)]
    tasks = [draw_task(spec.task, *task_identity(spec, s)) for s in range(S)]
    X, y = (torch.stack(t) for t in zip(*[t.sample(B, g) for t, g in zip(tasks, gens)]))
    W = 0.1 * torch.randn(S, d + D, d + D, generator=gens[0])
    v = 0.1 * torch.randn(S, d + D, generator=gens[0])
    P = sine_positions(D, torch.float32)
    Z = embed(X, ModelSpec())
    H = B // 2
    halves = [fastpath.batch_inner(X[s, :H]) for s in range(S)]
    fulls = [fastpath.batch_inner(X[s]) for s in range(S)]

    fused, torch_ops = dispatch.Plan("general_fused"), dispatch.Plan("general")

    def fast(inputs, labels, anti, plan=fused):
        return [dispatch.loss_and_grads(plan, W[s], v[s], inputs[s], labels[s], P, 1.0, anti) for s in range(S)]

    fns = {
        "dense closed form (transformer.py), seeds batched": lambda: loss_and_grads_closed_form(W, v, Z, y),
        "fast kernel, mirror not folded": lambda: fast(fulls, y, False),
        "fast kernel, torch ops (not fused: float64's path)": lambda: fast(halves, y[:, :H], True, torch_ops),
        "fast kernel": lambda: fast(halves, y[:, :H], True),
        "draw 5 batches: torch.randn float64": lambda: [
            torch.randn(H, D, d, generator=g, dtype=torch.float64) for g in gens
        ],
        "draw 5 batches: data.standard_normal float64 (float64 runs)": lambda: [
            standard_normal((H, D, d), g) for g in gens
        ],
        "draw 5 batches: data.standard_normal float32 (float32 runs)": lambda: [
            standard_normal((d, D, H), g, torch.float32) for g in gens
        ],
        "draw 5 batches + labels: task.sample_inner float32 (float32 runs)": lambda: [
            t.sample_inner(B, g, dtype=torch.float32) for t, g in zip(tasks, gens)
        ],
    }
    for fn in fns.values():
        fn()
    ts = timed_blocks(fns, max(ctx.args.repeats * 4, 8))
    base = min(ts["dense closed form (transformer.py), seeds batched"])
    randn = min(ts["draw 5 batches: torch.randn float64"])
    flops = S * dense_flops(B, D, d)
    for name, t in ts.items():
        best, med = min(t), statistics.median(t)
        draw = name.startswith("draw")
        table.add(
            "kernel",
            f"{name} [{allocator}]",
            best * 1e3,
            "ms",
            None if draw else flops / best / 1e9,
            ctx.ceilings and ctx.ceilings["float32"],
            ratio=(randn if draw else base) / best,
            note=f"median {med * 1e3:.2f} ms",
        )
