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
    cpu_s  = c0 + path * (c_flop[dtype] * flops + c_draw * draws)
    mem_mb = m0 + m_img [image task] + m_p * S bytes(dtype) (E D (m + D) + B D d) / 2^20          (alive all run)
                + m_t * k L bytes(dtype) B D (m + D) / 2^20                (one step's temporaries)

with k = min(S, threads) seeds computed at once by the fast kernel (all S under autograd).

``path`` is 1 for the paper model with antithetic batches (the fast kernel folds the
mirror half), and a fitted factor (median over their measured jobs) for i.i.d. batches and
for models trained by autograd (other positions/attention/layers).

transfer, one job = a method group x sample sizes x downstream tasks for S seeds; a job's
cost is the sum over the *fits it performs* (one per (downstream, n, method), plus
folds x grid points when ``selection: cv``) of a per-method fit cost, each::

    fit_s = f_method + a_method * steps + b_method * train_work + e_method * eval_work

(``steps``: python-level steps, e.g. one per sample for online SGD, per minibatch for nets,
per seed for scikit-learn fits; ``train_work``/``eval_work``: multiply-adds of training and
of predicting on the train and test sets), then::

    cpu_s  = j0 + j1 * sum(fit_s) + j_draw * S (test + sum n) D d x downstream tasks
             + j_gl * [group_lasso in the job]                           (numba compilation)

(the lines a transfer log prints per (downstream, n, method) are wall-clock; the fit uses them
times their job's CPU/wall ratio, and leaves out a method's first fit in a job, whose one-time
import and warm-up cost j0 carries)
    mem_mb = t0 + t_x * S (test_size + max n) D d 8 / 2^20           (samples, float64)
             + t_z * S (test_size + max n) D m 8 / 2^20 [a paper-model method in the job] (tokens)
             + t_sk [logreg or group_lasso in the job] + t_gl [group_lasso in the job]
             + t_net [mlp or std_transformer in the job]

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
GPU_TIME_MARGIN = 3.0      # a GPU estimate is not a measurement: a wider margin
MEM_MARGIN = 1.3           # memory request = 1.3 x predicted (+ MEM_FLOOR_MB)
MEM_FLOOR_MB = 256
GPU_NOTE = "estimate (no GPU measurement)"
# Assumed sustained throughput of a data-centre GPU on these small batched GEMMs (well below
# peak) and the cost of one python-level step (a few kernel launches); stated, not measured.
# A pretraining step runs a few hundred small kernels per seed (fastpath.py), ~7 us each to launch;
# a transfer step (one SGD sample, one minibatch) a few dozen.
GPU_ASSUMPTIONS = {"flops_per_s": {"float32": 5e12, "float64": 2e12}, "pretrain_seed_step_s": 1.5e-3,
                   "step_s": 2e-4, "startup_s": 20.0, "host_mem_mb": 2500}

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


def describe_pretrain(spec: dict, seeds: int, threads: int = 1) -> dict:
    """The features of one pretraining job (a RunSpec dict, ``seeds`` seeds in the job)."""
    t, p, model = spec["task"], spec["pretrain"], spec.get("model", {})
    d, D = t["d"], t["D"]
    m, L = _token_width(model, d, D), model.get("layers", 1)
    R = record_count(p["steps"], p["record_every"], p.get("attention_checkpoints", 6))
    per_sample = L * D * m * (m + D)
    return {"job": "pretrain", "kind": t.get("kind", "synthetic"), "d": d, "D": D, "m": m, "layers": L,
            "seeds": seeds, "steps": p["steps"],
            "batch": p["batch"], "eval_size": p["eval_size"], "records": R, "dtype": spec.get("dtype", "float32"),
            "path": _path(spec),
            "flops": seeds * per_sample * (4 * p["steps"] * p["batch"] + 2 * R * p["eval_size"]),
            "draws": seeds * p["steps"] * p["batch"] * D * d,
            "python_steps": p["steps"] + R,
            **_pretrain_bytes(seeds, threads, L, DTYPE_BYTES[spec.get("dtype", "float32")], p["batch"],
                              p["eval_size"], d, D, m, _path(spec))}


def _pretrain_bytes(S: int, threads: int, L: int, nbytes: int, B: int, E: int, d: int, D: int, m: int,
                    path: str) -> dict:
    """Bytes alive at once: per seed the evaluation set and its features and the step's batch
    (``persistent``), plus one step's temporaries for the seeds computed at the same time
    (``transient``: min(S, threads) for the per-seed fast kernel, all S under autograd)."""
    at_once = S if path == "autograd" else max(1, min(S, threads))
    return {"persistent_bytes": S * nbytes * (E * D * (m + D) + B * D * d),
            "transient_bytes": at_once * L * nbytes * B * D * (m + D)}


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
            "x_bytes": seeds * (test + max(sizes)) * D * d * 8,
            "z_bytes": seeds * (test + max(sizes)) * D * m * 8 * any(x in PAPER_SGD for x in methods)}


