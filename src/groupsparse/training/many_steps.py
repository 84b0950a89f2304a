"""Population mode on the loops: the plain steps between two events in one call a seed.

A step from the subspace's coefficients needs no W (``model.population_loops``), so the steps at which
nothing is recorded or saved can run in one numba call (``population_loops.descend``: no Python between
them), their samples drawn in one go (``sample_inner_steps``). The numbers are those of one step at a
time, to the last bit (``tests/unit/test_population.py``); where a loss leaves its bound or a value is
not finite, the call changes nothing and ``steps.Steps`` takes the steps one by one.
"""

from __future__ import annotations

from ..model.cpu import SeedWorkers
from .batches import Batches
from .descent import SubspaceDescent

# at most this many bytes of drawn samples a call: a few hundred steps at D = 64, batch 32
FUSED_DRAW_BYTES = 4 << 20


class ManySteps:
    """Takes k steps of every seed in one call a seed (``take``), at most ``most`` at a time."""

    def __init__(self, batches: Batches, update: SubspaceDescent, workers: SeedWorkers, step_bytes: int):
        """``step_bytes``: one seed's drawn samples of one step."""
        self.batches, self.update, self.workers = batches, update, workers
        self.most = max(1, FUSED_DRAW_BYTES // step_bytes)

    def take(self, k: int, bounds: list[float]) -> list[float] | None:
        """k steps of every seed (all active), each as a step that records nothing, in one call a seed: the
        last step's losses. None, and nothing changed (the generators put back), where a seed's loss
        exceeded its bound (``bounds``) or a value was not finite."""
        states = self.batches.states()

        def one(s):
            X, y = self.batches.draw_steps(s, k)
            return self.update.descend_batches(s, X, y, bounds[s])

        out = self.workers.map(one, len(self.batches.tasks))
        if any(done < k for _, done, _ in out):
            self.batches.restore(states)
            return None
        self.update.set_coefficients([coef for coef, _, _ in out])
        return [float(losses[-1]) for _, _, losses in out]
