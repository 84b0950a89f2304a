"""The general kernel's torch form under ``torch.compile`` (the fused float32 kernel calls numba, which
torch.compile cannot trace) against the same form eager and the project's step (fused), timed interleaved
on three Trainers of one spec (the same draws): compile time, ms a step, gradient deviation, rerun bits."""

from __future__ import annotations

import time

from workloads import kernel_step, run_spec

NAME = "compile"


def run(ctx) -> list:
    """The fast kernel's torch form under torch.compile (the fused float32 kernel calls numba, which
    torch.compile cannot trace), against the same torch form eager and the project's step (fused), timed
    interleaved on three Trainers of one spec (the same draws)."""
    from groupsparse.model import dispatch, fastpath
    from groupsparse.training.pretrain import Trainer

    torch, table, args, timed_blocks = ctx.torch, ctx.table, ctx.args, ctx.timed
    spec = run_spec("float32")
    seeds = list(range(5))
    eager = fastpath.seed_loss_and_grads
    compiled = torch.compile(eager, dynamic=False, fullgraph=True)
    trainers = {who: Trainer(spec, seeds) for who in ("project", "eager", "compiled")}
    active = torch.ones(len(seeds), dtype=torch.bool)
    for tr in trainers.values():
        tr.rule.step(active)
        tr.rule.step(active)
        tr.rule.step(active)  # away from W = v = 0, where the W-gradient vanishes
    tr = trainers["compiled"]
    (X, y), W, v = tr.rule.draw()[0], tr.parameters()["layer0.W"], tr.parameters()["v"]
    t0 = time.perf_counter()  # compile here, on the main thread
    got = compiled(W[0], v[0], X, y, tr.positions, tr.scale, True)
    compile_s = time.perf_counter() - t0
    want = dispatch.loss_and_grads(tr.plan, W[0], v[0], X, y, tr.positions, tr.scale, True)
    dev = max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(got[1:], want[1:]))
    # the compiled kernel on one seed's inputs alone equals its result for that seed (no cross-seed state)
    again = compiled(W[0].clone(), v[0].clone(), X.clone(), y.clone(), tr.positions, tr.scale, True)
    same_bits = all(torch.equal(a, b) for a, b in zip(got, again))
    fns = {
        "project": lambda: [trainers["project"].rule.step(active) for _ in range(args.steps)],
        "eager": lambda: kernel_step(torch, trainers["eager"], eager, active, args.steps),
        "compiled": lambda: kernel_step(torch, trainers["compiled"], compiled, active, args.steps),
    }
    for fn in fns.values():
        fn()
    ts = timed_blocks(fns, args.repeats)
    best = {k: min(t) / args.steps for k, t in ts.items()}
    table.add(
        "compile",
        "project, 5 seeds, float32: the project's step (Steps.step, fused kernel)",
        best["project"] * 1e3,
        "ms/step",
        ratio=1.0,
        note="timed interleaved with the rows below",
    )
    table.add(
        "compile",
        "project, 5 seeds, float32: the kernel's torch form, eager",
        best["eager"] * 1e3,
        "ms/step",
        ratio=best["project"] / best["eager"],
        note="fastpath.seed_loss_and_grads in the trainer's draw and descent; ratio = project / this",
    )
    table.add(
        "compile",
        "project, 5 seeds, float32: the kernel's torch form under torch.compile",
        best["compiled"] * 1e3,
        "ms/step",
        ratio=best["project"] / best["compiled"],
        note=f"compile {compile_s:.1f} s (inductor's disk cache may shorten it); eager / this "
        f"{best['eager'] / best['compiled']:.2f}x; max rel. gradient deviation from the fused kernel {dev:.1e}; "
        f"rerun on copies == first run: {same_bits}",
    )
    return []
