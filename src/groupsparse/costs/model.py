"""Predictions: the fitted coefficients (costs.yaml) applied to a job's work, per device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..data.kinds import kind_of
from ..transfer import methods as registry
from .work import (
    Fit,
    coefficients_of,
    describe_pretrain,
    describe_transfer,
    fit_work,
    token_width,
    transfer_fits,
    transfer_settings,
    with_defaults,
)

__all__ = [
    "COEFFS_PATH",
    "FIT_TERMS",
    "GPU_ASSUMPTIONS",
    "GPU_NOTE",
    "GPU_TIME_MARGIN",
    "MEM_FLOOR_MB",
    "MEM_MARGIN",
    "TIME_FLOOR_MIN",
    "TIME_MARGIN",
    "Cost",
    "coefficients",
    "fit_seconds",
    "pretrain_cost",
    "set_coefficients",
    "transfer_cost",
]

COEFFS_PATH = Path(__file__).with_name("costs.yaml")

# Safety margins of a request over the model's prediction (the fitted scatter: see tests/unit/test_costs.py).
TIME_MARGIN = 1.5  # runtime request = 1.5 x predicted (+ TIME_FLOOR_MIN)
TIME_FLOOR_MIN = 5  # minutes added to every runtime request (start-up, file system, scheduler)
GPU_TIME_MARGIN = 3.0  # a GPU estimate is not a measurement: a wider margin
MEM_MARGIN = 1.3  # memory request = 1.3 x predicted (+ MEM_FLOOR_MB)
MEM_FLOOR_MB = 256
GPU_NOTE = "estimate (no GPU measurement)"
# Assumed sustained throughput of a data-centre GPU on these small batched GEMMs (well below
# peak) and the cost of one python-level step (a few kernel launches); stated, not measured.
# A pretraining step runs a few hundred small kernels per seed (model/fastpath.py), ~7 us each to launch;
# a transfer step (one SGD sample, one minibatch) a few dozen.
GPU_ASSUMPTIONS = {
    "flops_per_s": {"float32": 5e12, "float64": 2e12},
    "pretrain_seed_step_s": 1.5e-3,
    "step_s": 2e-4,
    "startup_s": 20.0,
    "host_mem_mb": 2500,
}


# -- coefficients ------------------------------------------------------------------------

_COEFFS: dict | None = None


def coefficients() -> dict:
    """The fitted coefficients (costs.yaml), read once."""
    global _COEFFS
    if _COEFFS is None:
        from ..config.schema import load_yaml

        _COEFFS = load_yaml(COEFFS_PATH.read_text())
    return _COEFFS


def set_coefficients(coeffs: dict | None) -> dict | None:
    """Use ``coeffs`` from now on (None: read costs.yaml again at the next use); returns the old ones."""
    global _COEFFS
    saved, _COEFFS = _COEFFS, coeffs
    return saved


def round_significant(x: float, digits: int = 6) -> float:
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
    measured: bool = True  # False: a GPU figure derived from assumptions (GPU_NOTE)

    @property
    def note(self) -> str:
        return "" if self.measured else GPU_NOTE


def _thread_speedup(threads: int, parallel: int) -> float:
    """Assumed (not measured: every measurement uses one thread): seeds spread over threads at
    50 % efficiency beyond the first, never more threads than independent seeds."""
    k = max(1, min(int(threads), int(parallel)))
    return 1.0 + 0.5 * (k - 1)


def pretrain_cpu_s(f: dict, c: dict) -> float:
    p = c["pretrain"]
    factor = p["rate_factor"].get(f["rate"], 1.0)  # one factor, or the rate's own for its flops and its draws
    on_flops, on_draws = (factor["flops"], factor["draws"]) if isinstance(factor, dict) else (factor, factor)
    return p["c0_s"] + on_flops * p["s_per_flop"][f["dtype"]] * f["flops"] + on_draws * p["s_per_draw"] * f["draws"]


def pretrain_mem_mb(f: dict, c: dict) -> float:
    p = c["pretrain"]
    return (
        p["m0_mb"]
        + p["m_dataset_mb"] * kind_of(f["kind"]).loads_dataset
        + p["m_persistent"] * f["persistent_bytes"] / 2**20
        + p["m_transient"] * f["transient_bytes"] / 2**20
    )


def pretrain_cost(spec: dict, seeds: int, device: str | None = None, threads: int = 1) -> Cost:
    """One pretraining job: ``spec`` a RunSpec dict (Run.spec), ``seeds`` the seeds it trains."""
    c = coefficients()
    f = describe_pretrain(spec, seeds, threads)
    cpu = pretrain_cpu_s(f, c)
    mem = pretrain_mem_mb(f, c)
    device = device or with_defaults(spec)["device"]
    if device == "cuda":
        g = GPU_ASSUMPTIONS
        wall = (
            g["startup_s"]
            + f["flops"] / g["flops_per_s"][f["dtype"]]
            + seeds * f["python_steps"] * g["pretrain_seed_step_s"]
        )
        return Cost(cpu, wall, max(g["host_mem_mb"], c["pretrain"]["m0_mb"]), "cuda", measured=False)
    return Cost(cpu, cpu / _thread_speedup(threads, seeds), mem, "cpu")


FIT_TERMS = ("s_per_fit", "s_per_step", "s_per_train_op", "s_per_eval_op")
CPU_LIBRARIES = ("sklearn", "skglm")  # a method module's LIBRARY that never runs on the GPU


def _library(method: str) -> str:
    return registry.method(method).library


def fit_features(fit: Fit, seeds: int, d: int, D: int, m: int, hp: dict | None) -> list[float]:
    steps, train, ev = fit_work(fit.method, fit.n_train, fit.n_eval, seeds, d, D, m, hp)
    return [1.0, float(steps), float(train), float(ev)]


def fit_seconds(fit: Fit, seeds: int, d: int, D: int, m: int, hp: dict | None = None) -> float:
    """Predicted seconds of one fit (all ``seeds`` at once), on one CPU thread."""
    k = coefficients()["transfer_fit"][coefficients_of(fit.method)]
    return sum(k[name] * x for name, x in zip(FIT_TERMS, fit_features(fit, seeds, d, D, m, hp)))


def transfer_parts(spec: dict, transfer: dict, methods, sizes, seeds: int) -> tuple[float, float, bool, float]:
    t = spec["task"]
    d, D = t["d"], t["D"]
    m = token_width(spec.get("model", {}), d, D)
    hps = transfer_settings(transfer).hyperparameters
    fits = transfer_fits(transfer, methods, sizes)
    total = sum(fit_seconds(f, seeds, d, D, m, hps.get(f.method)) for f in fits)
    gpu = 0.0
    g = GPU_ASSUMPTIONS
    settings = transfer_settings(transfer)
    dtype = settings.dtype
    for f in fits:
        if _library(f.method) in CPU_LIBRARIES:  # scikit-learn / skglm: on the CPU whatever the device
            gpu += fit_seconds(f, seeds, d, D, m, hps.get(f.method))
        else:
            steps, train, ev = fit_work(f.method, f.n_train, f.n_eval, seeds, d, D, m, hps.get(f.method))
            gpu += steps * g["step_s"] + 2 * (3 * train + ev) / g["flops_per_s"][dtype]
    draws = seeds * len(settings.downstream) * (settings.test_size + sum(sizes)) * D * d
    return total, draws, any(_library(m) == "skglm" for m in methods), gpu


def transfer_mem_features(f: dict, methods) -> list[float]:
    """[1, data MB, embedded-token MB (paper-model methods), scikit-learn loaded, skglm/numba
    loaded, torch nets trained]: the libraries' code and the nets' autograd state count."""
    return [
        1.0,
        f["x_bytes"] / 2**20,
        f["z_bytes"] / 2**20,
        float(any(_library(m) in CPU_LIBRARIES for m in methods)),
        float(any(_library(m) == "skglm" for m in methods)),
        float(any(_library(m) == "torch_net" for m in methods)),
    ]


def _transfer_mem_mb(c: dict, f: dict, methods) -> float:
    tj = c["transfer_job"]
    k = [tj["m0_mb"], tj["m_x"], tj["m_z"], tj["m_sklearn_mb"], tj["m_group_lasso_mb"], tj["m_nets_mb"]]
    return sum(a * x for a, x in zip(k, transfer_mem_features(f, methods)))


def _transfer_job_s(c: dict, fits_s: float, draws: float, gl: bool) -> float:
    j = c["transfer_job"]
    return j["j0_s"] + j["j1"] * fits_s + j["s_per_draw"] * draws + (j["group_lasso_compile_s"] if gl else 0.0)


def transfer_cost(
    spec: dict, transfer: dict, methods, sizes, seeds: int, device: str | None = None, threads: int = 1
) -> Cost:
    """One transfer job: ``spec`` the run's RunSpec dict, ``transfer`` its TransferSpec dict
    (Run.transfer), the job's ``methods`` and ``sizes``, ``seeds`` in the checkpoint."""
    c = coefficients()
    methods, sizes = list(methods), list(sizes)
    fits_s, draws, gl, gpu_fits = transfer_parts(spec, transfer, methods, sizes, seeds)
    cpu = _transfer_job_s(c, fits_s, draws, gl)
    f = describe_transfer(spec, transfer, methods, sizes, seeds)
    mem = _transfer_mem_mb(c, f, methods)
    device = device or with_defaults(spec)["device"]
    if device == "cuda":
        wall = GPU_ASSUMPTIONS["startup_s"] + _transfer_job_s(c, gpu_fits, draws, gl) - c["transfer_job"]["j0_s"]
        return Cost(cpu, wall, mem, "cuda", measured=False)
    return Cost(cpu, cpu, mem, "cpu")  # one fit at a time: threads assumed to give no speedup
