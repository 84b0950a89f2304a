"""Which implementation computes a pretraining step and its evaluation: the one dispatch.

Every gradient the study takes is exact (the closed forms agree with autograd to rounding); they
differ in speed and in the part of the parameter space they cover:

    autograd          torch autograd through ``transformer.forward``: every model variant
    general           ``fastpath``'s closed form of the paper model, torch operations
                      (float64 on a CPU; any dtype on a GPU, its per-sample sums as batched einsums)
    general_fused     the same closed form with its elementwise middle fused in numba (``fused.py``):
                      float32 on a CPU
    symmetric         ``symmetric.py``: antithetic batches on the X -> -X subspace (v2 = 0, W's cross
                      blocks 0, where every run from the zero start stays), from ``SYMMETRIC_MIN_D`` on
    symmetric_loops   the same step as one numba loop per sample (``symmetric_loops.py``): float32 on a CPU
    flow_loops        population gradient flow's vector field on the subspace (``flow.py``; pretrain.solver:
                      flow), float64 numba loops per outer sample on a CPU (``flow_loops.py``)
    flow_torch        the same field in batched torch: any device (a GPU's)

Population mode (``pretrain.gradient: population``) takes the closed form these rules choose and
projects its batch gradient onto the subspace the data law's symmetries fix (``population.py``):
``Plan.projected``; on the symmetric loops it goes from the subspace's coefficients to their gradient
directly (``population_loops.py``: ``Plan.from_coefficients``). :func:`plan` is the only place the
choice is made; the trainer, its evaluation, the cost model and the benchmarks all ask it.
Torch-free at import: the cost model uses it while the Snakefile parses; the kernels are imported
when a step runs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

# From this D on the symmetric kernel is faster than the general one (d = 10, batch 512, float32, the
# whole step: 1.4x at D = 16, 3.4x at 32, 15x at 64; benchmarks/bench.py's large-D rows). Below it the
# study keeps the general kernel, whose bits its D <= 16 results carry.
SYMMETRIC_MIN_D = 24

KERNELS = ("autograd", "general", "general_fused", "symmetric", "symmetric_loops", "flow_loops", "flow_torch")
# The machine rate each kernel's FLOPs run at (the cost model measures one per rate, costs.yaml; the FLOPs
# are ``step_flops``): torch's matrix products and fused elementwise passes, autograd's model, the
# symmetric kernel's small batched torch products, numba's per-sample loops; population mode from the
# subspace's coefficients runs its own loops ("subspace").
RATES = {
    "autograd": "autograd",
    "general": "gemm",
    "general_fused": "gemm",
    "symmetric": "torch",
    "symmetric_loops": "loops",
    "flow_loops": "flow",
    "flow_torch": "torch",
}
FORWARDS = {
    "autograd": "autograd",
    "general": "general",
    "general_fused": "general",
    "symmetric": "symmetric",
    "symmetric_loops": "symmetric",
    "flow_loops": "flow",
    "flow_torch": "flow",
}


@dataclass(frozen=True)
class Plan:
    """The implementation of a run's step: ``kernel`` computes the batch gradient; with ``projected``
    the gradient is then projected onto the population dynamics' invariant subspace."""

    kernel: str
    projected: bool = False

    def __post_init__(self) -> None:
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; kernels: {', '.join(KERNELS)}")

    @property
    def forward(self) -> str:
        """The evaluation's forward pass: autograd's model (``transformer.forward``), the general closed
        form's (``fastpath.seed_forward``) or the symmetric one's (``symmetric.forward``)."""
        return FORWARDS[self.kernel]

    @property
    def closed_form(self) -> bool:
        return self.kernel != "autograd"

    @property
    def rate(self) -> str:
        """The machine rate its step's FLOPs run at (``RATES``)."""
        return "subspace" if self.from_coefficients else RATES[self.kernel]

    @property
    def from_coefficients(self) -> bool:
        """Population mode on the symmetric loops: a step goes from the subspace's coefficients to their
        gradient without W (``population_loops``; :func:`coefficient_steps`)."""
        return self.projected and self.kernel == "symmetric_loops"


def plan(spec, symmetric_min_D: int = SYMMETRIC_MIN_D, kernel: str | None = None) -> Plan:
    """The plan of a run: ``spec`` a RunSpec or its dict (as in the spec files). ``symmetric_min_D`` and
    ``kernel`` are for benchmarks and tests that compare implementations on the same run (``kernel``
    forces one; a kernel that cannot compute this run's step is refused)."""
    from ..config.specs import RunSpec

    if not isinstance(spec, RunSpec):  # a spec file's dict, or the part of one the cost model knows
        spec = RunSpec.from_dict({"study_seed": 0, "task_name": "plan"} | spec, checked=True)
    chosen = _choose(spec, symmetric_min_D)
    if kernel is None:
        return chosen
    forced = replace(chosen, kernel=kernel)
    if kernel != "autograd" and chosen.kernel == "autograd":
        raise ValueError(f"kernel {kernel!r} computes only the paper model's step with closed-form gradients")
    if kernel.startswith("symmetric") and not _on_subspace(spec):
        raise ValueError(f"kernel {kernel!r} needs antithetic batches from the zero start")
    return forced


