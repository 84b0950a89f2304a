"""Run one pretrained checkpoint against methods x sample sizes: the long results table.

Every (downstream task, seed, n) draws its n training samples from a generator hashed
from that identity alone, and every (downstream task, seed) one test set, so all methods
see the same data and a grid split across jobs gives the same rows as one job.

Each row records the settings the method was fitted with as typed parameter columns ``p_<name>``
(benchopt's style: the chosen grid values and the method's other settings; for SGD also the
absolute step ``p_eta`` and the scale ``p_u_sq_mean``, for the nets ``p_batch_used`` and
``p_steps``; a column is empty on rows of methods without that setting), the rule (``selection``),
the cross-validation score (``cv_accuracy``, ``cv_loss``), the settings at an edge of their grid
(``hp_edge``, comma-separated; ``hp_at_edge`` whether any), why a fit failed (``error``) and, for
the online-SGD methods, the average online error (``online_error``):
(1/n) sum_{t=0}^{n-1} P(y f(Z; W_t, v_t) <= 0), W_t, v_t the iterate after t updates, each
iterate's error measured on the first ``online_eval_size`` test samples (methods.py:
``online_iterates``, ``average_online_error``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..config.seeding import torch_generator
from ..config.specs import RunSpec, config_hash
from ..io import files as io
from ..io.tables import PARAMETER_PREFIX, TRANSFER_COLUMNS
from ..model.device import TORCH_DTYPES, torch_device
from .fitting import READOUT_COLUMNS, Context, OnlineEval, readout_alignment
from .methods import method as method_info
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

CV_CHUNK_FLOATS = 2**23  # training inputs (floats) per batched cross-validation fit: bounds its memory
STATUSES = ("ok", "diverged", "failed", "skipped_pretrain_diverged")
COLUMNS = list(TRANSFER_COLUMNS)


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
    progress: Callable[[str], None] | None = None,
) -> TransferResult:
    """The table of every (downstream, seed, method, n). scikit-learn's BLAS gets torch's thread
    count (an unlimited BLAS pool on a shared machine made each small convex fit 10x slower)."""
    import scipy.optimize  # noqa: F401  (load the BLAS libraries first: the limit covers loaded ones only)
    import sklearn.linear_model  # noqa: F401
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=torch.get_num_threads()):
        return _run_transfer(run_spec, spec, checkpoint, methods, sizes, progress)


def _run_transfer(run_spec, spec, checkpoint, methods, sizes, progress) -> TransferResult:
    t0 = time.perf_counter()
    check_grid(list(methods), list(sizes), spec)
    tensors, meta = io.load_checkpoint(checkpoint)
    pre = check_checkpoint(run_spec, tensors, meta, checkpoint)
    ctx = Context(run_spec, torch_device(run_spec.device), TORCH_DTYPES[spec.dtype])
    say = progress or (lambda msg: None)

    compile_seconds = None
    warm = [m for m in methods if method_info(m).needs_warm_up]
    if warm:  # one-time work (numba compilation), timed apart from the fits
        tc = time.perf_counter()
        for m in warm:
            settings = [spec.method_hyperparameters(m)] + (spec.candidates(m) if spec.selection == "cv" else [])
            method_info(m).warm_up(settings)
        compile_seconds = time.perf_counter() - tc
        say(f"{', '.join(warm)}: warm-up {compile_seconds:.1f} s (excluded from fit_seconds)")

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
            for method in (m for m in methods if spec.fits_on(downstream, m)):
                tm = time.perf_counter()
                rows += _fit_method(ctx, spec, pre, tasks, downstream, method, n, X, y, X_test, y_test)
                seconds[method] += time.perf_counter() - tm
                say(f"{downstream} n={n} {method}: {time.perf_counter() - tm:.2f} s")
    params = sorted({k for row in rows for k in row if k.startswith(PARAMETER_PREFIX)})
    table = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("d", "D", "seed", "j_star", "pretrain_j_star", "n"):
        table[col] = table[col].astype("int64")
    for col in (
        "test_accuracy",
        "test_loss",
        "train_accuracy",
        "train_loss",
        "fit_seconds",
        "cos_direction",
        "online_error",
        *READOUT_COLUMNS,
    ):
        table[col] = table[col].astype("float64")
    table["hp_at_edge"] = table["hp_at_edge"].astype("bool")
    for col in params:  # from the rows' own values (a frame would have turned integers with gaps into floats)
        table[col] = _typed(pd.Series([row.get(col) for row in rows], dtype=object, index=table.index))
    return TransferResult(table, pre.seeds, time.perf_counter() - t0, compile_seconds, seconds)


def _stack(pairs):
    Xs, ys = zip(*pairs)
    return torch.stack(Xs), torch.stack(ys)


def _fit_method(
    ctx: Context, spec: TransferSpec, pre: Pretrained, tasks, downstream: str, method: str, n: int, X, y, X_test, y_test
) -> list[dict]:
    """The rows of one method at one n: a skipped row for each seed whose pretraining diverged (a method that
    starts from it), then one fit of the others, its setting chosen by ``_select``."""
    entry = method_info(method)
    row = _row_maker(ctx.run_spec, pre, tasks, downstream, method, n)
    active = list(range(len(pre.seeds)))
    if entry.uses_pretrained:
        active = [i for i, st in enumerate(pre.status) if st == "ok"]
    rows = [row(i, **_skipped(spec)) for i in sorted(set(range(len(pre.seeds))) - set(active))]
    if not active:
        return rows
    ids = [fit_identity(ctx.run_spec, pre.seeds[i], downstream, method, n) for i in active]
    start = {k: t[active] for k, t in pre.params.items()} if entry.uses_pretrained else None
    Xa, ya = X[active], y[active]

    t0 = time.perf_counter()
    chosen, notes = _select(ctx, spec, method, Xa, ya, ids, start)
    select_seconds = time.perf_counter() - t0

    t1 = time.perf_counter()
    X_te = X_test[active]
    online = None
    if entry.online:
        m = min(spec.online_eval_size, X_te.shape[1])
        online = OnlineEval(X_te[:, :m], y_test[active][:, :m], spec.online_points)
    out = entry.fit(ctx, Xa, ya, [Xa, X_te], chosen, [torch_generator(*i) for i in ids], start, online)
    seconds = (time.perf_counter() - t1) / len(active) + select_seconds / len(active)
    alignment = readout_alignment(out, [tasks[i] for i in active], [pre.tasks[i] for i in active], ctx.run_spec.task.d)
    errors = out.errors or [None] * len(active)
    extras = out.extras or [{}] * len(active)
    for j, i in enumerate(active):
        f_train, f_test, error = out.outputs[0][j], out.outputs[1][j], errors[j]
        used = {**chosen[j], **extras[j]} | entry.recorded(n, chosen[j])  # data-dependent settings as fitted
        online_error = out.online[j] if out.online is not None else math.nan
        values = _fitted(f_train, ya[j], f_test, y_test[i], error, online_error, notes[j], used, alignment[j], seconds)
        rows.append(row(i, **values))
    return rows


def _row_maker(run_spec, pre: Pretrained, tasks, downstream: str, method: str, n: int):
    """``row(i, **values)``: seed i's row with the run's, the task's and the fit's identity."""

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

    return row


def _skipped(spec: TransferSpec) -> dict:
    """A seed's values where its pretraining diverged and the method starts from it."""
    return {
        "test_accuracy": math.nan,
        "test_loss": math.nan,
        "train_accuracy": math.nan,
        "train_loss": math.nan,
        "fit_seconds": math.nan,
        "status": "skipped_pretrain_diverged",
        "error": "skipped: pretraining of this seed diverged",
        "selection": spec.selection,
        "hp_at_edge": False,
        "hp_edge": "",
        "cv_accuracy": math.nan,
        "cv_loss": math.nan,
        "online_error": math.nan,
        **dict.fromkeys(READOUT_COLUMNS, math.nan),
    }


