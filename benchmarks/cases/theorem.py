"""The theorem test's step at d = 10, batch 512, 5 seeds, D in D_GRID, float32 (and float64 without
``--quick``): the general kernel's step (the reference) and the step on the symmetric subspace
(``symmetric.py``; float32 on a CPU: its per-sample loops, ``symmetric_loops.py``) side by side,
interleaved, on Trainers of the same spec, each given its implementation by ``dispatch.plan``; then a
profile of each (draw, the kernel's parts, descent) with each part's FLOPs and bytes, the CPU-hours of the
D = 64 point (5 seeds x 2 D^3 steps), the share of a run's time its recording takes, and the cost of the
theorem config's batch sweeps, run separately and sharing one draw.
"""

from __future__ import annotations

import statistics
import time

from workloads import run_spec

from groupsparse.model import kernel_flops

NAME = "theorem"
d, BATCH, SEEDS = 10, 512, 5
D_GRID = (16, 32, 64)
SPEEDUP_TARGETS = {32: 3.0, 64: 5.0}
CEILING_TARGET = 0.30  # of the float32 GEMM ceiling, by the kernel's own FLOP count, at D = 32 and 64
POINT_STEPS_PER_D3 = 2  # the D = 64 point: 5 seeds x 2 D^3 steps
RECORDING = {"eval_size": 2048, "record_every": 16}  # configs/theorem.yaml's scaling runs
# configs/theorem.yaml's batch sweeps at D = 32: scaling.batch_check's first entry beside the grid's 512,
# and the batches the population limit extrapolates from
SWEEPS = ((128, 256, 512), (512, 1024, 2048))


def plans(spec) -> dict:
    """The implementations compared at this spec's D: the general kernel (the symmetric one's
    threshold put above D), the symmetric kernel at every D (so the D = 16 row shows why the study
    switches only from ``dispatch.SYMMETRIC_MIN_D`` on) and, where that is its float32 loops, the
    symmetric kernel in its torch form (float64's and a GPU's)."""
    from groupsparse.model import dispatch

    out = {
        "general": dispatch.plan(spec, symmetric_min_D=spec.task.D + 1),
        "symmetric": dispatch.plan(spec, symmetric_min_D=1),
    }
    if out["symmetric"].kernel == "symmetric_loops":
        out["torch form"] = dispatch.plan(spec, kernel="symmetric")
    return out


def run(ctx) -> list:
    """Adds the rows; returns the targets at D in SPEEDUP_TARGETS (float32)."""
    targets, per_seed_step = [], {}
    dtypes = ("float32",) if ctx.args.quick else ("float32", "float64")
    for dtype in dtypes:
        for D in D_GRID:
            per_seed_step[(dtype, D)], at_D = side_by_side(ctx, dtype, D)
            targets += at_D
    for dtype in dtypes:
        D = 64
        steps = POINT_STEPS_PER_D3 * D**3
        for who, t in per_seed_step[(dtype, D)].items():
            ctx.table.add(
                "large D point",
                f"D = 64 point, {who}, {dtype}: {SEEDS} seeds x {steps} steps",
                t * SEEDS * steps / 3600,
                "CPU-h",
                note="steps only (the recording share is below), one core",
            )
    recording_share(ctx, per_seed_step)
    sweep_cost(ctx)
    return targets