# -- coefficients ------------------------------------------------------------------------

_COEFFS: dict | None = None


def coefficients() -> dict:
    """The fitted coefficients (costs.yaml), read once."""
    global _COEFFS
    if _COEFFS is None:
        import yaml
        _COEFFS = yaml.safe_load(COEFFS_PATH.read_text())
    return _COEFFS


def _sig(x: float, digits: int = 6) -> float:
    """Round to ``digits`` significant digits (the data file holds these exact values)."""
    return 0.0 if x == 0 else float(f"{x:.{digits - 1}e}")


# -- predictions -------------------------------------------------------------------------

@dataclass(frozen=True)
class Cost:
    """Predicted cost of one job (no safety margin): CPU seconds on one thread, wall seconds
    with the job's threads and device, peak resident memory in MB."""
    cpu_s: float
    wall_s: float
    mem_mb: float
    device: str = "cpu"
    measured: bool = True          # False: a GPU figure derived from assumptions (GPU_NOTE)

    @property
    def note(self) -> str:
        return "" if self.measured else GPU_NOTE


def _thread_speedup(threads: int, parallel: int) -> float:
    """Assumed (not measured: every measurement uses one thread): seeds spread over threads at
    50 % efficiency beyond the first, never more threads than independent seeds."""
    k = max(1, min(int(threads), int(parallel)))
    return 1.0 + 0.5 * (k - 1)


def _pretrain_cpu_s(f: dict, c: dict) -> float:
    p = c["pretrain"]
    path = p["path_factor"].get(f["path"], 1.0)
    return p["c0_s"] + path * (p["s_per_flop"][f["dtype"]] * f["flops"] + p["s_per_draw"] * f["draws"])


def _pretrain_mem_mb(f: dict, c: dict) -> float:
    p = c["pretrain"]
    return (p["m0_mb"] + p["m_images_mb"] * (f["kind"] == "images") + p["m_persistent"] * f["persistent_bytes"] / 2**20
            + p["m_transient"] * f["transient_bytes"] / 2**20)


def pretrain_cost(spec: dict, seeds: int, device: str | None = None, threads: int = 1) -> Cost:
    """One pretraining job: ``spec`` a RunSpec dict (Run.spec), ``seeds`` the seeds it trains."""
    c = coefficients()
    f = describe_pretrain(spec, seeds, threads)
    cpu = _pretrain_cpu_s(f, c)
    mem = _pretrain_mem_mb(f, c)
    device = device or spec.get("device", "cpu")
    if device == "cuda":
        g = GPU_ASSUMPTIONS
        wall = (g["startup_s"] + f["flops"] / g["flops_per_s"][f["dtype"]]
                + seeds * f["python_steps"] * g["pretrain_seed_step_s"])
        return Cost(cpu, wall, max(g["host_mem_mb"], c["pretrain"]["m0_mb"]), "cuda", measured=False)
    return Cost(cpu, cpu / _thread_speedup(threads, seeds), mem, "cpu")


FIT_TERMS = ("s_per_fit", "s_per_step", "s_per_train_op", "s_per_eval_op")


def _fit_features(fit: Fit, seeds: int, d: int, D: int, m: int, hp: dict | None) -> list[float]:
    steps, train, ev = fit_work(fit.method, fit.n_train, fit.n_eval, seeds, d, D, m, hp)
    return [1.0, float(steps), float(train), float(ev)]


