"""The large-D rows of the benchmark: the theorem test's step at d = 10, batch 512, 5 seeds.

The general kernel's step (the reference) and the step on the symmetric subspace
(``symmetric.py``; float32 on a CPU: its per-sample loops, ``symmetric_loops.py``) are timed side by
side, interleaved, on Trainers of the same spec, each given its implementation by ``dispatch.plan``;
then a profile of each (draw, the kernel's parts, descent) with each part's FLOPs and bytes, the
CPU-hours of the D = 64 point (5 seeds x 2 D^3 steps), the share of a run's time its recording
takes, and the cost of the theorem config's batch sweeps, run separately and sharing one draw.
"""

from __future__ import annotations

import statistics

from groupsparse.model import kernel_flops

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


def section(torch, table, args, ceilings, run_spec, timed_blocks) -> list[tuple]:
    """Adds the rows; returns the targets as (name, value, target, unit) for bench.py's target rows."""
    from groupsparse.training.pretrain import Trainer

    checks, per_seed_step = [], {}
    dtypes = ("float32",) if args.quick else ("float32", "float64")
    for dtype in dtypes:
        for D in D_GRID:
            spec = run_spec(dtype, task={"d": d, "D": D}, pretrain={"batch": BATCH, "eval_size": 256})
            seeds = list(range(SEEDS))
            chosen = plans(spec)
            trainers = {who: Trainer(spec, seeds, plan=plan) for who, plan in chosen.items()}
            active = torch.ones(SEEDS, dtype=torch.bool)

            def block(who, n=args.steps, trainers=trainers, active=active):
                for _ in range(n):
                    trainers[who].rule.step(active)

            drawn = {who: trainers[who].rule.draw() for who in trainers}  # one batch each, reused

            def kernel_only(who, n=args.steps, trainers=trainers, drawn=drawn):
                for _ in range(n):
                    trainers[who].rule.step_grads(drawn[who])

            for who in trainers:
                block(who, 2)
                kernel_only(who, 1)
            fns = {who: (lambda w=who: block(w)) for who in ("general", "symmetric")}
            fns |= {f"{who} kernel": (lambda w=who: kernel_only(w)) for who in trainers}
            ts = timed_blocks(fns, args.repeats)
            loops = "torch form" in trainers  # float32: the per-sample loops, beside their torch form
            torch_form_kernel = min(ts.pop("torch form kernel")) / args.steps / SEEDS if loops else None
            trainers.pop("torch form", None)
            kern = {who: min(ts.pop(f"{who} kernel")) / args.steps / SEEDS for who in trainers}
            best = {who: min(t) / args.steps / SEEDS for who, t in ts.items()}
            med = {who: statistics.median(t) / args.steps / SEEDS for who, t in ts.items()}
            per_seed_step[(dtype, D)] = best
            dense = kernel_flops.dense_flops(BATCH, D, d)
            own = {
                "general": kernel_flops.general_flops(BATCH, D, d),
                "symmetric": kernel_flops.symmetric_flops(BATCH, D, d, loops),
            }
            for who in trainers:
                rate, dense_rate = own[who] / best[who] / 1e9, dense / best[who] / 1e9
                table.add(
                    "large D step",
                    f"{who}, {dtype}, d = {d}, D = {D}, batch {BATCH}, {SEEDS} seeds",
                    best[who] * 1e3,
                    "ms/seed-step",
                    rate,
                    ceilings[dtype],
                    ratio=best["general"] / best[who],
                    note=f"median {med[who] * 1e3:.3f}; kernel {own[who] / 1e6:.1f} MFLOP; dense {dense / 1e6:.0f} "
                    f"MFLOP: {dense_rate:.1f} GFLOP/s ({100 * dense_rate / ceilings[dtype]:.0f}% of ceiling); "
                    "ratio = general / this",
                )
            for who in trainers:  # the kernel alone: step_grads on one drawn batch, no draw, no descent
                rate, dense_rate = own[who] / kern[who] / 1e9, dense / kern[who] / 1e9
                table.add(
                    "large D kernel",
                    f"{who}, {dtype}, d = {d}, D = {D}: step_grads alone",
                    kern[who] * 1e3,
                    "ms/seed-step",
                    rate,
                    ceilings[dtype],
                    ratio=kern["general"] / kern[who],
                    note=f"dense {dense_rate:.1f} GFLOP/s ({100 * dense_rate / ceilings[dtype]:.0f}% of ceiling); "
                    "ratio = general / this",
                )
            if torch_form_kernel is not None:
                table.add(
                    "large D kernel",
                    f"symmetric in its torch form, {dtype}, d = {d}, D = {D}: step_grads alone",
                    torch_form_kernel * 1e3,
                    "ms/seed-step",
                    kernel_flops.symmetric_flops(BATCH, D, d) / torch_form_kernel / 1e9,
                    ceilings[dtype],
                    ratio=kern["general"] / torch_form_kernel,
                    note=f"the loops are {torch_form_kernel / kern['symmetric']:.2f}x this; ratio = general / this",
                )
            if dtype == "float32" and D in SPEEDUP_TARGETS:
                checks.append(
                    (
                        f"symmetric step / the general one's, float32, D = {D}",
                        best["general"] / best["symmetric"],
                        SPEEDUP_TARGETS[D],
                        "x",
                    )
                )
                step_share = own["symmetric"] / best["symmetric"] / 1e9 / ceilings["float32"]
                checks.append(
                    (
                        f"achieved / float32 GEMM ceiling by the kernel's FLOPs (kernel alone), D = {D} "
                        f"(dense count {dense / kern['symmetric'] / 1e9:.1f} GFLOP/s; whole step "
                        f"{100 * step_share:.0f}%)",
                        own["symmetric"] / kern["symmetric"] / 1e9 / ceilings["float32"],
                        CEILING_TARGET,
                        "",
                    )
                )
            if D in (32, 64):
                _profile(torch, table, args, trainers, D, dtype, ceilings[dtype], timed_blocks)
    for dtype in dtypes:
        D = 64
        steps = POINT_STEPS_PER_D3 * D**3
        for who, t in per_seed_step[(dtype, D)].items():
            table.add(
                "large D point",
                f"D = 64 point, {who}, {dtype}: {SEEDS} seeds x {steps} steps",
                t * SEEDS * steps / 3600,
                "CPU-h",
                note="steps only (the recording share is below), one core",
            )
    _recording_share(torch, table, args, run_spec, per_seed_step, timed_blocks)
    _sweep_cost(torch, table, args, run_spec, timed_blocks)
    return checks


