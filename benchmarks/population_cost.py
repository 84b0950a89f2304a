"""The population rows of the benchmark: what population gradient descent costs at large D.

Population mode (``pretrain.gradient: population``) projects each closed-form batch gradient onto the
invariant subspace (``model/population.py``). Its runs come from the configs themselves
(``study.runs.expand``): the D = 64, 96 and 128 points of configs/cluster/population_large_D.yaml, merged
over configs/population.yaml as Snakemake merges two --configfile arguments (two replicates, kappa up to
2 in flow time at eta(D) = min(0.5, 6 / D), batch 32 from D = 64 on (scaling.batch_by_D), and the batch
check at 4x the batch, 128, over the first quarter). Measured, one seed on one thread as a study job runs:

- side by side at D = 64, interleaved: the projected step at batch 32 and at the batch check's 128, as
  ``Trainer.run`` takes them between recordings (many steps a call, ``Trainer.descend_many``) and one
  ``Trainer.step`` at a time, and the plain batch-512 step (batch gradient descent, the theorem test's
  step): ms per seed-step and their ratios;
- a profile of the projected step: the draw, the kernel, the projection (``population.project``), the
  rebuilding of W and v from the coefficients (``population.build``), the descent around them, and
  what ``Trainer.run`` adds per step (its divergence checks; recordings excluded);
- the CPU-hours of each point: seeds x (steps x step + records x record + checkpoints x attention
  matrix), against the 2 CPU-hour target at D = 64.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "population.yaml"
LARGE_D = ROOT / "configs" / "cluster" / "population_large_D.yaml"
d = 10
SIDE_BY_SIDE_D = 64
LARGE_D_POINTS = (96, 128)
HOURS_TARGET = 2.0  # the D = 64 point's projected runs, both batches, both replicates
FUSED_BLOCK_STEPS = 400  # steps per timed block: several of Trainer.descend_many's calls at D = 64
RUN_LOOP_STEPS = 300  # Trainer.run's steps whose time, less their recordings and steps, is the loop's own


def config(large_d: bool = False) -> dict:
    import yaml

    from groupsparse.study.runs import deep_merge

    base = yaml.safe_load(CONFIG.read_text())
    return deep_merge(base, yaml.safe_load(LARGE_D.read_text())) if large_d else base


def point_runs(cfg: dict, D: int) -> list:
    """The population-mode runs of ``cfg`` at d and D (the grid's run and its batch check)."""
    from groupsparse.study.runs import expand

    return [
        run
        for run in expand(cfg).values()
        if run.spec["task"]["d"] == d
        and run.spec["task"]["D"] == D
        and run.spec.get("pretrain", {}).get("gradient") == "population"
    ]


def spec_of(run, device: str | None = None, **pretrain):
    """The run's RunSpec (on ``device``, ``pretrain`` overrides) for one timed seed."""
    from groupsparse.config.specs import RunSpec

    raw = dict(run.spec) | ({"device": device} if device else {})
    raw["pretrain"] = raw["pretrain"] | pretrain
    return RunSpec.from_dict(raw)


def section(torch, table, args, ceilings, run_spec, timed_blocks) -> list[tuple]:
    """Adds the rows; returns the targets (name, value, target, unit, "<=") for bench.py's target rows."""
    from groupsparse.training.pretrain import Trainer

    checks = []
    active = torch.ones(1, dtype=torch.bool)
    cfg = config(large_d=True)
    runs = sorted(point_runs(cfg, SIDE_BY_SIDE_D), key=lambda r: r.spec["pretrain"]["batch"])
    grid, check = runs[0], runs[-1]
    D = SIDE_BY_SIDE_D
    eta = spec_of(grid).pretrain.step_size(D)
    # the plain step: batch gradient descent at batch 512 (the theorem test's batch), the same task
    plain = spec_of(check, gradient="auto", batch=512)
    trainers = {
        f"projected, batch {grid.spec['pretrain']['batch']}": Trainer(spec_of(grid), [0]),
        f"projected, batch {check.spec['pretrain']['batch']}": Trainer(spec_of(check), [0]),
        "plain, batch 512": Trainer(plain, [0]),
    }
    for tr in trainers.values():
        for _ in range(3):
            tr.rule.step(active)

    def block(tr, n=args.steps * 4):
        """n steps as ``Trainer.run`` takes them between recordings: population mode on the loops in calls of
        many (``Trainer.descend_many``), every other run one ``Trainer.step`` at a time."""
        if not (tr.rule.many is not None):
            for _ in range(n):
                tr.rule.step(active)
            return
        done, k = 0, tr.rule.many.most
        while done < n:
            if tr.rule.many.take(min(k, n - done), [math.inf]) is None:
                raise RuntimeError("a timed step's loss was not finite")
            done += min(k, n - done)

    n_block = FUSED_BLOCK_STEPS
    one_by_one = {
        f"{who}, one Trainer.step at a time": tr for who, tr in trainers.items() if (tr.rule.many is not None)
    }
    ts = timed_blocks(
        {who: (lambda t=tr: block(t, n_block)) for who, tr in trainers.items()}
        | {who: (lambda t=tr: [t.rule.step(active) for _ in range(n_block)]) for who, tr in one_by_one.items()},
        max(args.repeats, 5),
    )
    best = {who: min(t) / n_block for who, t in ts.items()}
    plain_step = best["plain, batch 512"]
    for who, t in best.items():
        tr = trainers.get(who) or one_by_one[who]
        how = (
            ""
            if who in one_by_one or not (tr.rule.many is not None)
            else f", {tr.rule.many.most} steps a call as Trainer.run"
        )
        table.add(
            "population",
            f"{who}, float32, d = {d}, D = {D}, 1 seed ({tr.plan.kernel}{', projected' if tr.plan.projected else ''}"
            f"{how})",
            t * 1e3,
            "ms/seed-step",
            ratio=t / plain_step,
            note=f"median {statistics.median(ts[who]) / n_block * 1e3:.3f}; eta {tr.eta:.4g}; "
            "ratio = this / the plain batch-512 step (interleaved)",
        )
    _profile(torch, table, args, trainers, D, timed_blocks)
    per_step = {grid.spec["pretrain"]["batch"]: best[f"projected, batch {grid.spec['pretrain']['batch']}"]}
    per_step[check.spec["pretrain"]["batch"]] = best[f"projected, batch {check.spec['pretrain']['batch']}"]
    hours = _point_hours(torch, table, args, [grid, check], per_step, D, eta, timed_blocks)
    checks.append(
        (
            f"CPU-hours of the population study's D = {D} point (both batches, both replicates)",
            hours,
            HOURS_TARGET,
            "CPU-h",
            "<=",
        )
    )
    large = config(large_d=True)
    for D in LARGE_D_POINTS:
        runs = sorted(point_runs(large, D), key=lambda r: r.spec["pretrain"]["batch"])
        if not runs:
            continue
        trs = {r.spec["pretrain"]["batch"]: Trainer(spec_of(r), [0]) for r in runs}
        for tr in trs.values():
            tr.rule.step(active)
        n_large = max(FUSED_BLOCK_STEPS // 4, 1)
        blocks = {B: (lambda t=tr, n=n_large: block(t, n)) for B, tr in trs.items()}
        ts = timed_blocks(blocks, max(3, args.repeats // 2))
        per_step = {B: min(t) / n_large for B, t in ts.items()}
        for B, t in per_step.items():
            table.add(
                "population",
                f"projected, batch {B}, float32, d = {d}, D = {D}, 1 seed ({trs[B].plan.kernel})",
                t * 1e3,
                "ms/seed-step",
                note=f"eta {trs[B].eta:.4g}",
            )
        _point_hours(torch, table, args, runs, per_step, D, trs[runs[0].spec["pretrain"]["batch"]].eta, timed_blocks)
    return checks


def _profile(torch, table, args, trainers, D, timed_blocks):
    """The projected steps' parts (``_profile_one``)."""
    for who, tr in trainers.items():
        if tr.plan.projected:
            _profile_one(torch, table, args, who, tr, D, timed_blocks)


def _profile_one(torch, table, args, who, tr, D, timed_blocks):
    """The projected step's parts, each timed alone on one drawn batch, interleaved; what ``Trainer.run``
    adds per step is its time over RUN_LOOP_STEPS steps less its recordings' and the steps'."""
    from groupsparse.model import cpu, dispatch, population

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
        "whole step (Trainer.step)": lambda: tr.rule.step(active),
    }
    n = args.steps * 4

    def timed(fn):
        def run():
            with cpu.denormals_flushed():
                for _ in range(n):
                    fn()

        return run

    ts = timed_blocks({k: timed(fn) for k, fn in parts.items()}, max(args.repeats, 5))
    best = {k: min(t) / n for k, t in ts.items()}
    step = best["whole step (Trainer.step)"]
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
        f"{who}, D = {D}: Trainer.step's own calls",
        (step - inside) * 1e3,
        "ms/seed-step",
        note="the whole step less draw, step_grads and descend (above)",
    )
    loop = _run_loop(torch, tr, timed_blocks) - step
    table.add(
        "population profile",
        f"{who}, D = {D}: Trainer.run's own work per step",
        loop * 1e3,
        "ms/seed-step",
        note=f"{100 * loop / step:.0f}% of the step: divergence checks and bookkeeping ({RUN_LOOP_STEPS} "
        "steps of Trainer.run less their recordings and steps)",
    )


def _run_loop(torch, tr, timed_blocks) -> float:
    """Seconds per step of ``Trainer.run`` on ``tr``'s spec without its recordings (subtracted, measured)."""
    from dataclasses import replace

    from groupsparse.training.pretrain import Trainer
    from groupsparse.training.recording import attention_steps, record_steps

    p = replace(tr.spec.pretrain, steps=RUN_LOOP_STEPS, record_every=RUN_LOOP_STEPS, eval_size=256)
    spec = replace(tr.spec, pretrain=p)
    n_rec = len(record_steps(p.steps, p.record_every))
    n_att = len(attention_steps(p.steps, p.attention_checkpoints))
    probe = Trainer(spec, [0])
    loss, active = torch.zeros(1), torch.ones(1, dtype=torch.bool)
    rec = min(timed_blocks({"m": lambda: probe.metrics(0, loss, active)}, 5)["m"])
    att = min(timed_blocks({"a": lambda: probe.mean_attention(0, active)}, 3)["a"])
    walls = []
    for _ in range(2):
        t0 = time.perf_counter()
        Trainer(spec, [0]).run()
        walls.append(time.perf_counter() - t0)
    return (min(walls) - n_rec * rec - n_att * att) / RUN_LOOP_STEPS


def _recording_seconds(torch, spec, timed_blocks) -> tuple[float, float]:
    """Seconds of one record (``metrics``) and one attention checkpoint of a one-seed run of ``spec``."""
    from groupsparse.training.pretrain import Trainer

    tr = Trainer(spec, [0])
    loss, active = torch.zeros(1), torch.ones(1, dtype=torch.bool)
    tr.recorder.metrics(0, loss, active)
    rec = min(timed_blocks({"m": lambda: tr.recorder.metrics(0, loss, active)}, 3)["m"])
    att = min(timed_blocks({"a": lambda: tr.recorder.mean_attention(0, active)}, 2)["a"])
    return rec, att


def _point_hours(torch, table, args, runs, per_step, D, eta, timed_blocks) -> float:
    """CPU-hours of the point's runs (every seed a job, one thread), from the measured step and recording."""
    from groupsparse.training.recording import attention_steps, record_steps

    total, parts = 0.0, []
    for run in runs:
        p = run.spec["pretrain"]
        spec = spec_of(run)
        rec, att = _recording_seconds(torch, spec, timed_blocks)
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
    table.add(
        "population point",
        f"D = {D} point: {' + '.join(r.name for r in runs)}, eta {eta:.4g}",
        total / 3600,
        "CPU-h",
        note="; ".join(parts),
    )
    return total / 3600