def step_flops(plan: Plan, B: int, D: int, d: int, m: int, layers: int = 1, antithetic: bool = True) -> int:
    """FLOPs of one seed's step of batch B by the plan's kernel, as the cost model prices them at the plan's
    ``rate``: the general closed forms by the dense formula of the batch (the count the benchmarks quote
    their speed against; an i.i.d. batch, with no mirror half to fold, counts twice), every other kernel
    by its own model (``kernel_flops``). m the token width, ``antithetic`` the batches' sampling."""
    from . import kernel_flops as kf

    if plan.from_coefficients:
        return kf.population_loops_flops(B, D, d)
    if plan.kernel.startswith("flow"):  # one evaluation of the flow's field over B outer samples
        return B * kf.flow_sample_flops(D, d)
    if plan.kernel == "autograd":
        return kf.dense_flops(B, D, d, m, layers)
    if plan.kernel.startswith("symmetric"):
        return kf.symmetric_flops(B, D, d, loops=plan.kernel == "symmetric_loops")
    return kf.dense_flops(B if antithetic else 2 * B, D, d, m, layers)  # the fold: about half the work


def eval_flops(plan: Plan, D: int, d: int, m: int, layers: int = 1) -> int:
    """FLOPs of one evaluated sample by the plan's forward: the symmetric forward's scores and softmax, or
    the dense formula's forward half."""
    from . import kernel_flops as kf

    if plan.forward == "flow":
        return kf.flow_sample_flops(D, d, nodes=80)  # the attention's fixed nodes and the loss's adapted ones
    if plan.forward == "symmetric":
        phases = kf.symmetric_torch_phases(2, D, d, 4)  # one sample
        return phases["scores"][0] + phases["softmax"][0]
    return kf.dense_flops(1, D, d, m, layers) // 2


def _on_subspace(spec) -> bool:
    """Whether every step of the run is on the X -> -X subspace: antithetic batches (which only a task
    kind with a symmetric law allows) from the zero start, where the closed forms keep v2 and W's
    cross blocks exactly 0."""
    return spec.pretrain.sampling == "antithetic" and spec.model.init == "zero"


def _choose(spec, symmetric_min_D: int) -> Plan:
    gradient = spec.pretrain.gradient
    projected = gradient == "population"
    if spec.pretrain.solver == "flow":  # population gradient flow's vector field (model/flow.py)
        chosen = spec.pretrain.flow.implementation
        if chosen == "auto":
            chosen = "loops" if spec.device == "cpu" else "torch"
        return Plan(f"flow_{chosen}", projected=True)
    if gradient == "autograd" or (gradient == "auto" and not spec.model.is_paper_model):
        return Plan("autograd")
    cpu32 = spec.device == "cpu" and spec.dtype == "float32"
    if _on_subspace(spec) and symmetric_min_D <= spec.task.D:
        return Plan("symmetric_loops" if cpu32 else "symmetric", projected)
    return Plan("general_fused" if cpu32 else "general", projected)


def loss_and_grads(plan: Plan, W, v, X, y, P, scale: float, antithetic: bool):
    """Loss and exact gradients dL/dW (m, m), dL/dv (m,) of one seed by the plan's closed form.

    X (d, D, H) in the draw's layout (the first half of [X, -X] with ``antithetic``), y (H,), P the
    positions; see ``fastpath.seed_loss_and_grads``.
    """
    from . import fastpath, symmetric
    from .cpu import denormals_flushed

    kernel = plan.kernel
    if kernel.startswith("symmetric"):
        with denormals_flushed() if X.device.type == "cpu" else contextlib.nullcontext():
            return symmetric.loss_and_grads(W, v, X, y, P, scale, loops=kernel == "symmetric_loops")
    if kernel == "general_fused":
        return fastpath.fused_loss_and_grads(W, v, X, y, P, scale, antithetic)
    if kernel == "general":
        return fastpath.seed_loss_and_grads(W, v, X, y, P, scale, antithetic, batched=X.device.type != "cpu")
    raise ValueError(f"kernel {kernel!r} has no closed form")


def coefficient_steps(plan: Plan, tasks, D: int, scale: float) -> list:
    """Per seed of ``tasks``, the step ``(coef, X, y) -> (loss, the coefficients' gradient)`` of a plan that
    works from the coefficients (``Plan.from_coefficients``)."""
    from .population_loops import LoopsStep

    if not plan.from_coefficients:
        raise ValueError(f"{plan} computes the gradient of W, not of the subspace's coefficients")
    return [LoopsStep(t.v_star, t.j_star, D, scale) for t in tasks]


def seed_forward(plan: Plan, W, v, X_inner, X_samples, P, scale: float, mirrored: bool):
    """Outputs f (N,) and the attention averaged over samples (D, D) [key i, query j] of one seed on an
    evaluation set, by the plan's forward: ``X_inner`` (d, D, N') in the draw's layout, ``X_samples``
    (N', D, d) the same samples; with ``mirrored`` they are the first half of [X, -X]."""
    import torch

    from . import fastpath, symmetric
    from .cpu import denormals_flushed

    if plan.forward == "symmetric":  # the mirror half has outputs -f and the same attention
        with denormals_flushed() if X_samples.device.type == "cpu" else contextlib.nullcontext():
            f, mean = symmetric.forward(W, v, X_samples, P, scale)
        return (torch.cat([f, -f]) if mirrored else f), mean
    f, attn = fastpath.seed_forward(W, v, X_inner, P, scale, mirrored)
    return f.reshape(-1), attn.mean(dim=(0, 3))  # halves in sample order