def fit_seconds(fit: Fit, seeds: int, d: int, D: int, m: int, hp: dict | None = None) -> float:
    """Predicted seconds of one fit (all ``seeds`` at once), on one CPU thread."""
    k = coefficients()["transfer_fit"][fit.method]
    return sum(k[name] * x for name, x in zip(FIT_TERMS, _fit_features(fit, seeds, d, D, m, hp)))


def _transfer_parts(spec: dict, transfer: dict, methods, sizes, seeds: int) -> tuple[float, float, bool, float]:
    t = spec["task"]
    d, D = t["d"], t["D"]
    m = _token_width(spec.get("model", {}), d, D)
    hps = transfer.get("hyperparameters", {}) or {}
    fits = transfer_fits(transfer, methods, sizes)
    total = sum(fit_seconds(f, seeds, d, D, m, hps.get(f.method)) for f in fits)
    gpu = 0.0
    g = GPU_ASSUMPTIONS
    dtype = transfer.get("dtype", "float32")
    for f in fits:
        if f.method in ("logreg", "group_lasso"):   # scikit-learn / skglm: on the CPU whatever the device
            gpu += fit_seconds(f, seeds, d, D, m, hps.get(f.method))
        else:
            steps, train, ev = fit_work(f.method, f.n_train, f.n_eval, seeds, d, D, m, hps.get(f.method))
            gpu += steps * g["step_s"] + 2 * (3 * train + ev) / g["flops_per_s"][dtype]
    n_down = len(transfer.get("downstream", DOWNSTREAM))
    draws = seeds * n_down * (transfer.get("test_size", 10000) + sum(sizes)) * D * d
    return total, draws, "group_lasso" in methods, gpu


def _transfer_mem_features(f: dict, methods) -> list[float]:
    """[1, data MB, embedded-token MB (paper-model methods), scikit-learn loaded, skglm/numba
    loaded, torch nets trained]: the libraries' code and the nets' autograd state count."""
    return [1.0, f["x_bytes"] / 2**20, f["z_bytes"] / 2**20,
            float(any(m in ("logreg", "group_lasso") for m in methods)),
            float("group_lasso" in methods), float(any(m in ("mlp", "std_transformer") for m in methods))]


def _transfer_mem_mb(c: dict, f: dict, methods) -> float:
    tj = c["transfer_job"]
    k = [tj["m0_mb"], tj["m_x"], tj["m_z"], tj["m_sklearn_mb"], tj["m_group_lasso_mb"], tj["m_nets_mb"]]
    return sum(a * x for a, x in zip(k, _transfer_mem_features(f, methods)))


def _transfer_job_s(c: dict, fits_s: float, draws: float, gl: bool) -> float:
    j = c["transfer_job"]
    return j["j0_s"] + j["j1"] * fits_s + j["s_per_draw"] * draws + (j["group_lasso_compile_s"] if gl else 0.0)


def transfer_cost(spec: dict, transfer: dict, methods, sizes, seeds: int, device: str | None = None,
                  threads: int = 1) -> Cost:
    """One transfer job: ``spec`` the run's RunSpec dict, ``transfer`` its TransferSpec dict
    (Run.transfer), the job's ``methods`` and ``sizes``, ``seeds`` in the checkpoint."""
    c = coefficients()
    methods, sizes = list(methods), list(sizes)
    fits_s, draws, gl, gpu_fits = _transfer_parts(spec, transfer, methods, sizes, seeds)
    cpu = _transfer_job_s(c, fits_s, draws, gl)
    f = describe_transfer(spec, transfer, methods, sizes, seeds)
    mem = _transfer_mem_mb(c, f, methods)
    device = device or spec.get("device", "cpu")
    if device == "cuda":
        wall = GPU_ASSUMPTIONS["startup_s"] + _transfer_job_s(c, gpu_fits, draws, gl) - c["transfer_job"]["j0_s"]
        return Cost(cpu, wall, mem, "cuda", measured=False)
    return Cost(cpu, cpu, mem, "cpu")   # one fit at a time: threads assumed to give no speedup


