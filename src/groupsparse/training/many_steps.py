"""Population mode on the loops: the plain steps between two recordings in one call a seed.

A step from the subspace's coefficients needs no W (``model.population_loops``), so the steps at which
nothing is recorded or saved can run in one numba call (``population_loops.descend``: no Python between
them), their samples drawn in one go (``sample_inner_steps``). The numbers are those of one step at a
time, to the last bit (``tests/unit/test_population.py``); where a loss leaves its bound or a value is
not finite, the call changes nothing and ``Trainer.run`` takes the steps one by one.
"""

from __future__ import annotations

import bisect

import torch

# at most this many bytes of drawn samples a call: a few hundred steps at D = 64, batch 32
FUSED_DRAW_BYTES = 4 << 20


class ManySteps:
    """The trainer's calls of many steps (a mixin of ``pretrain.Trainer``, as ``recording.Recording`` is)."""

    @property
    def fusable(self) -> bool:
        """Population mode on the loops (no W in a step), on tasks that draw many batches at once."""
        draws_many = all(hasattr(t, "sample_inner_steps") for t in self.tasks)
        return self.plan.from_coefficients and self.inner_draws and draws_many

    def fused_steps(self) -> int:
        """How many steps one :meth:`descend_many` call takes at most (FUSED_DRAW_BYTES of samples)."""
        ts, p = self.spec.task, self.spec.pretrain
        per_step = ts.d * ts.D * (p.batch // 2 if self.antithetic else p.batch) * self.draw_dtype.itemsize
        return max(1, FUSED_DRAW_BYTES // per_step)

    def descend_many(self, k: int, bounds: list[float]) -> list[float] | None:
        """k steps of every seed (all active), each as ``run`` takes a step that records nothing, in one call a
        seed: the last step's losses. None, and nothing changed (the generators put back), where a seed's
        loss exceeded its bound (``bounds``) or a value was not finite."""
        p = self.spec.pretrain
        states = [g.get_state() for g in self.train_gens]

        def one(s):
            X, y = self.tasks[s].sample_inner_steps(
                k, p.batch, self.train_gens[s], antithetic=self.antithetic, dtype=self.draw_dtype
            )
            return self.descent.descend_batches(s, X.to(self.dtype), y.to(self.dtype), bounds[s])

        out = self.workers.map(one, len(self.seeds))
        if any(done < k for _, done, _ in out):
            for g, state in zip(self.train_gens, states):
                g.set_state(state)
            return None
        self.descent.set_coefficients([coef for coef, _, _ in out])
        return [float(losses[-1]) for _, _, losses in out]

    def take_many(self, step: int, events: list[int], status: list[str], bounds: list[float], progress) -> tuple:
        """After ``run``'s step ``step``: the plain steps up to the next of ``events`` (a recording, the end) or
        resume state, in calls of many, where the run is fusable and every seed ok. Returns (steps taken,
        their last losses); (0, None) where none were."""
        if not (events and all(x == "ok" for x in status)):
            return 0, None
        nxt = events[bisect.bisect_right(events, step)]
        if self.resume_path:  # the next resume state by count
            nxt = min(nxt, (step // self.resume_every + 1) * self.resume_every)
        k = min(nxt - step - 1, self.fused_steps())
        last = self.descend_many(k, bounds) if k > 0 else None
        if last is None:
            return 0, None
        if progress:
            progress(step + k, torch.tensor(last))
        return k, last
