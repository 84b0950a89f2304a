"""The descent rule: how a run's state moves from one of the trainer's events to the next.

The trainer (``pretrain.Trainer``) stops at events: a record (``recording.record_steps``), an attention
checkpoint (``recording.attention_steps``), a resume state (every ``resume_every`` steps, or by wall time)
and the end. Between two events the state is the descent rule's business. Every rule has

    eta                                   the step size eta(D); a step is flow time eta (tau = eta x step)
    coef                                  population mode's subspace coefficients (S, 8) float64, else None
    parameters() -> dict                  every seed's W, v (and the other parameters) at the current point
    evaluate(step, guard) -> loss (S,)    the training loss at the current point, which is step ``step``,
                                          checked by ``guard`` (``divergence.Divergence.check``)
    advance(step, to, guard, pause, progress=None) -> int
                                          from the evaluated step ``step`` to step ``to`` (not evaluated);
                                          returns ``to``, or an earlier step where ``pause(s)`` is true before
                                          step s (a resume state is due by wall time) or ``guard.stopped``
    state() -> (tensors, meta); load(tensors, meta, device)
                                          what a resume state keeps of the rule, and its restoring

``steps.Steps`` is the rule of plain gradient descent, Adam and population mode's gradient descent on
the invariant subspace: it advances by steps, one at a time or many in one numba call a seed
(``many_steps.ManySteps``). A rule that advances in flow time (an ODE integrated from the flow time
eta x ``step`` to eta x ``to``) implements the same methods; :func:`make` is where a run's rule is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from ..config.specs import RunSpec
from ..model import dispatch
from ..model.cpu import SeedWorkers
from .batches import Batches
from .descent import Adam, GradientDescent, SubspaceDescent
from .divergence import Divergence
from .many_steps import ManySteps
from .steps import Steps


class DescentRule(Protocol):
    eta: float
    coef: torch.Tensor | None

    def parameters(self) -> dict[str, torch.Tensor]: ...

    def evaluate(self, step: int, guard: Divergence) -> torch.Tensor: ...

    def advance(self, step: int, to: int, guard: Divergence, pause: Callable[[int], bool], progress=None) -> int: ...

    def state(self) -> tuple[dict, dict]: ...

    def load(self, tensors: dict, meta: dict, device) -> None: ...


def make(
    spec: RunSpec,
    plan: dispatch.Plan,
    tasks: list,
    params: dict[str, torch.Tensor],
    batches: Batches,
    positions: torch.Tensor | None,
    scale: float,
    workers: SeedWorkers,
) -> Steps:
    """The run's rule from ``params`` (the initial point): gradient descent at eta(D) by steps, its update
    population mode's (``plan.projected``), Adam's or plain gradient descent's."""
    eta = spec.pretrain.step_size(spec.task.D)
    if plan.projected:
        coefficient_steps = (
            dispatch.coefficient_steps(plan, tasks, spec.task.D, scale) if plan.from_coefficients else None
        )
        device = next(iter(params.values())).device
        update = SubspaceDescent(eta, tasks, positions, batches.dtype, device, coefficient_steps)
    else:
        update = Adam(eta) if spec.pretrain.optimizer == "adam" else GradientDescent(eta)
    many = None
    if plan.from_coefficients and batches.draws_many:  # no W in a step, many batches drawn at once
        ts, p = spec.task, spec.pretrain
        step_bytes = ts.d * ts.D * (p.batch // 2 if batches.antithetic else p.batch) * batches.draw_dtype.itemsize
        many = ManySteps(batches, update, workers, step_bytes)
    return Steps(update, params, batches, plan, spec.model, positions, scale, workers, many)
