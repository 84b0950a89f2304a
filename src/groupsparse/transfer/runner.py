"""Run one pretrained checkpoint against methods x sample sizes: the long results table.

Every (downstream task, seed, n) draws its n training samples from a generator hashed
from that identity alone, and every (downstream task, seed) one test set, so all methods
see the same data and a grid split across jobs gives the same rows as one job.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from .. import io
from ..seeding import torch_generator
from ..specs import RunSpec, config_hash
from .methods import METHODS, Context, net_steps, warm_up_group_lasso
from .spec import TransferSpec, check_grid
from .tasks import (
    Pretrained,
    check_checkpoint,
    draw,
    fit_identity,
    heldout_generator,
    make_downstream_tasks,
    train_generator,
)

DTYPES = {"float32": torch.float32, "float64": torch.float64}
STATUSES = ("ok", "diverged", "failed", "skipped_pretrain_diverged")
COLUMNS = [
    "run",
    "task_name",
    "d",
    "D",
    "downstream",
    "seed",
    "j_star",
    "pretrain_j_star",
    "method",
    "n",
    "test_accuracy",
    "test_loss",
    "train_accuracy",
    "train_loss",
    "fit_seconds",
    "status",
    "hyperparameters",
    "cos_direction",
]


@dataclass
class TransferResult:
    table: pd.DataFrame
    seeds: list[int]
    wall_seconds: float
    group_lasso_compile_seconds: float | None = None
    seconds_per_method: dict[str, float] = field(default_factory=dict)


def transfer_hash(run_spec: RunSpec, spec: TransferSpec) -> str:
    """Identifies what determines the numbers (not the grid: a split grid gives the same rows)."""
    return config_hash({"run": run_spec.science_hash(), "transfer": spec.science_hash()})


def run_transfer(
    run_spec: RunSpec,
    spec: TransferSpec,
    checkpoint: str | Path,
    methods: list[str],
    sizes: list[int],
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> TransferResult:
    t0 = time.perf_counter()
    check_grid(list(methods), list(sizes), spec)
    tensors, meta = io.load_checkpoint(checkpoint)
    pre = check_checkpoint(run_spec, tensors, meta, checkpoint)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    ctx = Context(run_spec, dev, DTYPES[spec.dtype])
    say = progress or (lambda msg: None)

    compile_seconds = None
    if "group_lasso" in methods:
        tc = time.perf_counter()
        solvers = {
            hp["solver"]
            for hp in [spec.method_hyperparameters("group_lasso")]
            + (spec.candidates("group_lasso") if spec.selection == "cv" else [])
        }
        warm_up_group_lasso(tuple(sorted(solvers)))
        compile_seconds = time.perf_counter() - tc
        say(f"group_lasso: numba compilation {compile_seconds:.1f} s (excluded from fit_seconds)")

    per_seed_tasks = [make_downstream_tasks(run_spec, s, spec, base=base) for s, base in zip(pre.seeds, pre.tasks)]
    rows: list[dict] = []
    seconds: dict[str, float] = {m: 0.0 for m in methods}
    for downstream in spec.downstream:
        tasks = [t[downstream] for t in per_seed_tasks]
        X_test, y_test = _stack(
            [
                draw(t, spec.test_size, heldout_generator(run_spec, s, downstream), "test")
                for s, t in zip(pre.seeds, tasks)
            ]
        )
        for n in sizes:
            X, y = _stack(
                [draw(t, n, train_generator(run_spec, s, downstream, n), "train") for s, t in zip(pre.seeds, tasks)]
            )
            for method in methods:
                tm = time.perf_counter()
                rows += _fit_method(ctx, spec, pre, tasks, downstream, method, n, X, y, X_test, y_test)
                seconds[method] += time.perf_counter() - tm
                say(f"{downstream} n={n} {method}: {time.perf_counter() - tm:.2f} s")
    table = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("d", "D", "seed", "j_star", "pretrain_j_star", "n"):
        table[col] = table[col].astype("int64")
    for col in ("test_accuracy", "test_loss", "train_accuracy", "train_loss", "fit_seconds", "cos_direction"):
        table[col] = table[col].astype("float64")
    return TransferResult(table, pre.seeds, time.perf_counter() - t0, compile_seconds, seconds)


def _stack(pairs):
    Xs, ys = zip(*pairs)
    return torch.stack(Xs), torch.stack(ys)


def _fit_method(
    ctx: Context, spec: TransferSpec, pre: Pretrained, tasks, downstream: str, method: str, n: int, X, y, X_test, y_test
) -> list[dict]:
    entry = METHODS[method]
    run_spec = ctx.run_spec
    rows = []

    def row(i: int, **values) -> dict:
        task, base = tasks[i], pre.tasks[i]
        cos = float("nan")
        if hasattr(task, "directions") and hasattr(base, "directions"):
            cos = float((task.directions[0] * base.directions[0]).sum())
        # run, not only task_name: ablation runs share their base task's data (and task_name)
        return {
            "run": run_spec.run,
            "task_name": run_spec.task_name,
            "d": run_spec.task.d,
            "D": run_spec.task.D,
            "downstream": downstream,
            "seed": pre.seeds[i],
            "j_star": task.j_star,
            "pretrain_j_star": base.j_star,
            "method": method,
            "n": n,
            "cos_direction": cos,
            **values,
        }

    active = list(range(len(pre.seeds)))
    if entry.uses_pretrained:
        active = [i for i, st in enumerate(pre.status) if st == "ok"]
        for i in sorted(set(range(len(pre.seeds))) - set(active)):
            rows.append(
                row(
                    i,
                    test_accuracy=math.nan,
                    test_loss=math.nan,
                    train_accuracy=math.nan,
                    train_loss=math.nan,
                    fit_seconds=math.nan,
                    status="skipped_pretrain_diverged",
                    hyperparameters=json.dumps({"skipped": "pretraining of this seed diverged"}),
                )
            )
    if not active:
        return rows
    ids = [fit_identity(run_spec, pre.seeds[i], downstream, method, n) for i in active]
    start = {k: t[active] for k, t in pre.params.items()} if entry.uses_pretrained else None
    Xa, ya = X[active], y[active]

    t0 = time.perf_counter()
    chosen, notes = _select(ctx, spec, method, Xa, ya, ids, start)
    select_seconds = time.perf_counter() - t0

    results: dict[int, tuple] = {}
    for members in _groups(chosen).values():
        hp = chosen[members[0]]
        t1 = time.perf_counter()
        sub = {k: t[members] for k, t in start.items()} if start is not None else None
        out = entry.fit(
            ctx,
            Xa[members],
            ya[members],
            [Xa[members], X_test[[active[j] for j in members]]],
            hp,
            [torch_generator(*ids[j]) for j in members],
            sub,
        )
        share = (time.perf_counter() - t1) / len(members)
        errors = out.errors or [None] * len(members)
        extras = out.extras or [{}] * len(members)
        for pos, j in enumerate(members):
            results[j] = (out.outputs[0][pos], out.outputs[1][pos], errors[pos], extras[pos], share)

    for j, i in enumerate(active):
        f_train, f_test, error, extra, share = results[j]
        hp_record = {"rule": notes[j].pop("rule"), **chosen[j], **notes[j], **extra}
        if method in ("mlp", "std_transformer"):
            hp_record["batch_used"], hp_record["steps"] = net_steps(n, chosen[j])
        metrics = _metrics(f_train, ya[j], f_test, y_test[i])
        if error is not None:
            status = "failed"
            hp_record["error"] = error
        elif not (torch.isfinite(f_train).all() and torch.isfinite(f_test).all()):
            status = "diverged"
        else:
            status = "ok"
        if status != "ok":
            metrics = {k: math.nan for k in metrics}
        rows.append(
            row(
                i,
                **metrics,
                fit_seconds=share + select_seconds / len(active),
                status=status,
                hyperparameters=json.dumps(hp_record, sort_keys=True),
            )
        )
    return rows


def _metrics(f_train, y_train, f_test, y_test) -> dict:
    def acc(f, y):
        return float(((f > 0).to(torch.float64) * 2 - 1 == y).to(torch.float64).mean())

    def loss(f, y):
        return float(F.softplus(-y * f).mean())

    return {
        "test_accuracy": acc(f_test, y_test),
        "test_loss": loss(f_test, y_test),
        "train_accuracy": acc(f_train, y_train),
        "train_loss": loss(f_train, y_train),
    }


def _groups(chosen: list[dict]) -> dict[str, list[int]]:
    """Seeds sharing a hyperparameter setting, fitted together as one batch."""
    groups: dict[str, list[int]] = {}
    for j, hp in enumerate(chosen):
        groups.setdefault(json.dumps(hp, sort_keys=True), []).append(j)
    return groups


# -- the hyperparameter rule -------------------------------------------------------------


def _select(ctx: Context, spec: TransferSpec, method: str, X, y, ids, start) -> tuple[list[dict], list[dict]]:
    """Per seed: the setting to fit with, and notes on how it was chosen.

    fixed: the documented defaults. cv: k-fold cross-validation on the seed's own n samples
    over the method's grid (best mean validation accuracy, ties: lower validation loss);
    folds and fits are drawn from the seed's fit identity + ("cv", ...).
    """
    S, n = y.shape
    fixed = spec.method_hyperparameters(method)
    if spec.selection == "fixed":
        return [dict(fixed) for _ in range(S)], [{"rule": "fixed"} for _ in range(S)]
    k = spec.cv_folds
    if n < 2 * k:
        return [dict(fixed) for _ in range(S)], [{"rule": f"fixed (n < 2 x cv_folds = {2 * k})"} for _ in range(S)]
    perms = torch.stack([torch.randperm(n, generator=torch_generator(*i, "cv")) for i in ids])
    fold_of = torch.empty(S, n, dtype=torch.int64)
    fold_of.scatter_(1, perms, (torch.arange(n) % k).expand(S, n).contiguous())
    candidates = spec.candidates(method)
    scores = torch.zeros(len(candidates), S, 2, dtype=torch.float64)  # (mean accuracy, -mean loss)
    rows = torch.arange(S)[:, None]
    for c, hp in enumerate(candidates):
        for fold in range(k):
            val = torch.stack([torch.nonzero(fold_of[s] == fold).squeeze(1) for s in range(S)])
            trn = torch.stack([torch.nonzero(fold_of[s] != fold).squeeze(1) for s in range(S)])
            out = METHODS[method].fit(
                ctx,
                X[rows, trn],
                y[rows, trn],
                [X[rows, val]],
                hp,
                [torch_generator(*i, "cv", fold) for i in ids],
                start,
            )
            f, yv = out.outputs[0], y[rows, val]
            acc = ((f > 0).to(torch.float64) * 2 - 1 == yv).to(torch.float64).mean(1)
            loss = F.softplus(-yv * f).mean(1)
            bad = ~torch.isfinite(f).all(1)
            scores[c, :, 0] += torch.where(bad, torch.full_like(acc, -math.inf), acc) / k
            scores[c, :, 1] += torch.where(bad, torch.full_like(loss, -math.inf), -loss) / k
    chosen, notes = [], []
    for s in range(S):
        best = max(range(len(candidates)), key=lambda c: (float(scores[c, s, 0]), float(scores[c, s, 1]), -c))
        chosen.append(dict(candidates[best]))
        notes.append({"rule": f"cv ({k} folds)", "cv_accuracy": _finite_or_none(float(scores[best, s, 0]))})
    return chosen, notes


def _finite_or_none(x: float) -> float | None:
    return x if np.isfinite(x) else None
