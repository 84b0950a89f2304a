"""What population gradient descent costs at large D.

Population mode (``pretrain.gradient: population``) projects each closed-form batch gradient onto the
invariant subspace (``model/population.py``). Its runs come from the configs themselves
(``study.runs.expand``): the D = 64, 96 and 128 points of configs/cluster/population_large_D.yaml, merged
over configs/population_gd.yaml as Snakemake merges two --configfile arguments (two replicates, kappa up to
2 in flow time at eta(D) = min(0.5, 6 / D), batch 32 from D = 64 on (scaling.batch_by_D), and the batch
check at 4x the batch, 128, over the first quarter). Measured, one seed on one thread as a study job runs:

- side by side at D = 64, interleaved: the projected step at batch 32 and at the batch check's 128, as
  a run takes them between records (many steps a call, ``ManySteps.take``) and one ``Steps.step``
  at a time, and the plain batch-512 step (batch gradient descent, the theorem test's
  step): ms per seed-step and their ratios;
- a profile of the projected step: the draw, the kernel, the projection (``population.project``), the
  rebuilding of W and v from the coefficients (``population.build``), the descent around them, and
  what ``Trainer.run`` adds per step (its divergence checks; recordings excluded);
- the CPU-hours of each point: seeds x (steps x step + records x record + checkpoints x attention
  matrix), against the 2 CPU-hour target at D = 64.
"""

from __future__ import annotations

import statistics
import time

from workloads import point_runs, population_config, spec_of, steps_as_a_run_takes_them

NAME = "population"
d = 10
SIDE_BY_SIDE_D = 64
LARGE_D_POINTS = (96, 128)
HOURS_TARGET = 2.0  # the D = 64 point's projected runs, both batches, both replicates
FUSED_BLOCK_STEPS = 400  # steps per timed block: several calls of many steps at D = 64
RUN_LOOP_STEPS = 300  # Trainer.run's steps whose time, less their records and steps, is the loop's own


def run(ctx) -> list:
    """Adds the rows; returns the D = 64 point's CPU-hours as a target (a cap)."""
    cfg = population_config(large_d=True)
    runs = point_runs(cfg, SIDE_BY_SIDE_D, d)  # by batch: the grid's run, then its batch check
    grid, check = runs[0], runs[-1]
    per_step = side_by_side(ctx, grid, check)
    eta = spec_of(grid).pretrain.step_size(SIDE_BY_SIDE_D)
    hours = point_hours(ctx, [grid, check], per_step, SIDE_BY_SIDE_D, eta)
    for D in LARGE_D_POINTS:
        large_point(ctx, cfg, D)
    name = f"CPU-hours of the population study's D = {SIDE_BY_SIDE_D} point (both batches, both replicates)"
    return [(name, hours, HOURS_TARGET, "CPU-h", "<=")]


def side_by_side(ctx, grid, check) -> dict:
    """At D = 64, interleaved: the projected step at the grid's and the check's batch, as a run takes them and
    one at a time, and the plain batch-512 step; their rows and the projected steps' profile. Returns the
    seconds a projected step by batch."""
    from groupsparse.training.pretrain import Trainer

    torch, D = ctx.torch, SIDE_BY_SIDE_D
    active = torch.ones(1, dtype=torch.bool)
    # the plain step: batch gradient descent at batch 512 (the theorem test's batch), the same task
    plain = spec_of(check, gradient="auto", batch=512)
    trainers = {f"projected, batch {r.spec['pretrain']['batch']}": Trainer(spec_of(r), [0]) for r in (grid, check)}
    trainers["plain, batch 512"] = Trainer(plain, [0])
    for tr in trainers.values():
        for _ in range(3):
            tr.rule.step(active)
    n = FUSED_BLOCK_STEPS
    one_by_one = {f"{who}, one Steps.step at a time": tr for who, tr in trainers.items() if tr.rule.many is not None}
    ts = ctx.timed(
        {who: (lambda t=tr: steps_as_a_run_takes_them(torch, t, n)) for who, tr in trainers.items()}
        | {who: (lambda t=tr: [t.rule.step(active) for _ in range(n)]) for who, tr in one_by_one.items()},
        max(ctx.args.repeats, 5),
    )
    best = {who: min(t) / n for who, t in ts.items()}
    for who, t in best.items():
        tr = trainers.get(who) or one_by_one[who]
        how = "" if who in one_by_one or tr.rule.many is None else f", {tr.rule.many.most} steps a call as Trainer.run"
        ctx.table.add(
            "population",
            f"{who}, float32, d = {d}, D = {D}, 1 seed ({tr.plan.kernel}{', projected' if tr.plan.projected else ''}"
            f"{how})",
            t * 1e3,
            "ms/seed-step",
            ratio=t / best["plain, batch 512"],
            note=f"median {statistics.median(ts[who]) / n * 1e3:.3f}; eta {tr.eta:.4g}; "
            "ratio = this / the plain batch-512 step (interleaved)",
        )
    for who, tr in trainers.items():
        if tr.plan.projected:
            profile(ctx, who, tr, D)
    return {r.spec["pretrain"]["batch"]: best[f"projected, batch {r.spec['pretrain']['batch']}"] for r in (grid, check)}


