"""A step of gradient descent: draw, loss and gradients, the divergence check, descent.

``Steps`` is the descent rule (``rule.py``) of every run that moves by steps: plain gradient descent,
Adam, and population mode's descent on the invariant subspace (the update, ``descent.py``). A step draws
every seed's batch (``batches.py``), computes the loss and gradients by the implementation
``model.dispatch.plan`` chose (a closed form, seed by seed, or autograd on the whole batch), and moves the
seeds still active. Between two events of the trainer it takes the plain steps one at a time, or many
in one call a seed where the run allows it (``many_steps.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..config.specs import ModelSpec
from ..model import dispatch, fastpath
from ..model.cpu import SeedWorkers
from ..model.transformer import embed, forward, logistic_loss
from .batches import Batches
from .descent import GradientDescent
from .divergence import Divergence
from .many_steps import ManySteps


class Steps:
    """Gradient descent by steps from ``params`` (the batched parameters, per seed), moved by ``update``."""

    def __init__(
        self,
        update: GradientDescent,
        params: dict[str, torch.Tensor],
        batches: Batches,
        plan: dispatch.Plan,
        model: ModelSpec,
        positions: torch.Tensor | None,
        scale: float,
        workers: SeedWorkers,
        many: ManySteps | None = None,
    ):
        self.update, self.params, self.batches, self.plan, self.model = update, params, batches, plan, model
        self.positions, self.scale, self.workers, self.many = positions, scale, workers, many
        self.antithetic = batches.antithetic
        # the evaluated step's loss and gradients, not yet descended
        self.loss: torch.Tensor | None = None
        self.pending: dict[str, torch.Tensor] | None = None
        self._mirror_checked = False

    @property
    def eta(self) -> float:
        return self.update.eta

    @property
    def coef(self) -> torch.Tensor | None:
        """Population mode's coefficients (S, N_COEF), float64; None for every other run."""
        return self.update.coef

    def parameters(self) -> dict[str, torch.Tensor]:
        """W and v (and every other parameter) of every seed at the current point."""
        self.params = self.update.current(self.params)
        return self.params

    # -- the rule: the trainer's events ------------------------------------------------
    def evaluate(self, step: int, guard: Divergence) -> torch.Tensor:
        """Step ``step``'s loss (S,) on its fresh batch, checked by ``guard``; its gradients wait for ``advance``."""
        self.loss, self.pending = self.step_grads(self.draw())
        finite = torch.stack([torch.isfinite(g).flatten(1).all(1) for g in self.pending.values()]).all(0).tolist()
        guard.check(step, self.loss, finite)
        return self.loss

    def advance(self, step: int, to: int, guard: Divergence, pause: Callable[[int], bool], progress=None) -> int:
        """From the evaluated step ``step`` to step ``to``: its descent, then the plain steps in between. Returns
        the first step not evaluated: ``to``, or an earlier one where ``pause`` asks for it (a resume state by
        wall time) or where a seed diverged and ``guard.stopped``."""
        self.descend(self.pending, guard.active)
        if progress:  # the callback throttles its own output
            progress(step, self.loss)
        step += 1
        while step < to and not pause(step):
            if self.many is not None and guard.all_ok:
                k = min(to - step, self.many.most)
                last = self.many.take(k, guard.bounds)
                if last is not None:  # steps step ... step + k - 1, every loss within its bound
                    guard.passed(last)
                    step += k
                    if progress:
                        progress(step - 1, torch.tensor(last))
                    continue
            self.evaluate(step, guard)
            if guard.stopped:
                return step
            self.descend(self.pending, guard.active)
            if progress:
                progress(step, self.loss)
            step += 1
        return step

    def state(self) -> tuple[dict, dict]:
        """(tensors, metadata) a resume state keeps: the parameters, the generators, the update's own state."""
        tensors = {f"param.{k}": t for k, t in self.parameters().items()}
        tensors |= {f"gen.{i}": state for i, state in enumerate(self.batches.states())}
        extra, meta = self.update.state()
        return tensors | extra, meta

    def load(self, tensors: dict, meta: dict, device) -> None:
        params = self.parameters()
        for k in params:
            params[k] = tensors[f"param.{k}"].to(device, self.batches.dtype)
        self.batches.restore([tensors[f"gen.{i}"] for i in range(len(self.batches.generators))])
        self.update.load(tensors, meta, device)

    # -- one step ------------------------------------------------------------------------
    def step(self, active: torch.Tensor | None = None) -> torch.Tensor:
        """One training step without recording (draw, gradients, descent); returns the loss (S,)."""
        loss, grads = self.step_grads(self.draw())
        self.descend(grads, torch.ones(len(self.batches.tasks), dtype=torch.bool) if active is None else active)
        return loss

    def draw(self):
        """This step's samples (``Batches.draw``)."""
        return self.batches.draw()

    def step_grads(self, drawn):
        """Loss and gradients from what :meth:`draw` returned (as ``loss_and_grads`` on ``Batches.batch()``)."""
        if not self.batches.inner:
            return self.loss_and_grads(*drawn)
        return self._closed_form_grads(lambda s: drawn[s])

    def descend(self, grads: dict[str, torch.Tensor], active: torch.Tensor) -> None:
        """One step for the seeds still ``active`` (S,) bool; the others stay frozen."""
        self.params = self.update.step(self.params, grads, active)

    def loss_and_grads(self, X: torch.Tensor, y: torch.Tensor):
        """Mean training loss per seed (S,) and the gradient of every parameter, from samples X, y."""
        if self.plan.closed_form:
            return self._loss_and_grads_fast(X, y)
        params = {k: t.detach().requires_grad_(True) for k, t in self.parameters().items()}
        f, _ = forward(params, embed(X, self.model), self.model)
        loss = logistic_loss(f, y)
        grads = torch.autograd.grad(loss.sum(), list(params.values()))  # seeds are independent
        return loss.detach(), dict(zip(params.keys(), grads))

    def _loss_and_grads_fast(self, X: torch.Tensor, y: torch.Tensor):
        """The paper model's exact gradients, seed by seed (``model/fastpath.py``).

        Antithetic batches are [X, -X] with labels [y, -y]; the kernel takes the first half and
        folds the mirror into its algebra, so check once that the task really sampled that way.
        """
        half = X.shape[1] // 2 if self.antithetic else X.shape[1]
        if self.antithetic and not self._mirror_checked:
            if not (torch.equal(X[:, half:], -X[:, :half]) and torch.equal(y[:, half:], -y[:, :half])):
                raise ValueError(
                    "pretrain.sampling: antithetic, but the task's batches are not [X, -X] "
                    "with labels [y, -y]; use sampling: iid for this task"
                )
            self._mirror_checked = True
        return self._closed_form_grads(lambda s: (fastpath.batch_inner(X[s, :half]), y[s, :half]))

    def _closed_form_grads(self, inputs):
        """Loss and gradients of every seed by the plan's closed form; ``inputs(s)``: seed s's X (d, D, H), y (H,).
        The gradients are what the update needs of them (population mode: the subspace's coefficients')."""
        n = len(self.batches.tasks)
        if self.plan.from_coefficients:  # no W: the coefficients in, their gradient out
            out = self.workers.map(lambda s: self.update.loss_and_gradient(s, *inputs(s)), n)
            return torch.stack([loss for loss, _ in out]), self.update.stack([g for _, g in out])
        W, v = self.params["layer0.W"], self.params["v"]

        def one(s):
            X, y = inputs(s)
            loss, gW, gv = dispatch.loss_and_grads(
                self.plan, W[s], v[s], X, y, self.positions, self.scale, self.antithetic
            )
            return loss, self.update.gradient(s, gW, gv)

        losses, grads = zip(*self.workers.map(one, n))
        return torch.stack(losses), self.update.stack(list(grads))