# -- requests for the scheduler ----------------------------------------------------------

def request(cost: Cost) -> dict:
    """Snakemake ``resources`` for a job: runtime (minutes) = TIME_MARGIN x predicted one-thread
    CPU time + TIME_FLOOR_MIN on a CPU (the thread speed-up is not measured, so a request
    assumes none), GPU_TIME_MARGIN x the GPU estimate on cuda; mem_mb = MEM_MARGIN x predicted
    + MEM_FLOOR_MB."""
    seconds, margin = (cost.cpu_s, TIME_MARGIN) if cost.measured else (cost.wall_s, GPU_TIME_MARGIN)
    return {"runtime": int(math.ceil(margin * seconds / 60 + TIME_FLOOR_MIN)),
            "mem_mb": int(math.ceil(MEM_MARGIN * cost.mem_mb + MEM_FLOOR_MB))}


def pretrain_request(run, chunk: str, device: str | None = None, threads: int = 1) -> dict:
    """``resources`` of the pretrain rule for ``run`` (a study.Run) and seed ``chunk`` ("lo-hi")."""
    return request(pretrain_cost(run.spec, len(run.chunk_seeds(chunk)), device, threads))


def transfer_request(run, chunk: str, group: str, device: str | None = None, threads: int = 1) -> dict:
    """``resources`` of the transfer rule for ``run``, seed ``chunk`` and method ``group``."""
    return request(transfer_cost(run.spec, run.transfer, run.method_groups[group], run.sizes,
                                 len(run.chunk_seeds(chunk)), device, threads))


def run_key(run) -> str:
    """The config key a run comes from (for messages)."""
    if run.role == "scaling":
        return f"scaling[{run.name}]"
    if run.role == "ablation":
        return "ablations" if run.name == "ablation_none" else f"ablations.variants.{run.name[len('ablation_'):]}"
    return f"tasks.{run.name}"


# A node most partitions offer; the workflow may pass its own (a config key) instead.
DEFAULT_MEM_LIMIT_MB = 64_000


def check_memory(runs: dict, limit_mb: float | None = DEFAULT_MEM_LIMIT_MB,
                 declared: dict | None = None) -> list[str]:
    """Jobs whose estimated memory exceeds ``limit_mb`` or their declared mem_mb: one line each.

    ``runs``: study.expand's result; ``limit_mb``: None for no limit; ``declared``: optional
    {("pretrain"|"transfer", run): mem_mb}. Fast (milliseconds for the scaling study).
    The estimate is the model's prediction without margin, so a refusal is a job that the
    model expects to need more, not one that merely requests more.
    """
    problems = []
    declared = declared or {}
    for name, run in runs.items():
        t, p = run.spec["task"], run.spec["pretrain"]
        chunk = max(run.chunks, key=lambda ch: len(run.chunk_seeds(ch)))
        jobs = [("pretrain", pretrain_cost(run.spec, len(run.chunk_seeds(chunk)), "cpu"),
                 f"task.D = {t['D']}, task.d = {t['d']}, pretrain.batch = {p['batch']}, "
                 f"pretrain.eval_size = {p['eval_size']}, {len(run.chunk_seeds(chunk))} seeds per job")]
        if run.transfer is not None:
            for group, methods in run.method_groups.items():
                jobs.append((f"transfer ({group})",
                             transfer_cost(run.spec, run.transfer, methods, run.sizes, len(run.chunk_seeds(chunk)), "cpu"),
                             f"task.D = {t['D']}, task.d = {t['d']}, transfer.test_size = "
                             f"{run.transfer.get('test_size', 10000)}, largest transfer size {max(run.sizes)}"))
        for kind, cost, why in jobs:
            cap = declared.get((kind.split(" ")[0], name))
            for bound, label in ((limit_mb, "the memory limit"), (cap, "its declared mem_mb")):
                if bound is not None and cost.mem_mb > bound:
                    problems.append(f"{run_key(run)}: the {kind} job of run {name} needs about "
                                    f"{cost.mem_mb:,.0f} MB (estimated from {why}), over {label} of {bound:,.0f} MB")
                    break
    return problems