def side_by_side(ctx, dtype: str, D: int) -> tuple[dict, list]:
    """The implementations' whole steps and kernels alone at one (dtype, D), interleaved; their rows, the
    profile at D = 32 and 64. Returns the best seconds a seed-step by implementation, and the targets."""
    from groupsparse.training.pretrain import Trainer

    torch, args = ctx.torch, ctx.args
    spec = run_spec(dtype, task={"d": d, "D": D}, pretrain={"batch": BATCH, "eval_size": 256})
    trainers = {who: Trainer(spec, list(range(SEEDS)), plan=plan) for who, plan in plans(spec).items()}
    active = torch.ones(SEEDS, dtype=torch.bool)
    drawn = {who: tr.rule.draw() for who, tr in trainers.items()}  # one batch each, reused by the kernels alone

    def steps(who, n=args.steps):
        for _ in range(n):
            trainers[who].rule.step(active)

    def kernel_only(who, n=args.steps):
        for _ in range(n):
            trainers[who].rule.step_grads(drawn[who])

    for who in trainers:
        steps(who, 2)
        kernel_only(who, 1)
    fns = {who: (lambda w=who: steps(w)) for who in ("general", "symmetric")}
    fns |= {f"{who} kernel": (lambda w=who: kernel_only(w)) for who in trainers}
    ts = ctx.timed(fns, args.repeats)
    per = {who: [t / args.steps / SEEDS for t in times] for who, times in ts.items()}
    loops = "torch form" in trainers  # float32: the per-sample loops, beside their torch form
    torch_form = min(per.pop("torch form kernel")) if loops else None
    trainers.pop("torch form", None)
    kern = {who: min(per.pop(f"{who} kernel")) for who in trainers}
    own = {
        "general": kernel_flops.general_flops(BATCH, D, d),
        "symmetric": kernel_flops.symmetric_flops(BATCH, D, d, loops),
    }
    step_rows(ctx, dtype, D, per, kern, own, torch_form)
    best = {who: min(t) for who, t in per.items()}
    if D in (32, 64):
        profile(ctx, trainers, D, dtype)
    return best, targets(ctx, dtype, D, best, kern, own)


def step_rows(ctx, dtype, D, per, kern, own, torch_form) -> None:
    """The rows of the whole steps (``per``: seconds a seed-step of every block) and of the kernels alone."""
    ceiling, dense = ctx.ceilings[dtype], kernel_flops.dense_flops(BATCH, D, d)
    best = {who: min(t) for who, t in per.items()}
    for who, t in best.items():
        rate, dense_rate = own[who] / t / 1e9, dense / t / 1e9
        ctx.table.add(
            "large D step",
            f"{who}, {dtype}, d = {d}, D = {D}, batch {BATCH}, {SEEDS} seeds",
            t * 1e3,
            "ms/seed-step",
            rate,
            ceiling,
            ratio=best["general"] / t,
            note=f"median {statistics.median(per[who]) * 1e3:.3f}; kernel {own[who] / 1e6:.1f} MFLOP; dense "
            f"{dense / 1e6:.0f} MFLOP: {dense_rate:.1f} GFLOP/s ({100 * dense_rate / ceiling:.0f}% of ceiling); "
            "ratio = general / this",
        )
    for who, t in kern.items():  # the kernel alone: step_grads on one drawn batch, no draw, no descent
        dense_rate = dense / t / 1e9
        ctx.table.add(
            "large D kernel",
            f"{who}, {dtype}, d = {d}, D = {D}: step_grads alone",
            t * 1e3,
            "ms/seed-step",
            own[who] / t / 1e9,
            ceiling,
            ratio=kern["general"] / t,
            note=f"dense {dense_rate:.1f} GFLOP/s ({100 * dense_rate / ceiling:.0f}% of ceiling); "
            "ratio = general / this",
        )
    if torch_form is not None:
        ctx.table.add(
            "large D kernel",
            f"symmetric in its torch form, {dtype}, d = {d}, D = {D}: step_grads alone",
            torch_form * 1e3,
            "ms/seed-step",
            kernel_flops.symmetric_flops(BATCH, D, d) / torch_form / 1e9,
            ceiling,
            ratio=kern["general"] / torch_form,
            note=f"the loops are {torch_form / kern['symmetric']:.2f}x this; ratio = general / this",
        )


def targets(ctx, dtype, D, best, kern, own) -> list:
    """The targets at D (float32): the symmetric step's speed-up, and its kernel's share of the ceiling."""
    if dtype != "float32" or D not in SPEEDUP_TARGETS:
        return []
    ceiling, dense = ctx.ceilings["float32"], kernel_flops.dense_flops(BATCH, D, d)
    step_share = own["symmetric"] / best["symmetric"] / 1e9 / ceiling
    share = (
        f"achieved / float32 GEMM ceiling by the kernel's FLOPs (kernel alone), D = {D} (dense count "
        f"{dense / kern['symmetric'] / 1e9:.1f} GFLOP/s; whole step {100 * step_share:.0f}%)"
    )
    return [
        (f"symmetric step / the general one's, float32, D = {D}", best["general"] / best["symmetric"],
         SPEEDUP_TARGETS[D], "x"),
        (share, own["symmetric"] / kern["symmetric"] / 1e9 / ceiling, CEILING_TARGET, ""),
    ]  # fmt: skip


