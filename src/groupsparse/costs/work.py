"""The work of a job, from its spec: FLOPs, random draws, bytes, the fits a transfer job performs.

Plain arithmetic on spec dicts (no coefficients); see the package docstring for the model."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..config.schema import schema_defaults
from ..config.specs import step_size
from ..model import dispatch, kernel_flops
from ..transfer import methods as registry  # torch-free: each method module declares its work
from ..transfer.spec import TransferSpec

DTYPE_BYTES = {"float32": 4, "float64": 8}
_TOP, _TASK, _MODEL, _PRETRAIN = (schema_defaults(part) for part in (None, "task", "model", "pretrain"))
N_LOG_STEPS = 40  # pretrain.N_LOG_STEPS (recording grid)


def coefficients_of(method: str) -> str:
    """The method whose fitted coefficients (costs.yaml transfer_fit) ``method`` is costed with:
    its own where it was measured, else the one its module names (COSTS_LIKE: a fresh v costs what
    the pretrained start costs, the probe is a logistic regression on the m features u(X))."""
    return registry.method(method).costs_like


def measured_methods() -> tuple[str, ...]:
    """The methods with fitted coefficients of their own (benchmarks/measure_costs.py times them)."""
    return tuple(m for m, info in registry.registry().items() if info.costs_like == m)


def record_count(steps: int, every: int, attention_checkpoints: int) -> int:
    """Evaluations a pretraining run performs: its recording grid plus the attention checkpoints
    (pretrain.record_steps / attention_steps, without numpy)."""
    # counted, not listed: a config with 10^12 steps must not fill memory at parse time
    regular = steps // every + 1  # 0, every, 2 every, ...
    extra = {steps} if steps % every else set()
    if steps >= 1:
        extra |= {int(round(math.exp(math.log(steps) * i / (N_LOG_STEPS - 1)))) for i in range(N_LOG_STEPS)}
    extra = {x for x in extra if x % every}  # those not already on the regular grid
    att = (
        {steps}
        if attention_checkpoints == 1
        else (
            {
                int(round(math.exp(math.log(max(steps, 1)) * i / max(attention_checkpoints - 2, 1))))
                for i in range(attention_checkpoints - 1)
            }
            | {0}
        )
    )
    return regular + len(extra) + len(att)


def with_defaults(spec: dict) -> dict:
    """A run spec dict (Run.spec, or the part of one a measured job's row gives) with the schema's
    defaults where it gives none."""
    return {
        "dtype": _TOP["dtype"],
        "device": _TOP["device"],
        **spec,
        "task": _TASK | spec["task"],
        "model": _MODEL | spec.get("model", {}),
        "pretrain": _PRETRAIN | spec.get("pretrain", {}),
    }


def token_width(model: dict, d: int, D: int) -> int:
    return d + D if model.get("positions", _MODEL["positions"]) == "concat" else d


def _path(spec: dict) -> str:
    """The cost model's path of a run (``costs/costs.yaml`` is fitted per path): the implementation
    ``dispatch.plan`` chooses, the general closed form split by its sampling (i.i.d. batches have no
    mirror half to fold), and population mode from the subspace's coefficients (``population_loops``:
    its step never forms W, so it has a work count of its own)."""
    plan = dispatch.plan(spec)
    kernel = plan.kernel
    if plan.from_coefficients:
        return "population_loops"
    if kernel.startswith("general"):
        sampling = spec.get("pretrain", {}).get("sampling", _PRETRAIN["sampling"])
        return "antithetic" if sampling == "antithetic" else "iid"
    return kernel


def pretrain_flops(path: str, S: int, L: int, d: int, D: int, m: int, T: int, B: int, R: int, E: int) -> int:
    """FLOPs of a pretraining job: S seeds x T steps of batch B, R records of E evaluation samples.
    The dense formula per sample (L D m (m + D), 4 per training sample, 2 per evaluated one), except
    on the symmetric paths: the kernel's own count (``symmetric_loops``: the per-sample loops) and the
    symmetric forward's per evaluated sample; population mode's loops (``population_loops``) by their
    own count per step, evaluated as the symmetric paths."""
    if path.startswith("symmetric") or path == "population_loops":
        forward = kernel_flops.symmetric_torch_phases(2, D, d, 4)
        per_eval = forward["scores"][0] + forward["softmax"][0]
        if path == "population_loops":
            per_step = kernel_flops.population_loops_flops(B, D, d)
        else:
            per_step = kernel_flops.symmetric_flops(B, D, d, path == "symmetric_loops")
        return S * (T * per_step + R * E * per_eval)
    return S * L * D * m * (m + D) * (4 * T * B + 2 * R * E)


def describe_pretrain(spec: dict, seeds: int, threads: int = 1) -> dict:
    """The features of one pretraining job (a RunSpec dict, ``seeds`` seeds in the job)."""
    path = _path(spec)  # from the spec as given: dispatch.plan reads it as a job would
    spec = with_defaults(spec)
    t, p, model = spec["task"], spec["pretrain"], spec["model"]
    d, D = t["d"], t["D"]
    m, L = token_width(model, d, D), model["layers"]
    R = record_count(p["steps"], p["record_every"], p["attention_checkpoints"])
    eta = step_size(p["eta"], p["eta_D_limit"], D)
    return {
        "job": "pretrain",
        "kind": t["kind"],
        "d": d,
        "D": D,
        "m": m,
        "layers": L,
        "seeds": seeds,
        "steps": p["steps"],
        "eta": eta,
        "flow_time": eta * p["steps"],  # tau = eta x steps: a solver in flow time is priced by it
        "batch": p["batch"],
        "eval_size": p["eval_size"],
        "records": R,
        "dtype": spec["dtype"],
        "path": path,
        "flops": pretrain_flops(path, seeds, L, d, D, m, p["steps"], p["batch"], R, p["eval_size"]),
        "draws": seeds * p["steps"] * p["batch"] * D * d,
        "python_steps": p["steps"] + R,
        **pretrain_bytes(
            seeds,
            threads,
            L,
            DTYPE_BYTES[spec["dtype"]],
            p["batch"],
            p["eval_size"],
            d,
            D,
            m,
            path,
        ),
    }


def pretrain_bytes(
    S: int, threads: int, L: int, nbytes: int, B: int, E: int, d: int, D: int, m: int, path: str
) -> dict:
    """Bytes alive at once: per seed the evaluation set and its features and the step's batch
    (``persistent``), plus one step's temporaries for the seeds computed at the same time
    (``transient``: min(S, threads) for the per-seed fast kernel, all S under autograd)."""
    at_once = S if path == "autograd" else max(1, min(S, threads))
    return {
        "persistent_bytes": S * nbytes * (E * D * (m + D) + B * D * d),
        "transient_bytes": at_once * L * nbytes * B * D * (m + D),
    }


@dataclass(frozen=True)
class Fit:
    """One fit a transfer job performs: a method on n_train samples, predicting n_eval samples."""

    method: str
    n_train: int
    n_eval: int


def fit_work(method: str, n: int, n_eval: int, seeds: int, d: int, D: int, m: int, hp: dict | None = None) -> tuple:
    """(steps, train_work, eval_work) of one fit of ``method`` for ``seeds`` seeds at once (its module's ``work``)."""
    return registry.method(method).work(n, n_eval, seeds, d, D, m, hp)


def transfer_fits(transfer: dict, methods: Iterable[str], sizes: Iterable[int], online: bool = True) -> list[Fit]:
    """Every fit a transfer job performs, per downstream task: one final fit per (n, method), plus,
    under ``selection: cv``, grid points x fitted folds on the training part of each split (the
    transfer spec's own folds(n): k folds below cv_large_n, one holdout split from it on). The final
    fit of an online-SGD method also scores its iterates on online_eval_size test samples (counted as
    evaluation; the CV fits score none: ``transfer.runner`` gives only the final fit an ``OnlineEval``;
    ``online=False`` for jobs measured before the online error was recorded)."""
    spec = transfer_settings(transfer)
    online = online and not transfer.get("_measured_without_online_error", False)
    downstream = spec.downstream
    test = spec.test_size
    fits = []
    for down in downstream:
        for n in sizes:
            for method in (m for m in methods if spec.fits_on(down, m)):
                scored = online and registry.method(method).online
                online_n = min(n, spec.online_points) * spec.online_eval_size if scored else 0
                k, fitted = spec.folds(n)
                if spec.selection == "cv" and k >= 2:
                    points = math.prod(len(v) for v in spec.method_grid(method).values())
                    val = n // k
                    fits += [Fit(method, n - val, val)] * (points * fitted)
                fits.append(Fit(method, n, n + test + online_n))
    return fits


def transfer_settings(transfer: dict) -> TransferSpec:
    """The settings of a transfer section (Run.transfer, or a measured job's row), the schema's defaults
    where it gives none; keys of the cost model's own (a leading ``_``) are left out."""
    return TransferSpec.from_dict({k: v for k, v in transfer.items() if k in TransferSpec.__dataclass_fields__})


def describe_transfer(spec: dict, transfer: dict, methods: list[str], sizes: list[int], seeds: int) -> dict:
    t, model = spec["task"], spec.get("model", {})
    d, D = t["d"], t["D"]
    m = token_width(model, d, D)
    settings = transfer_settings(transfer)
    test = settings.test_size
    return {
        "job": "transfer",
        "d": d,
        "D": D,
        "m": m,
        "seeds": seeds,
        "methods": ",".join(methods),
        "sizes": ",".join(map(str, sizes)),
        "max_n": max(sizes),
        "test_size": test,
        "downstream": ",".join(settings.downstream),
        "selection": settings.selection,
        "cv_folds": settings.cv_folds,
        "fits": len(transfer_fits(transfer, methods, sizes)),
        "x_bytes": seeds * (test + max(sizes)) * D * d * 8,
        "z_bytes": seeds * (test + max(sizes)) * D * m * 8 * any(registry.method(x).online for x in methods),
    }