# -- a whole study ---------------------------------------------------------------------------

# Small jobs, not measured by benchmarks/measure_costs.py: stated constants (CPU seconds, MB).
SMALL_JOBS = {"aggregate": (60.0, 1500.0), "figures": (60.0, 1500.0), "scaling": (180.0, 2000.0),
              "image_figures": (30.0, 1500.0)}


def estimate_study(runs: dict, device: str = "cpu", pretrain_threads: int = 1, transfer_threads: int = 1) -> list[dict]:
    """One row per (rule, run): jobs, predicted per-job CPU minutes, wall minutes, mem_mb and
    totals. GPU rows carry ``note`` = GPU_NOTE."""
    rows = []
    for name, run in runs.items():
        pre = [pretrain_cost(run.spec, len(run.chunk_seeds(ch)), device, pretrain_threads) for ch in run.chunks]
        rows.append(_row("pretrain", name, pre))
        if run.transfer is not None:
            for group, methods in run.method_groups.items():
                tr = [transfer_cost(run.spec, run.transfer, methods, run.sizes, len(run.chunk_seeds(ch)), device,
                                    transfer_threads) for ch in run.chunks]
                rows.append(_row(f"transfer:{group}", name, tr))
    return rows


def _row(rule: str, run: str, costs_: list[Cost]) -> dict:
    n = len(costs_)
    return {"rule": rule, "run": run, "jobs": n, "device": costs_[0].device,
            "cpu_min_per_job": max(c.cpu_s for c in costs_) / 60,
            "wall_min_per_job": max(c.wall_s for c in costs_) / 60,
            "mem_mb_per_job": max(c.mem_mb for c in costs_),
            "cpu_hours": sum(c.cpu_s for c in costs_) / 3600,
            "device_hours": sum(c.wall_s for c in costs_) / 3600,
            "request": request(max(costs_, key=lambda c: c.wall_s)),
            "note": costs_[0].note}


# -- fitting (numpy/scipy imported here only) --------------------------------------------------

TABLES = ("pretrain.tsv", "transfer.tsv", "transfer_fits.tsv")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "costs"