def _profile(torch, table, args, trainers, D, dtype, ceiling, timed_blocks):
    """Each part of a step timed alone on one drawn batch (5 seeds), beside its FLOPs and bytes."""
    from groupsparse.model import symmetric

    tr = trainers["symmetric"]
    drawn = tr.rule.draw()
    _, grads = tr.rule.step_grads(drawn)
    W, v, P, sc = tr.parameters()["layer0.W"], tr.parameters()["v"], tr.positions, tr.scale
    seeds = range(SEEDS)
    if tr.plan.kernel == "symmetric_loops":
        return _profile_loops(torch, table, args, trainers, D, dtype, ceiling, timed_blocks, drawn, grads)
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

    _profile_rows(table, args, parts, f"symmetric, {dtype}", D, ceiling, timed_blocks)
    _profile_general(torch, table, args, trainers["general"], D, dtype, ceiling, timed_blocks)


def _profile_loops(torch, table, args, trainers, D, dtype, ceiling, timed_blocks, drawn, grads):
    """The float32 step's parts: the draw, the per-sample loops (one numba call a seed, the products with X
    inside), the whole kernel (``symmetric.loss_and_grads``: the loops and what runs around them: the
    position blocks' products, the torch calls), the descent; what runs around the loops is the kernel's
    time less the loops'. FLOPs by ``loops_phase_costs``."""
    from groupsparse.model import symmetric, symmetric_loops

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

    best = _profile_rows(table, args, parts, "symmetric (float32 loops)", D, ceiling, timed_blocks)
    around = best["kernel (the loops and P (.) P^T, torch calls)"] - best["loops"]
    table.add(
        "profile",
        f"symmetric (float32 loops), D = {D}: around the loops (P (.) P^T, torch calls)",
        around * 1e3,
        "ms/seed-step",
        note=f"the kernel's time less the loops' (both above, interleaved); {products[0] / 1e6:.2f} MFLOP",
    )
    _profile_general(torch, table, args, trainers["general"], D, dtype, ceiling, timed_blocks)


