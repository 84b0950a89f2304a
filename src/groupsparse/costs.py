"""One cost model of the study's jobs: CPU time and memory, fitted to measured jobs.

Torch-free and numpy-free at import (the Snakefile imports it at parse time). Three users:
the workflow's ``resources:`` (:func:`pretrain_request`, :func:`transfer_request`), the
parse-time refusal of jobs that cannot fit (:func:`check_memory`), and ``groupsparse
estimate`` (:func:`estimate_study`).

Model (coefficients in ``costs.yaml`` next to this file, refitted from
``benchmarks/costs/*.tsv`` by :func:`fit`; never edited by hand, a test checks):

pretrain, one job = S seeds x T steps of batch B, R recorded evaluations of E samples,
tokens of width m (= d + D with concatenated positions) over D positions, L layers::

    flops  = S L D m (m + D) (4 T B + 2 R E)            (the dense formula's GEMM count)
    draws  = S T B D d                                   (Gaussian numbers drawn)
    cpu_s  = c0 + path * c_flop[dtype] * flops + c_draw * draws
    mem_mb = m0 + m1 * S L bytes(dtype) (B + E) D (m + D) / 2^20

``path`` is 1 for the paper model with antithetic batches (the fast kernel folds the
mirror half), and a fitted factor for i.i.d. batches and for models trained by autograd.

transfer, one job = a method group x sample sizes x downstream tasks for S seeds; a job's
cost is the sum over the *fits it performs* (one per (downstream, n, method), plus
folds x grid points when ``selection: cv``) of a per-method fit cost, each::

    fit_s = a_method * steps + b_method * train_work + e_method * eval_work

(``steps``: python-level steps, e.g. one per sample for online SGD, per minibatch for nets,
per seed for scikit-learn fits; ``train_work``/``eval_work``: multiply-adds of training and
of predicting on the train and test sets), then::

    cpu_s  = j0 + j1 * sum(fit_s) + j_gl * [group_lasso in the job]   (numba compilation)
    mem_mb = t0 + t1 * S (test_size + max n) D (d + m) 8 / 2^20

GPU: no GPU measurement exists; a cuda job is estimated from its FLOPs at an assumed
sustained throughput plus a per-step launch overhead (``GPU_ASSUMPTIONS``), and every such
figure is labelled ``estimate (no GPU measurement)``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

COEFFS_PATH = Path(__file__).with_name("costs.yaml")
TRANSFER_METHODS = ("pretrained_finetune", "pretrained_frozen_W", "scratch_transformer", "logreg", "group_lasso",
                    "mlp", "std_transformer")
PAPER_SGD = ("pretrained_finetune", "pretrained_frozen_W", "scratch_transformer")
DOWNSTREAM = ("transfer", "negative_control")
DTYPE_BYTES = {"float32": 4, "float64": 8}
N_LOG_STEPS = 40  # pretrain.N_LOG_STEPS (recording grid)

# Safety margins of a request over the model's prediction (the fitted scatter: see tests/test_costs.py).
TIME_MARGIN = 1.5          # runtime request = 1.5 x predicted (+ TIME_FLOOR_MIN)
TIME_FLOOR_MIN = 5         # minutes added to every runtime request (start-up, file system, scheduler)
MEM_MARGIN = 1.3           # memory request = 1.3 x predicted (+ MEM_FLOOR_MB)
MEM_FLOOR_MB = 256
GPU_NOTE = "estimate (no GPU measurement)"
# Assumed sustained throughput of a data-centre GPU on these small batched GEMMs (well below
# peak) and the cost of one python-level step (a few kernel launches); stated, not measured.
GPU_ASSUMPTIONS = {"flops_per_s": {"float32": 5e12, "float64": 2e12}, "step_s": 2e-4, "startup_s": 20.0,
                   "host_mem_mb": 2500}

# Transfer defaults mirrored from transfer/spec.py (torch-free copies; a test checks they agree).
_NET = {"batch": 64, "epochs": 20, "min_steps": 200, "max_steps": 1000}
DEFAULT_FIT = {
    "pretrained_finetune": {"passes": 1}, "pretrained_frozen_W": {"passes": 1}, "scratch_transformer": {"passes": 1},
    "logreg": {}, "group_lasso": {},
    "mlp": {"width": 128, "depth": 2, **_NET},
    "std_transformer": {"width": 32, "heads": 4, "layers": 2, "ff_width": 64, **_NET},
}
DEFAULT_GRID_SIZE = {"pretrained_finetune": 3, "pretrained_frozen_W": 3, "scratch_transformer": 3,
                     "logreg": 5, "group_lasso": 4, "mlp": 3, "std_transformer": 3}


# -- the work of a job, from its spec ------------------------------------------------------

def record_count(steps: int, every: int, attention_checkpoints: int) -> int:
    """Evaluations a pretraining run performs: its recording grid plus the attention checkpoints
    (pretrain.record_steps / attention_steps, without numpy)."""
    rec = set(range(0, steps + 1, every)) | {0, steps}
    if steps >= 1:
        rec |= {int(round(math.exp(math.log(steps) * i / (N_LOG_STEPS - 1)))) for i in range(N_LOG_STEPS)}
    att = {steps} if attention_checkpoints == 1 else (
        {int(round(math.exp(math.log(max(steps, 1)) * i / max(attention_checkpoints - 2, 1))))
         for i in range(attention_checkpoints - 1)} | {0})
    return len(rec) + len(att)


def _token_width(model: dict, d: int, D: int) -> int:
    return d + D if model.get("positions", "concat") == "concat" else d


def _path(spec: dict) -> str:
    model, pre = spec.get("model", {}), spec.get("pretrain", {})
    paper = (model.get("positions", "concat"), model.get("attention", "merged"), model.get("layers", 1)) == \
        ("concat", "merged", 1)
    if not paper or pre.get("gradient", "auto") == "autograd":
        return "autograd"
    return "antithetic" if pre.get("sampling", "antithetic") == "antithetic" else "iid"


def describe_pretrain(spec: dict, seeds: int) -> dict:
    """The features of one pretraining job (a RunSpec dict, ``seeds`` seeds in the job)."""
    t, p, model = spec["task"], spec["pretrain"], spec.get("model", {})
    d, D = t["d"], t["D"]
    m, L = _token_width(model, d, D), model.get("layers", 1)
    R = record_count(p["steps"], p["record_every"], p.get("attention_checkpoints", 6))
    per_sample = L * D * m * (m + D)
    return {"job": "pretrain", "d": d, "D": D, "m": m, "layers": L, "seeds": seeds, "steps": p["steps"],
            "batch": p["batch"], "eval_size": p["eval_size"], "records": R, "dtype": spec.get("dtype", "float32"),
            "path": _path(spec),
            "flops": seeds * per_sample * (4 * p["steps"] * p["batch"] + 2 * R * p["eval_size"]),
            "draws": seeds * p["steps"] * p["batch"] * D * d,
            "python_steps": p["steps"] + R,
            "mem_bytes": seeds * L * DTYPE_BYTES[spec.get("dtype", "float32")] * (p["batch"] + p["eval_size"])
            * D * (m + D)}


@dataclass(frozen=True)
class Fit:
    """One fit a transfer job performs: a method on n_train samples, predicting n_eval samples."""
    method: str
    n_train: int
    n_eval: int


def _net_steps(n: int, hp: dict) -> tuple[int, int]:
    batch = min(hp["batch"], n)
    steps = math.ceil(hp["epochs"] * n / batch)
    return batch, max(hp["min_steps"], min(hp["max_steps"], steps))


def fit_work(method: str, n: int, n_eval: int, seeds: int, d: int, D: int, m: int, hp: dict | None = None) -> tuple:
    """(steps, train_work, eval_work) of one fit of ``method`` for ``seeds`` seeds at once."""
    hp = DEFAULT_FIT[method] | (hp or {})
    S = seeds
    if method in PAPER_SGD:
        per = D * m * (m + D)
        steps = n * hp.get("passes", 1)
        return steps, S * steps * per, S * n_eval * per
    if method in ("logreg", "group_lasso"):
        p = D * d
        return S, S * n * p, S * n_eval * p
    batch, steps = _net_steps(n, hp)
    if method == "mlp":
        w, depth = hp["width"], hp["depth"]
        per = D * d * w + (depth - 1) * w * w + w
    else:  # std_transformer, per token: embedding, attention projections, feed-forward, attention scores
        h, ff, layers = hp["width"], hp["ff_width"], hp["layers"]
        per = D * (d * h + layers * (4 * h * h + 2 * h * ff + 2 * D * h))
    return steps, S * steps * batch * per, S * n_eval * per


def transfer_fits(transfer: dict, methods: Iterable[str], sizes: Iterable[int]) -> list[Fit]:
    """Every fit a transfer job performs, per downstream task: one final fit per (n, method),
    plus cv_folds x grid fits on (k-1)/k of the samples when ``selection: cv`` (and n >= 2k)."""
    downstream = transfer.get("downstream", DOWNSTREAM)
    test = transfer.get("test_size", 10000)
    cv = transfer.get("selection", "fixed") == "cv"
    k = transfer.get("cv_folds", 3)
    grids = transfer.get("grids", {}) or {}
    fits = []
    for _ in downstream:
        for n in sizes:
            for method in methods:
                if cv and n >= 2 * k:
                    grid = grids.get(method)
                    points = math.prod(len(v) for v in grid.values()) if grid else DEFAULT_GRID_SIZE[method]
                    val = n // k
                    fits += [Fit(method, n - val, val)] * (points * k)
                fits.append(Fit(method, n, n + test))
    return fits


def describe_transfer(spec: dict, transfer: dict, methods: list[str], sizes: list[int], seeds: int) -> dict:
    t, model = spec["task"], spec.get("model", {})
    d, D = t["d"], t["D"]
    m = _token_width(model, d, D)
    test = transfer.get("test_size", 10000)
    return {"job": "transfer", "d": d, "D": D, "m": m, "seeds": seeds, "methods": ",".join(methods),
            "sizes": ",".join(map(str, sizes)), "max_n": max(sizes), "test_size": test,
            "downstream": ",".join(transfer.get("downstream", DOWNSTREAM)),
            "selection": transfer.get("selection", "fixed"), "cv_folds": transfer.get("cv_folds", 3),
            "fits": len(transfer_fits(transfer, methods, sizes)),
            "mem_bytes": seeds * (test + max(sizes)) * D * (d + m) * 8}