def large_point(ctx, cfg, D: int) -> None:
    """A point above D = 64: its projected steps as a run takes them, and its CPU-hours."""
    from groupsparse.training.pretrain import Trainer

    runs = point_runs(cfg, D, d)
    if not runs:
        return
    trs = {r.spec["pretrain"]["batch"]: Trainer(spec_of(r), [0]) for r in runs}
    for tr in trs.values():
        tr.rule.step(ctx.torch.ones(1, dtype=ctx.torch.bool))
    n = max(FUSED_BLOCK_STEPS // 4, 1)
    blocks = {B: (lambda t=tr: steps_as_a_run_takes_them(ctx.torch, t, n)) for B, tr in trs.items()}
    per_step = {B: min(t) / n for B, t in ctx.timed(blocks, max(3, ctx.args.repeats // 2)).items()}
    for B, t in per_step.items():
        ctx.table.add(
            "population",
            f"projected, batch {B}, float32, d = {d}, D = {D}, 1 seed ({trs[B].plan.kernel})",
            t * 1e3,
            "ms/seed-step",
            note=f"eta {trs[B].eta:.4g}",
        )
    point_hours(ctx, runs, per_step, D, trs[runs[0].spec["pretrain"]["batch"]].eta)


def profile(ctx, who, tr, D) -> None:
    """The projected step's parts, each timed alone on one drawn batch, interleaved; what ``Trainer.run``
    adds per step is its time over RUN_LOOP_STEPS steps less its recordings' and the steps'."""
    from groupsparse.model import cpu, dispatch, population

    torch, table, args = ctx.torch, ctx.table, ctx.args
    active = torch.ones(1, dtype=torch.bool)
    drawn = tr.rule.draw()
    (X, y), task = drawn[0], tr.tasks[0]
    W, v, P = tr.parameters()["layer0.W"][0], tr.parameters()["v"][0], tr.positions
    _, gW, gv = dispatch.loss_and_grads(tr.plan, W, v, X, y, P, tr.scale, tr.batches.antithetic)
    _, grads = tr.rule.step_grads(drawn)
    coef = tr.coef[0].clone()
    parts = {
        "draw": tr.rule.draw,
        "kernel (the batch gradient)": lambda: dispatch.loss_and_grads(tr.plan, W, v, X, y, P, tr.scale, True),
        "projection (population.project)": lambda: population.project(gW, gv, task.v_star, task.j_star, P),
        "W and v from the coefficients (population.build)": lambda: population.build(
            coef, task.v_star, task.j_star, P, tr.dtype
        ),
        "step_grads (kernel, projection, the trainer's calls)": lambda: tr.rule.step_grads(drawn),
        "descend (coefficients, then W and v built)": lambda: tr.rule.descend(grads, active),
        "whole step (Steps.step)": lambda: tr.rule.step(active),
    }
    n = args.steps * 4

    def timed(fn):
        def run():
            with cpu.denormals_flushed():
                for _ in range(n):
                    fn()

        return run

    ts = ctx.timed({k: timed(fn) for k, fn in parts.items()}, max(args.repeats, 5))
    best = {k: min(t) / n for k, t in ts.items()}
    step = best["whole step (Steps.step)"]
    for name, t in best.items():
        table.add(
            "population profile",
            f"{who}, D = {D}: {name}",
            t * 1e3,
            "ms/seed-step",
            note=f"{100 * t / step:.0f}% of the step",
        )
    inside = best["draw"] + best["step_grads (kernel, projection, the trainer's calls)"]
    inside += best["descend (coefficients, then W and v built)"]
    table.add(
        "population profile",
        f"{who}, D = {D}: Steps.step's own calls",
        (step - inside) * 1e3,
        "ms/seed-step",
        note="the whole step less draw, step_grads and descend (above)",
    )
    loop = run_loop_seconds(ctx, tr) - step
    table.add(
        "population profile",
        f"{who}, D = {D}: Trainer.run's own work per step",
        loop * 1e3,
        "ms/seed-step",
        note=f"{100 * loop / step:.0f}% of the step: divergence checks and bookkeeping ({RUN_LOOP_STEPS} "
        "steps of Trainer.run less their recordings and steps)",
    )


def run_loop_seconds(ctx, tr) -> float:
    """Seconds per step of ``Trainer.run`` on ``tr``'s spec without its recordings (subtracted, measured)."""
    from dataclasses import replace

    from groupsparse.training.pretrain import Trainer
    from groupsparse.training.recording import attention_steps, record_steps

    torch, timed_blocks = ctx.torch, ctx.timed
    p = replace(tr.spec.pretrain, steps=RUN_LOOP_STEPS, record_every=RUN_LOOP_STEPS, eval_size=256)
    spec = replace(tr.spec, pretrain=p)
    n_rec = len(record_steps(p.steps, p.record_every))
    n_att = len(attention_steps(p.steps, p.attention_checkpoints))
    probe = Trainer(spec, [0])
    loss, active = torch.zeros(1), torch.ones(1, dtype=torch.bool)
    rec = min(timed_blocks({"m": lambda: probe.recorder.metrics(0, loss, active)}, 5)["m"])
    att = min(timed_blocks({"a": lambda: probe.recorder.mean_attention(0, active)}, 3)["a"])
    walls = []
    for _ in range(2):
        t0 = time.perf_counter()
        Trainer(spec, [0]).run()
        walls.append(time.perf_counter() - t0)
    return (min(walls) - n_rec * rec - n_att * att) / RUN_LOOP_STEPS


def recording_seconds(ctx, spec) -> tuple[float, float]:
    """Seconds of one record (``metrics``) and one attention checkpoint of a one-seed run of ``spec``."""
    from groupsparse.training.pretrain import Trainer

    torch, timed_blocks = ctx.torch, ctx.timed
    tr = Trainer(spec, [0])
    loss, active = torch.zeros(1), torch.ones(1, dtype=torch.bool)
    tr.recorder.metrics(0, loss, active)
    rec = min(timed_blocks({"m": lambda: tr.recorder.metrics(0, loss, active)}, 3)["m"])
    att = min(timed_blocks({"a": lambda: tr.recorder.mean_attention(0, active)}, 2)["a"])
    return rec, att


def point_hours(ctx, runs, per_step, D, eta) -> float:
    """CPU-hours of the point's runs (every seed a job, one thread), from the measured step and recording."""
    from groupsparse.training.recording import attention_steps, record_steps

    total, parts = 0.0, []
    for run in runs:
        p = run.spec["pretrain"]
        spec = spec_of(run)
        rec, att = recording_seconds(ctx, spec)
        n_rec = len(record_steps(p["steps"], p["record_every"]))
        n_att = len(attention_steps(p["steps"], spec.pretrain.attention_checkpoints))
        seeds = len(run.seeds)
        steps_s = seeds * p["steps"] * per_step[p["batch"]]
        rec_s = seeds * (n_rec * rec + n_att * att)
        total += steps_s + rec_s
        parts.append(
            f"{run.name}: {seeds} x {p['steps']} steps of batch {p['batch']} {steps_s / 3600:.2f} h"
            f" + {n_rec} records {rec_s / 3600:.2f} h"
        )
    ctx.table.add(
        "population point",
        f"D = {D} point: {' + '.join(r.name for r in runs)}, eta {eta:.4g}",
        total / 3600,
        "CPU-h",
        note="; ".join(parts),
    )
    return total / 3600