def _profile_rows(table, args, parts, label, D, ceiling, timed_blocks):
    """Time each part (``name: (fn, (FLOPs, bytes))``, subnormals flushed) and add a profile row per part:
    time, rate by the part's own FLOPs, bytes' rate. Returns the best seconds per seed-step of each part."""
    from groupsparse.model import cpu

    def timed(fn):
        def run():
            with cpu.denormals_flushed():
                for _ in range(args.steps):
                    fn()

        return run

    ts = timed_blocks({k: timed(fn) for k, (fn, _) in parts.items()}, args.repeats)
    dense = kernel_flops.dense_flops(BATCH, D, d)
    best = {}
    for name, (_, (fl, by)) in parts.items():
        t = best[name] = min(ts[name]) / args.steps / SEEDS
        table.add(
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


def _profile_general(torch, table, args, tr, D, dtype, ceiling, timed_blocks):
    """The general kernel in the same parts: the fused float32 path (fused.py) cut at its phases."""
    import numpy as np

    from groupsparse.model import cpu, fastpath, fused

    if dtype != "float32":
        return
    drawn = tr.rule.draw()
    W, v, P, sc = tr.parameters()["layer0.W"], tr.parameters()["v"], tr.positions, tr.scale
    H, M = BATCH // 2, 2
    state = {}

    def scores(s):
        X, y = drawn[s]
        buf, arr = fastpath._fused_buffers(d, D, H, M)
        Xa, Pa = X.numpy(), P.numpy()
        fused.prologue(W[s].numpy(), v[s].numpy(), Pa, sc * fastpath.LOG2E, *fastpath._get(arr, "WcatT C pv"))
        np.matmul(arr["WcatT"], Xa.reshape(d, D * H), out=arr["R"])
        R = arr["R"].reshape(d + 2 * D + 1, D, H)
        fused.scores(R, Xa, arr["C"], arr["attn"])
        state.update(buf=buf, arr=arr, R=R, Xa=Xa)

    def softmax(s):
        buf, arr = state["buf"], state["arr"]
        buf["attn"].exp2_()
        fused.normalise(arr["attn"], state["R"][-1], *fastpath._get(arr, "pv u r ubar f"))

    def backward(s):
        buf, arr, Xa = state["buf"], state["arr"], state["Xa"]
        _, g = fastpath._loss_and_slope(buf["f"], drawn[s][1], True)
        fused.gradient_rows(
            *fastpath._get(arr, "attn u ubar r"), g.numpy(), Xa, *fastpath._get(arr, "K even_gG even_gr")
        )
        np.matmul(arr["K"].reshape(-1, D * H), Xa.reshape(d, D * H).T, out=arr["KX"])
        torch.sum(buf["even_gG"], -1, out=buf["pp"])
        torch.sum(buf["even_gr"], -1, out=buf["pvsum"])
        gW, gv = torch.empty(d + D, d + D), torch.empty(d + D)
        fused.epilogue(*fastpath._get(arr, "KX Tsum pp pvsum"), P.numpy(), sc, True, gW.numpy(), gv.numpy())

    def phases():
        out = {"scores": 0.0, "softmax + exp": 0.0, "backward": 0.0}
        import time

        for s in range(SEEDS):
            for name, fn in (("scores", scores), ("softmax + exp", softmax), ("backward", backward)):
                t0 = time.perf_counter()
                fn(s)
                out[name] += time.perf_counter() - t0
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
        runs = [phases() for _ in range(args.repeats)]
    for name, (fl, by) in model.items():
        t = min(r[name] for r in runs) / SEEDS
        table.add(
            "profile",
            f"general, {dtype}, D = {D}: {name}",
            t * 1e3,
            "ms/seed-step",
            fl / t / 1e9,
            ceiling,
            note=f"{fl / 1e6:.2f} MFLOP, {by / 1e6:.2f} MB: {by / t / 1e9:.1f} GB/s",
        )


def _recording_share(torch, table, args, run_spec, per_seed_step, timed_blocks):
    """One recorded step's evaluation (5 seeds, the theorem config's eval set) against the steps between."""
    from groupsparse.training.pretrain import Trainer
    from groupsparse.training.recording import attention_steps, record_steps

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
            table.add(
                "recording",
                f"{who}, float32, D = {D}: {n_rec} records + {n_att} attention matrices",
                100 * rec / (rec + t_steps),
                "% of the run",
                note=f"{t_rec * 1e3:.1f} ms a record, {t_att * 1e3:.1f} ms an attention matrix (5 seeds, "
                f"eval {RECORDING['eval_size']}); steps {t_steps / 3600:.2f} h, recording {rec / 3600:.2f} h",
            )


def _sweep_cost(torch, table, args, run_spec, timed_blocks):
    """Batch sweeps at D = 32 (the first entry of configs/theorem.yaml's batch_check, and the batches the
    D = 32 population limit extrapolates from): the runs' steps against the grid batch's run alone, and
    the same runs fed prefixes of one draw of the largest batch (what sharing one sample stream would
    save; a design change the study has not made: it would pair the batches by sample as well as by seed)."""
    from groupsparse.training.pretrain import Trainer

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
