"""The training samples of every seed: a fresh batch each step, from a generator per seed.

Each seed's generator is seeded by its identity ("train"), so a seed draws the same batches alone or
among others. Synthetic tasks draw on the run's device from a generator of that device (CUDA: Philox),
image tasks index images with CPU draws. On the closed-form path the samples come straight in the
kernel's layout (``sample_inner``: X (d, D, H), no (S, B, D, d) batch in between); population mode on
the loops draws many steps' batches in one call (``sample_inner_steps``).
"""

from __future__ import annotations

import torch

from ..model.cpu import SeedWorkers


class Batches:
    """Draws every seed's batch of a step (``draw``), or of many steps (``draw_steps``)."""

    def __init__(
        self,
        tasks: list,
        generators: list[torch.Generator],
        batch: int,
        antithetic: bool,
        dtype: torch.dtype,
        draw_dtype: torch.dtype,
        device: torch.device,
        inner: bool,
        workers: SeedWorkers,
    ):
        """``inner``: draw in the closed-form kernel's layout; ``draw_dtype``: the precision the normals are
        drawn in (tests, benchmarks: float32 samples fed to float64 arithmetic)."""
        self.tasks, self.generators, self.batch_size, self.antithetic = tasks, generators, batch, antithetic
        self.dtype, self.draw_dtype, self.device, self.inner, self.workers = dtype, draw_dtype, device, inner, workers
        self.draw_kw = {} if draw_dtype == dtype else {"draw_dtype": draw_dtype}
        self.draws_many = inner and all(hasattr(t, "sample_inner_steps") for t in tasks)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's fresh samples of every seed as plain tensors: X (S, B, D, d) and labels y (S, B).
        The same samples as :meth:`draw` (a task's ``sample`` is laid out from its ``sample_inner``)."""

        def one(s):
            gen = self.generators[s]
            kw = {"antithetic": self.antithetic, "dtype": self.dtype, "device": self.device, **self.draw_kw}
            return self.tasks[s].sample(self.batch_size, gen, **kw)

        Xs, ys = zip(*self.workers.map(one, len(self.tasks)))
        return torch.stack(Xs), torch.stack(ys)

    def draw(self):
        """This step's samples: per seed (X (d, D, H), y (H,)) in the kernel's layout (H = B/2 with antithetic
        batches: the mirror half is implicit), or ``batch()`` off the closed-form path."""
        if not self.inner:
            return self.batch()

        def one(s):
            gen = self.generators[s]
            X, y = self.tasks[s].sample_inner(self.batch_size, gen, antithetic=self.antithetic, dtype=self.draw_dtype)
            return X.to(self.device, self.dtype), y.to(self.device, self.dtype)

        return self.workers.map(one, len(self.tasks))

    def draw_steps(self, seed: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Seed ``seed``'s samples of the next k steps: X (k, d, D, H), y (k, H), those of k ``draw`` calls."""
        gen = self.generators[seed]
        X, y = self.tasks[seed].sample_inner_steps(
            k, self.batch_size, gen, antithetic=self.antithetic, dtype=self.draw_dtype
        )
        return X.to(self.dtype), y.to(self.dtype)

    def states(self) -> list[torch.Tensor]:
        return [g.get_state() for g in self.generators]

    def restore(self, states: list[torch.Tensor]) -> None:
        for g, state in zip(self.generators, states):
            g.set_state(state)