def _fitted(
    f_train, y_train, f_test, y_test, error, online_error, note: dict, used: dict, alignment: dict, seconds: float
) -> dict:
    """A fitted seed's values: its metrics, its share of the fit's ``seconds``, status (failed, diverged: outputs
    not finite, or ok), how its setting was chosen and the setting used; NaN metrics unless ok."""
    metrics = _metrics(f_train, y_train, f_test, y_test)
    if error is not None:
        status = "failed"
    elif not (torch.isfinite(f_train).all() and torch.isfinite(f_test).all()):
        status = "diverged"
    else:
        status = "ok"
    if status != "ok":
        metrics = {k: math.nan for k in metrics}
        online_error = math.nan
    rule = note.pop("rule")
    return {
        **metrics,
        "fit_seconds": seconds,
        "status": status,
        "error": error,
        "selection": rule,
        "hp_at_edge": bool(note.get("at_edge", [])),
        "hp_edge": ",".join(note.get("at_edge", [])),
        "cv_accuracy": _nan_if_none(note.get("cv_accuracy")),
        "cv_loss": _nan_if_none(note.get("cv_loss")),
        **{PARAMETER_PREFIX + k: v for k, v in used.items()},
        "online_error": online_error,
        **(alignment if status == "ok" else dict.fromkeys(READOUT_COLUMNS, math.nan)),
    }


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