def read_table(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _pre_row(r: dict) -> dict:
    """Features of a measured pretraining row, recomputed from its raw sizes."""
    d, D, m, L, S = (int(r[k]) for k in ("d", "D", "m", "layers", "seeds"))
    T, B, E, R = (int(r[k]) for k in ("steps", "batch", "eval_size", "records"))
    return {"dtype": r["dtype"], "path": r["path"], "kind": r.get("kind") or "synthetic",
            "flops": S * L * D * m * (m + D) * (4 * T * B + 2 * R * E), "draws": S * T * B * D * d,
            **_pretrain_bytes(S, int(r["threads"]), L, DTYPE_BYTES[r["dtype"]], B, E, d, D, m, r["path"]),
            "cpu_s": float(r["user_s"]) + float(r["sys_s"]), "mem_mb": float(r["max_rss_mb"])}


def _fit_row_fits(r: dict) -> list[Fit]:
    transfer = {"downstream": ["one"], "test_size": int(r["test_size"]), "selection": r["selection"],
                "cv_folds": int(r["cv_folds"])}
    return transfer_fits(transfer, [r["method"]], [int(r["n"])])


def _tr_row(r: dict) -> tuple[dict, dict, list[str], list[int], int]:
    spec = {"task": {"d": int(r["d"]), "D": int(r["D"])}, "model": {}}
    transfer = {"test_size": int(r["test_size"]), "downstream": r["downstream"].split(","),
                "selection": r["selection"], "cv_folds": int(r["cv_folds"])}
    return spec, transfer, r["methods"].split(","), [int(x) for x in r["sizes"].split(",")], int(r["seeds"])


def _fit_lines(data: Path) -> list[dict]:
    """transfer_fits.tsv with ``cpu_seconds``: a line's wall seconds times its job's CPU/wall
    ratio (the lines are timed by the wall clock, which a loaded machine stretches)."""
    ratio = {r["name"]: (float(r["user_s"]) + float(r["sys_s"])) / float(r["wall_s"])
             for r in read_table(data / "transfer.tsv")}
    seen: set = set()
    out = []
    for r in read_table(data / "transfer_fits.tsv"):
        if r["name"] not in ratio:
            continue
        # a method's first fit in its job pays one-time costs (library import, torch and numba
        # warm-up): flagged, left out of the per-fit fit; the job constant j0 carries it
        warmup = (r["name"], r["method"]) not in seen
        seen.add((r["name"], r["method"]))
        out.append(r | {"cpu_seconds": float(r["seconds"]) * min(1.0, ratio[r["name"]]), "warmup": warmup})
    return out


def _nnls_relative(X, y):
    """Non-negative least squares of the relative errors (rows divided by the target)."""
    import numpy as np
    from scipy.optimize import nnls
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    scale = X.max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls((X / scale) / y[:, None], np.ones_like(y))
    return [float(c) for c in coef / scale]


def fit(data: Path = DEFAULT_DATA) -> dict:
    """Refit every coefficient from benchmarks/costs/*.tsv (deterministic; rounded to 6 digits)."""
    import statistics
    data = Path(data)
    pre = [_pre_row(r) for r in read_table(data / "pretrain.tsv")]
    fast = [p for p in pre if p["path"] == "antithetic"]
    X = [[1.0, p["flops"] * (p["dtype"] == "float32"), p["flops"] * (p["dtype"] == "float64"), p["draws"]]
         for p in fast]
    c0, f32, f64, draw = _nnls_relative(X, [p["cpu_s"] for p in fast])
    base = {"c0_s": c0, "s_per_flop": {"float32": f32, "float64": f64}, "s_per_draw": draw}
    factors = {"antithetic": 1.0}
    for path in ("iid", "autograd"):
        ratios = [(p["cpu_s"] - c0) / (base["s_per_flop"][p["dtype"]] * p["flops"] + draw * p["draws"])
                  for p in pre if p["path"] == path]
        if ratios:
            factors[path] = max(statistics.median(ratios), 0.1)
    m0, mi, mp, mt = _nnls_relative([[1.0, float(p["kind"] == "images"), p["persistent_bytes"] / 2**20,
                                      p["transient_bytes"] / 2**20] for p in pre], [p["mem_mb"] for p in pre])
    coeffs: dict[str, Any] = {"pretrain": base | {"path_factor": factors, "m0_mb": m0, "m_images_mb": mi,
                                                  "m_persistent": mp, "m_transient": mt}}

    fits_rows = _fit_lines(data)
    per_method = {}
    for method in TRANSFER_METHODS:
        rows = [r for r in fits_rows if r["method"] == method and not r["warmup"]]
        if not rows:
            continue
        X, y = [], []
        for r in rows:
            feats = [0.0] * 4
            for f in _fit_row_fits(r):
                w = _fit_features(f, int(r["seeds"]), int(r["d"]), int(r["D"]), int(r["d"]) + int(r["D"]), None)
                feats = [a + b for a, b in zip(feats, w)]
            X.append(feats)
            y.append(max(r["cpu_seconds"], 1e-3))
        per_method[method] = dict(zip(FIT_TERMS, _nnls_relative(X, y)))
    coeffs["transfer_fit"] = per_method
    coeffs = _rounded(coeffs)
    global _COEFFS
    saved, _COEFFS = _COEFFS, coeffs          # the job model below predicts fits with the new coefficients
    try:
        X, y, mem = [], [], []
        for r in read_table(data / "transfer.tsv"):
            spec, transfer, methods, sizes, seeds = _tr_row(r)
            fits_s, draws, gl, _ = _transfer_parts(spec, transfer, methods, sizes, seeds)
            X.append([1.0, fits_s, draws, float(gl)])
            y.append(float(r["user_s"]) + float(r["sys_s"]))
            mem.append((_transfer_mem_features(describe_transfer(spec, transfer, methods, sizes, seeds), methods),
                        float(r["max_rss_mb"])))
        j0, j1, jd, jgl = _nnls_relative(X, y) if X else (0.0, 1.0, 0.0, 0.0)
        t0, tx, tz, tsk, tgl, tnet = _nnls_relative([b for b, _ in mem], [v for _, v in mem]) if mem else (0.0,) * 6
    finally:
        _COEFFS = saved
    coeffs["transfer_job"] = {"j0_s": j0, "j1": j1, "s_per_draw": jd, "group_lasso_compile_s": jgl,
                              "m0_mb": t0, "m_x": tx, "m_z": tz, "m_sklearn_mb": tsk, "m_group_lasso_mb": tgl,
                              "m_nets_mb": tnet}
    return _rounded(coeffs)


def _rounded(obj):
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return _sig(obj) if isinstance(obj, float) else obj


def write_coefficients(coeffs: dict, path: Path = COEFFS_PATH) -> None:
    import yaml
    header = ("# Fitted by groupsparse.costs.fit from benchmarks/costs/*.tsv: do not edit by hand\n"
              "# (tests/test_costs.py checks this file equals a refit). Refit with\n"
              "#   python benchmarks/measure_costs.py --refit\n"
              "# Units: seconds of CPU time on one thread, MB of peak resident memory; see costs.py.\n")
    Path(path).write_text(header + yaml.safe_dump(coeffs, sort_keys=True))
    global _COEFFS
    _COEFFS = None


def measured_vs_predicted(data: Path = DEFAULT_DATA) -> list[dict]:
    """Every measured job with the model's prediction: table, name, quantity, measured, predicted."""
    data = Path(data)
    c = coefficients()
    out = []
    for r in read_table(data / "pretrain.tsv"):
        p = _pre_row(r)
        out.append({"table": "pretrain", "name": r["name"], "what": "cpu_s", "measured": p["cpu_s"],
                    "predicted": _pretrain_cpu_s(p, c), "load1": float(r["load1_before"])})
        out.append({"table": "pretrain", "name": r["name"], "what": "mem_mb", "measured": p["mem_mb"],
                    "predicted": _pretrain_mem_mb(p, c), "load1": float(r["load1_before"])})
    for r in read_table(data / "transfer.tsv"):
        spec, transfer, methods, sizes, seeds = _tr_row(r)
        cost = transfer_cost(spec, transfer, methods, sizes, seeds, "cpu")
        out.append({"table": "transfer", "name": r["name"], "what": "cpu_s",
                    "measured": float(r["user_s"]) + float(r["sys_s"]), "predicted": cost.cpu_s,
                    "load1": float(r["load1_before"])})
        out.append({"table": "transfer", "name": r["name"], "what": "mem_mb", "measured": float(r["max_rss_mb"]),
                    "predicted": cost.mem_mb, "load1": float(r["load1_before"])})
    for r in _fit_lines(data):
        m = int(r["d"]) + int(r["D"])
        pred = sum(fit_seconds(f, int(r["seeds"]), int(r["d"]), int(r["D"]), m) for f in _fit_row_fits(r))
        out.append({"table": "transfer_fits", "name": f"{r['name']}:{r['downstream']}:{r['method']}:n={r['n']}",
                    "what": "cpu_seconds", "measured": r["cpu_seconds"], "predicted": pred, "load1": float("nan"),
                    "warmup": r["warmup"]})
    return out


def report(data: Path = DEFAULT_DATA) -> str:
    rows = measured_vs_predicted(data)
    lines = [f"{'table':<14} {'name':<40} {'what':<8} {'measured':>10} {'predicted':>10} {'ratio':>6} {'load1':>5}"]
    for r in rows:
        if r["table"] == "transfer_fits":
            continue
        lines.append(f"{r['table']:<14} {r['name']:<40} {r['what']:<8} {r['measured']:>10.1f} "
                     f"{r['predicted']:>10.1f} {r['predicted'] / r['measured']:>6.2f} {r['load1']:>5.2f}")
    fits = [r["predicted"] / r["measured"] for r in rows
            if r["table"] == "transfer_fits" and r["measured"] >= 0.2 and not r["warmup"]]
    if fits:
        lines.append(f"transfer_fits: {len(fits)} lines >= 0.2 s (first fit of a method in its job left out), "
                     f"predicted/measured from {min(fits):.2f} to {max(fits):.2f}")
    return "\n".join(lines)
