"""When a seed has diverged, and which seeds a step still moves.

A seed has diverged when its training loss is not finite, its gradient is not finite, or its loss stays
above ``DIVERGE_FACTOR`` times its loss at the run's first step for ``DIVERGE_PATIENCE`` steps in a row.
A diverged seed is frozen (``active`` leaves it out) and recorded no more; with ``on_diverge: fail`` the
run stops at the first divergence.
"""

from __future__ import annotations

import math

import torch

# A stable run's logistic loss stays below its start (log 2 from the zero start), while a step size far
# too large gives losses of order |f|, far above it, long before they overflow.
DIVERGE_FACTOR = 10.0
# ... for this many consecutive steps: a single spike (heavy-tailed or image batches, one bad step of
# an oscillation that recovers) is not a divergence; a blow-up stays above the bound step after step.
DIVERGE_PATIENCE = 5


class Divergence:
    """Each seed's status ("ok" or "diverged"), the step it diverged at, its last finite loss, and the
    loss bound; ``check`` reads every step's losses."""

    def __init__(self, n_seeds: int, stop_on_divergence: bool):
        self.stop_on_divergence = stop_on_divergence
        self.status, self.diverged_step = ["ok"] * n_seeds, [-1] * n_seeds
        self.last_finite = [float("nan")] * n_seeds
        self.initial_loss: list[float] | None = None
        self.above = [0] * n_seeds  # consecutive steps with the loss above DIVERGE_FACTOR x its start
        self.bounds: list[float] | None = None
        self._active, self._active_for = None, None

    def check(self, step: int, loss: torch.Tensor, finite: list[bool]) -> None:
        """The losses (S,) of step ``step`` and whether each seed's gradient is finite."""
        # on Python floats (exactly the float64 comparisons): a few tensor calls a step, not one a seed
        losses = loss.detach().cpu().double().tolist()
        if self.initial_loss is None:
            self.initial_loss = list(losses)
        if self.bounds is None:  # once per run (or resume), not per step
            self.bounds = [DIVERGE_FACTOR * x for x in self.initial_loss]
        self.above = [a + 1 if x > b else 0 for a, x, b in zip(self.above, losses, self.bounds)]
        for i, x in enumerate(losses):
            if self.status[i] != "ok":
                continue
            if math.isfinite(x) and finite[i] and self.above[i] < DIVERGE_PATIENCE:
                self.last_finite[i] = x
            else:
                self.status[i], self.diverged_step[i] = "diverged", step

    def passed(self, last_losses: list[float]) -> None:
        """Steps taken together (``many_steps``), every loss finite and within its bound: the last losses."""
        self.last_finite, self.above = list(last_losses), [0] * len(self.status)

    @property
    def active(self) -> torch.Tensor:
        """(S,) bool: the seeds a step still moves (a new tensor only when a seed's status changes)."""
        if self._active is None or self.status != self._active_for:
            self._active, self._active_for = torch.tensor([s == "ok" for s in self.status]), list(self.status)
        return self._active

    @property
    def all_ok(self) -> bool:
        return all(s == "ok" for s in self.status)

    @property
    def stopped(self) -> bool:
        """The run ends here: a seed diverged under ``on_diverge: fail``."""
        return self.stop_on_divergence and not self.all_ok

    def state(self) -> dict:
        """What a resume state keeps (its metadata's keys)."""
        return {
            "status": self.status,
            "diverged_step": self.diverged_step,
            "last_finite_loss": self.last_finite,
            "initial_loss": self.initial_loss,
            "steps_above_bound": self.above,
        }

    def load(self, meta: dict) -> None:
        self.status, self.diverged_step = meta["status"], meta["diverged_step"]
        self.last_finite, self.initial_loss = meta["last_finite_loss"], meta.get("initial_loss")
        self.above = meta.get("steps_above_bound", self.above)