# -- the hyperparameter rule -------------------------------------------------------------


def cv_folds(y: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """Stratified fold of each of the n samples (labels y (n,)): -1 = in every training set.

    The samples of each class in a hashed random order, class -1 first then class +1, are dealt
    round-robin to folds 0 .. k-1; the last n mod k of that order go to no validation fold, so
    every fold validates floor(n / k) samples and trains on n - floor(n / k) (equal sizes: the
    folds of all entries train as one batch). Each fold's class counts differ by at most one.
    """
    n = y.shape[0]
    perm = torch.randperm(n, generator=gen)
    order = torch.cat([perm[y[perm] < 0], perm[y[perm] > 0]])
    fold = torch.full((n,), -1, dtype=torch.int64)
    m = (n // k) * k
    fold[order[:m]] = torch.arange(m) % k
    return fold


def _select(ctx: Context, spec: TransferSpec, method: str, X, y, ids, start) -> tuple[list[dict], list[dict]]:
    """Per seed: the setting to fit with, and notes on how it was chosen.

    fixed: the documented defaults. cv: stratified k-fold cross-validation on the seed's own n
    samples (``cv_folds``; k = spec.folds(n), fewer at small n) over the product of the method's
    grid: every (grid point, fold, seed) is one entry of one batched fit (same fold and same
    initialisation for every grid point of a seed: common random numbers); the grid point with
    the best mean validation accuracy wins (ties: lower mean validation loss, then the earlier
    point). Folds and fits are drawn from the seed's fit identity + ("cv", ...). A fold whose
    fit fails for every grid point (e.g. one class only in its training part) is left out;
    a grid point whose outputs are not finite scores -inf. notes["at_edge"] lists the tuned
    keys whose chosen value is the first or last of its grid (with > 1 values).
    """
    S, n = y.shape
    fixed = spec.method_hyperparameters(method)
    if spec.selection == "fixed":
        return [dict(fixed) for _ in range(S)], [{"rule": "fixed"} for _ in range(S)]
    k_split, k = spec.folds(n)
    if k_split < 2:
        return [dict(fixed) for _ in range(S)], [{"rule": f"fixed (n = {n} < 4: no 2 folds of 2)"} for _ in range(S)]
    folds = torch.stack([cv_folds(y[s], k_split, torch_generator(*ids[s], "cv")) for s in range(S)])
    candidates = spec.candidates(method)
    acc, loss, failed = _cv_scores(ctx, method, X, y, folds, k, candidates, ids, start)
    valid = ~failed.all(0)  # (k, S): folds some grid point could fit
    names = sorted(spec.method_grid(method))
    grid = spec.method_grid(method)
    chosen, notes = [], []
    for s in range(S):
        use = valid[:, s]
        if not use.any():
            chosen.append(dict(fixed))
            notes.append({"rule": "fixed (no fold of the split could be fitted)"})
            continue
        a = torch.where(failed[:, use, s], -math.inf, acc[:, use, s]).mean(1)
        lo = torch.where(failed[:, use, s], math.inf, loss[:, use, s]).mean(1)
        best = max(range(len(candidates)), key=lambda c: (float(a[c]), -float(lo[c]), -c))
        hp = dict(candidates[best])
        edge = [name for name in names if len(grid[name]) > 1 and hp[name] in (grid[name][0], grid[name][-1])]
        chosen.append(hp)
        rule = f"cv ({k} folds)" if k == k_split else f"holdout (1/{k_split} of n)"
        notes.append(
            {
                "rule": rule,
                "cv_accuracy": _finite_or_none(float(a[best])),
                "cv_loss": _finite_or_none(float(lo[best])),
                "at_edge": edge,
            }
        )
    return chosen, notes


def _cv_scores(ctx: Context, method: str, X, y, folds, k: int, candidates: list, ids, start):
    """Validation accuracy, loss (-inf, inf where the outputs are not finite) and failure of every (grid
    point, fold, seed), each (C, k, S): the first k folds of ``folds`` (S, n), every entry one of a few
    batched fits (grid points in chunks of whole (fold, seed) blocks, about CV_CHUNK_FLOATS training inputs a
    chunk)."""
    S = y.shape[0]
    trn = torch.stack([torch.stack([torch.nonzero(folds[s] != f).squeeze(1) for f in range(k)]) for s in range(S)])
    val = torch.stack([torch.stack([torch.nonzero(folds[s] == f).squeeze(1) for f in range(k)]) for s in range(S)])
    C = len(candidates)
    # entries e = (c, f, s), s fastest
    cs, fs, ss = (
        t.reshape(-1) for t in torch.meshgrid(torch.arange(C), torch.arange(k), torch.arange(S), indexing="ij")
    )
    yv = y[ss[:, None], val[ss, fs]]
    per_point = k * S * trn.shape[-1] * X[0, 0].numel()
    step = max(1, CV_CHUNK_FLOATS // per_point) * k * S
    fs_out, errs = [], []
    for lo in range(0, len(cs), step):
        e = slice(lo, lo + step)
        s_, f_ = ss[e], fs[e]
        out = method_info(method).fit(
            ctx,
            X[s_[:, None], trn[s_, f_]],
            y[s_[:, None], trn[s_, f_]],
            [X[s_[:, None], val[s_, f_]]],
            [candidates[int(c)] for c in cs[e]],
            [torch_generator(*ids[int(s)], "cv", int(f)) for f, s in zip(f_, s_)],
            {key: t[s_] for key, t in start.items()} if start is not None else None,
        )
        fs_out.append(out.outputs[0])
        errs += out.errors or [None] * len(s_)
    f = torch.cat(fs_out)
    acc = ((f > 0).to(torch.float64) * 2 - 1 == yv).to(torch.float64).mean(1)
    loss = F.softplus(-yv * f).mean(1)
    failed = torch.tensor([e is not None for e in errs])
    finite = torch.isfinite(f).all(1)
    acc = torch.where(finite, acc, torch.full_like(acc, -math.inf)).reshape(C, k, S)
    loss = torch.where(finite, loss, torch.full_like(loss, math.inf)).reshape(C, k, S)
    return acc, loss, failed.reshape(C, k, S)


def _nan_if_none(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _typed(column: pd.Series) -> pd.Series:
    """A parameter column with one type: nullable integers, floats, booleans or strings (empty on
    the rows of methods without the setting)."""
    present = column.dropna()
    if present.map(lambda v: isinstance(v, bool)).all() and len(present):
        return column.astype("boolean")
    if present.map(lambda v: isinstance(v, int) and not isinstance(v, bool)).all() and len(present):
        return column.astype("Int64")
    if present.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)).all():
        return column.astype("float64")
    return column.map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)).astype(
        "string"
    )


def _finite_or_none(x: float) -> float | None:
    return x if np.isfinite(x) else None