def profile(ctx, trainers, D, dtype) -> None:
    """Each part of a step timed alone on one drawn batch (5 seeds), beside its FLOPs and bytes."""
    from groupsparse.model import symmetric

    torch = ctx.torch
    tr = trainers["symmetric"]
    drawn = tr.rule.draw()
    _, grads = tr.rule.step_grads(drawn)
    W, v, P, sc = tr.parameters()["layer0.W"], tr.parameters()["v"], tr.positions, tr.scale
    seeds = range(SEEDS)
    if tr.plan.kernel == "symmetric_loops":
        return profile_loops(ctx, trainers, D, dtype, drawn, grads)
    XA = [symmetric.scores(W[s], v[s], drawn[s][0], P, sc) for s in seeds]
    S = [symmetric.softmax(A.clone()) for _, A, _ in XA]  # in place: the scores stay for the softmax's timing
    active = torch.ones(SEEDS, dtype=torch.bool)
    item = torch.finfo(tr.dtype).bits // 8
    costs = kernel_flops.symmetric_torch_phases(BATCH, D, d, item)
    m = d + D
    parts = {
        "draw": (tr.rule.draw, (0, item * d * D * BATCH // 2)),
        "scores": (lambda: [symmetric.scores(W[s], v[s], drawn[s][0], P, sc) for s in seeds], costs["scores"]),
        "softmax + exp": (lambda: [symmetric.softmax(XA[s][1]) for s in seeds], costs["softmax"]),
        "backward": (
            lambda: [symmetric.backward(W[s], v[s], XA[s][0], S[s], XA[s][2], drawn[s][1], P, sc) for s in seeds],
            costs["backward"],
        ),
        "descent": (lambda: tr.rule.descend(grads, active), (2 * (m * m + m), 3 * item * (m * m + m))),
        "whole step": (lambda: tr.rule.step(active), (kernel_flops.symmetric_flops(BATCH, D, d), None)),
    }

    profile_rows(ctx, parts, f"symmetric, {dtype}", D, dtype)
    profile_general(ctx, trainers["general"], D, dtype)


def profile_loops(ctx, trainers, D, dtype, drawn, grads) -> None:
    """The float32 step's parts: the draw, the per-sample loops (one numba call a seed, the products with X
    inside), the whole kernel (``symmetric.loss_and_grads``: the loops and what runs around them: the
    position blocks' products, the torch calls), the descent; what runs around the loops is the kernel's
    time less the loops'. FLOPs by ``kernel_flops.symmetric_loops_phases``."""
    from groupsparse.model import symmetric, symmetric_loops

    torch = ctx.torch
    tr = trainers["symmetric"]
    W, v, P, sc = tr.parameters()["layer0.W"], tr.parameters()["v"], tr.positions, tr.scale
    active = torch.ones(SEEDS, dtype=torch.bool)
    m, H = d + D, BATCH // 2

    # the loops' own arguments, made once per seed (as the kernel makes them every step)
    inputs = [[a.copy() for a in symmetric.loop_arguments(W[s], v[s], *drawn[s], P, sc)] for s in range(SEEDS)]
    costs = kernel_flops.symmetric_loops_phases(BATCH, D, d)
    loops_flops, products = costs["loops"], costs["products"]

    def kernel():
        for s in range(SEEDS):
            symmetric.loss_and_grads(W[s], v[s], *drawn[s], P, sc, loops=True)

    parts = {
        "draw": (tr.rule.draw, (0, 4 * d * D * H)),
        "loops": (lambda: [symmetric_loops.loss_and_rows(*inputs[s]) for s in range(SEEDS)], loops_flops),
        "kernel (the loops and P (.) P^T, torch calls)": (
            kernel,
            (loops_flops[0] + products[0], loops_flops[1] + products[1]),
        ),
        "descent": (lambda: tr.rule.descend(grads, active), (2 * (m * m + m), 3 * 4 * (m * m + m))),
        "whole step": (lambda: tr.rule.step(active), (kernel_flops.symmetric_flops(BATCH, D, d, True), None)),
    }

    best = profile_rows(ctx, parts, "symmetric (float32 loops)", D, dtype)
    around = best["kernel (the loops and P (.) P^T, torch calls)"] - best["loops"]
    ctx.table.add(
        "profile",
        f"symmetric (float32 loops), D = {D}: around the loops (P (.) P^T, torch calls)",
        around * 1e3,
        "ms/seed-step",
        note=f"the kernel's time less the loops' (both above, interleaved); {products[0] / 1e6:.2f} MFLOP",
    )
    profile_general(ctx, trainers["general"], D, dtype)


def profile_rows(ctx, parts, label, D, dtype) -> dict:
    """Time each part (``name: (fn, (FLOPs, bytes))``, subnormals flushed) and add a profile row per part:
    time, rate by the part's own FLOPs, bytes' rate. Returns the best seconds per seed-step of each part."""
    from groupsparse.model import cpu

    args, ceiling = ctx.args, ctx.ceilings[dtype]

    def timed(fn):
        def run():
            with cpu.denormals_flushed():
                for _ in range(args.steps):
                    fn()

        return run

    ts = ctx.timed({k: timed(fn) for k, (fn, _) in parts.items()}, args.repeats)
    dense = kernel_flops.dense_flops(BATCH, D, d)
    best = {}
    for name, (_, (fl, by)) in parts.items():
        t = best[name] = min(ts[name]) / args.steps / SEEDS
        ctx.table.add(
            "profile",
            f"{label}, D = {D}: {name}",
            t * 1e3,
            "ms/seed-step",
            fl / t / 1e9 if fl else None,
            ceiling if fl else None,
            note=f"{fl / 1e6:.2f} MFLOP"
            + (f", {by / 1e6:.2f} MB: {by / t / 1e9:.1f} GB/s" if by else "")
            + (f"; dense count {dense / t / 1e9:.1f} GFLOP/s" if name == "whole step" else "")
            + ("; % ceiling by this part's own FLOPs" if name not in ("draw", "whole step") else ""),
        )
    return best


def profile_general(ctx, tr, D, dtype) -> None:
    """The general kernel in the same parts: the fused float32 path (``fastpath.FusedStep``) by its phases."""
    from groupsparse.model import cpu, fastpath

    if dtype != "float32":
        return
    drawn = tr.rule.draw()
    W, v, P, sc = tr.parameters()["layer0.W"], tr.parameters()["v"], tr.positions, tr.scale
    H, M = BATCH // 2, 2

    def phases():
        out = {"scores": 0.0, "softmax + exp": 0.0, "backward": 0.0}
        for s in range(SEEDS):
            X, y = drawn[s]
            t0 = time.perf_counter()
            step = fastpath.FusedStep(W[s], v[s], X, P, sc, True)
            step.scores()
            t1 = time.perf_counter()
            step.softmax()
            t2 = time.perf_counter()
            step.backward(y)
            t3 = time.perf_counter()
            out["scores"] += t1 - t0
            out["softmax + exp"] += t2 - t1
            out["backward"] += t3 - t2
        return out

    s4 = 4
    n = (d + 2 * D + 1) * D * H
    model = {  # FLOPs as kernel_flops.general_flops splits them; bytes: the passes of each phase, once each
        "scores": (H * (2 * d * D * (d + 2 * D + 1) + 2 * d * D * D + 4 * M * D * D), s4 * (2 * n + H * 3 * M * D * D)),
        "softmax + exp": (H * 6 * M * D * D, s4 * H * 5 * M * D * D),
        "backward": (
            H * (2 * d * D * (d + D + 1) + 4 * d * D * D + 6 * M * D * D),
            s4 * H * (2 * M * D * D + 3 * D * D + 2 * (d + 1 + M * D) * D),
        ),
    }
    with cpu.denormals_flushed():
        phases()
        runs = [phases() for _ in range(ctx.args.repeats)]
    for name, (fl, by) in model.items():
        t = min(r[name] for r in runs) / SEEDS
        ctx.table.add(
            "profile",
            f"general, {dtype}, D = {D}: {name}",
            t * 1e3,
            "ms/seed-step",
            fl / t / 1e9,
            ctx.ceilings[dtype],
            note=f"{fl / 1e6:.2f} MFLOP, {by / 1e6:.2f} MB: {by / t / 1e9:.1f} GB/s",
        )


def recording_share(ctx, per_seed_step) -> None:
    """One recorded step's evaluation (5 seeds, the theorem config's eval set) against the steps between."""
    from groupsparse.training.pretrain import Trainer
    from groupsparse.training.recording import attention_steps, record_steps

    torch, args, timed_blocks = ctx.torch, ctx.args, ctx.timed
    for D in (32, 64):
        spec = run_spec("float32", task={"d": d, "D": D}, pretrain={"batch": BATCH, **RECORDING})
        chosen = plans(spec)
        loss = torch.zeros(SEEDS)
        active = torch.ones(SEEDS, dtype=torch.bool)
        steps = POINT_STEPS_PER_D3 * D**3
        n_rec = len(record_steps(steps, RECORDING["record_every"]))
        n_att = len(attention_steps(steps, spec.pretrain.attention_checkpoints))
        for who in ("general", "symmetric"):  # the evaluation's forward pass follows the plan
            tr = Trainer(spec, list(range(SEEDS)), plan=chosen[who])
            tr.recorder.metrics(0, loss, active)
            t_rec = min(
                timed_blocks({"m": lambda t=tr, x=loss, a=active: t.recorder.metrics(0, x, a)}, args.repeats)["m"]
            )
            t_att = min(
                timed_blocks({"a": lambda t=tr, a=active: t.recorder.mean_attention(0, a)}, max(1, args.repeats // 3))[
                    "a"
                ]
            )
            t_steps = per_seed_step[("float32", D)][who] * SEEDS * steps
            rec = n_rec * t_rec + n_att * t_att
            ctx.table.add(
                "recording",
                f"{who}, float32, D = {D}: {n_rec} records + {n_att} attention matrices",
                100 * rec / (rec + t_steps),
                "% of the run",
                note=f"{t_rec * 1e3:.1f} ms a record, {t_att * 1e3:.1f} ms an attention matrix (5 seeds, "
                f"eval {RECORDING['eval_size']}); steps {t_steps / 3600:.2f} h, recording {rec / 3600:.2f} h",
            )


def sweep_cost(ctx) -> None:
    """Batch sweeps at D = 32 (the first entry of configs/theorem.yaml's batch_check, and the batches the
    D = 32 population limit extrapolates from): the runs' steps against the grid batch's run alone, and
    the same runs fed prefixes of one draw of the largest batch (what sharing one sample stream would
    save; a design change the study has not made: it would pair the batches by sample as well as by seed)."""
    from groupsparse.training.pretrain import Trainer

    torch, table, args, timed_blocks = ctx.torch, ctx.table, ctx.args, ctx.timed
    active = torch.ones(SEEDS, dtype=torch.bool)
    for sweep in SWEEPS:
        trainers = {
            B: Trainer(
                run_spec("float32", task={"d": d, "D": 32}, pretrain={"batch": B, "eval_size": 256}), list(range(SEEDS))
            )
            for B in sweep
        }

        def shared(trainers=trainers, sweep=sweep):
            for _ in range(args.steps):
                drawn = trainers[max(sweep)].rule.draw()  # per seed (X (d, D, H), y (H,)): one stream
                for B, t in trainers.items():
                    h = B // 2
                    t.rule.descend(t.rule.step_grads([(X[..., :h], y[:h]) for X, y in drawn])[1], active)

        fns = {B: (lambda t=t: [t.rule.step(active) for _ in range(args.steps)]) for B, t in trainers.items()}
        fns["shared"] = shared
        for f in fns.values():
            f()
        ts = {B: min(t) / args.steps for B, t in timed_blocks(fns, args.repeats).items()}
        one = ts.pop("shared")
        total = sum(ts.values())
        table.add(
            "sweep",
            f"batches {', '.join(map(str, sweep))}, float32, D = 32, 5 seeds",
            total * 1e3,
            "ms/step",
            ratio=total / ts[BATCH],
            note=f"ratio = the runs' steps / the batch-{BATCH} run's; "
            + ", ".join(f"{B}: {t * 1e3:.2f} ms" for B, t in ts.items()),
        )
        table.add(
            "sweep",
            f"batches {', '.join(map(str, sweep))}, one draw of {max(sweep)} shared (prefixes)",
            one * 1e3,
            "ms/step",
            ratio=one / ts[BATCH],
            note=f"ratio = the shared sweep's step / the batch-{BATCH} run's; {one / total:.2f}x the separate runs",
        )
