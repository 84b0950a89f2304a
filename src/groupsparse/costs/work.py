"""The work of a job, from its spec: FLOPs, random draws, bytes, the fits a transfer job performs.

Plain arithmetic on spec dicts (no coefficients); see the package docstring for the model."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..config.schema import schema_defaults
from ..config.specs import step_size
from ..model import dispatch
from ..transfer import methods as registry  # torch-free: each method module declares its work
from ..transfer.spec import TransferSpec

__all__ = [
    "DTYPE_BYTES",
    "Fit",
    "coefficients_of",
    "describe_pretrain",
    "describe_transfer",
    "fit_work",
    "flow_bytes",
    "measured_methods",
    "record_count",
    "transfer_fits",
]

DTYPE_BYTES = {"float32": 4, "float64": 8}
_TOP, _TASK, _MODEL, _PRETRAIN = (schema_defaults(part) for part in (None, "task", "model", "pretrain"))
_FLOW = schema_defaults("flow")
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


def pretrain_work(
    plan: dispatch.Plan, S: int, L: int, d: int, D: int, m: int, T: int, B: int, R: int, E: int, antithetic: bool
) -> dict:
    """FLOPs and draws of a pretraining job (S seeds x T steps of batch B, R records of E evaluation samples)
    by the dispatch's FLOP model of its plan, and the machine rate its step runs at (``Plan.rate``): the
    evaluations are counted at that rate too. Antithetic batches draw half their samples. The flow: T its
    vector-field evaluations over its B outer samples, drawn once."""
    per_step = dispatch.step_flops(plan, B, D, d, m, L, antithetic)
    per_eval = dispatch.eval_flops(plan, D, d, m, L)
    # a step-based run draws B samples a step; the flow its outer and evaluation samples once (not priced)
    draws = 0 if plan.kernel.startswith("flow") else S * T * B * D * d
    return {"rate": plan.rate, "flops": S * (T * per_step + R * E * per_eval), "draws": draws}


def describe_pretrain(spec: dict, seeds: int, threads: int = 1) -> dict:
    """The features of one pretraining job (a RunSpec dict, ``seeds`` seeds in the job)."""
    plan = dispatch.plan(spec)  # from the spec as given: dispatch.plan reads it as a job would
    spec = with_defaults(spec)
    t, p, model = spec["task"], spec["pretrain"], spec["model"]
    d, D = t["d"], t["D"]
    m, L = token_width(model, d, D), model["layers"]
    antithetic = p["sampling"] == "antithetic"
    R = record_count(p["steps"], p["record_every"], p["attention_checkpoints"])
    eta = step_size(p["eta"], p["eta_D_limit"], D)
    if plan.kernel.startswith("flow"):
        return describe_flow(spec, plan, seeds, threads, eta)
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
        "kernel": plan.kernel,
        "projected": plan.projected,
        "sampling": p["sampling"],
        **pretrain_work(plan, seeds, L, d, D, m, p["steps"], p["batch"], R, p["eval_size"], antithetic),
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
            not plan.closed_form,  # autograd: every seed at once
        ),
    }


# Vector-field evaluations of the flow's solver per octave of flow time (BDF at rtol 1e-6, its Jacobians'
# included): 93 at D = 16 and 99 at D = 64 to 32 D^3, N = 2048 and 4096, in the flow study (2026-12-07).
FLOW_EVALUATIONS_PER_OCTAVE = 100


def describe_flow(spec: dict, plan: dispatch.Plan, seeds: int, threads: int, eta: float) -> dict:
    """The features of a flow job (pretrain.solver: flow): per seed about FLOW_EVALUATIONS_PER_OCTAVE field
    evaluations an octave of flow time over its outer samples, and records_per_octave records an octave
    over its evaluation sample; the samples held in float64."""
    t, p = spec["task"], spec["pretrain"]
    f = _FLOW | (p.get("flow") or {})
    d, D = t["d"], t["D"]
    T = f["flow_time"] or eta * p["steps"]
    octaves = max(1.0, math.log2(max(T, 1.0) / 0.25))
    evaluations = math.ceil(FLOW_EVALUATIONS_PER_OCTAVE * octaves)
    records = math.ceil(f["records_per_octave"] * octaves) + 4
    return {
        "job": "pretrain",
        "kind": t["kind"],
        "d": d,
        "D": D,
        "m": d + D,
        "layers": 1,
        "seeds": seeds,
        "steps": evaluations,
        "eta": eta,
        "flow_time": T,
        "batch": f["samples"],
        "eval_size": f["eval_samples"],
        "records": records,
        "dtype": "float64",
        "kernel": plan.kernel,
        "projected": True,
        "sampling": "antithetic",
        **pretrain_work(plan, seeds, 1, d, D, d + D, evaluations, f["samples"], records, f["eval_samples"], True),
        "python_steps": evaluations + records,
        **flow_bytes(f["samples"], f["eval_samples"], d, D, threads),
    }


def flow_bytes(samples: int, eval_samples: int, d: int, D: int, threads: int) -> dict:
    """Bytes alive at once in a flow job: one seed's outer and evaluation samples in float64 (seeds run one
    after another), and each thread's D x D blocks (the Gram matrix and its scratch) as its loops run."""
    return {
        "persistent_bytes": (samples + eval_samples) * d * D * 8 + FLOW_LIBRARY_BYTES,
        "transient_bytes": max(1, threads) * 2 * D * D * 8,
    }


# what a flow job loads besides a step-based one's (scipy.integrate, numba's parallel loops): its jobs peaked
# at 480-580 MB where the model without it gave 390-420 (benchmarks/costs/pretrain.tsv, p_flow_* rows)
FLOW_LIBRARY_BYTES = 100 * 2**20


def pretrain_bytes(
    S: int, threads: int, L: int, nbytes: int, B: int, E: int, d: int, D: int, m: int, autograd: bool
) -> dict:
    """Bytes alive at once: per seed the evaluation set and its features and the step's batch
    (``persistent``), plus one step's temporaries for the seeds computed at the same time
    (``transient``: min(S, threads) for the per-seed fast kernel, all S under ``autograd``)."""
    at_once = S if autograd else max(1, min(S, threads))
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
