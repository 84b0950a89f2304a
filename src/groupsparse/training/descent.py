"""How one step moves the parameters: plain gradient descent (the paper's), Adam, or population mode's
gradient descent on the invariant subspace's coefficients (``model.population``).

Each update holds its own state, which the trainer's resume states carry (``state`` / ``load``), and
acts only on the seeds still active: a diverged seed stays frozen. Every update is elementwise per
seed, so a seed gets the same numbers alone or among others. ``steps.Steps`` takes the steps; which
update a run uses is ``rule.make``'s choice.
"""

from __future__ import annotations

import torch

from ..model import population

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch's defaults (the schema's description of optimizer: adam)


class GradientDescent:
    """params <- params - eta * direction, direction the gradient (``Adam``: its own)."""

    coef = None  # the subspace coefficients: population mode only

    def __init__(self, eta: float):
        self.eta = eta

    def gradient(self, seed: int, gW: torch.Tensor, gv: torch.Tensor) -> tuple:
        """What the descent needs of one seed's kernel gradient (here all of it)."""
        return gW, gv

    def stack(self, per_seed: list[tuple]) -> dict[str, torch.Tensor]:
        gW, gv = (torch.stack(t) for t in zip(*per_seed))
        return {"layer0.W": gW, "v": gv}

    def directions(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return grads

    def current(self, params: dict) -> dict:
        """The parameters at the current point (here ``params`` themselves)."""
        return params

    def step(self, params: dict, grads: dict, active: torch.Tensor) -> dict:
        """The parameters after one step of the ``active`` (S,) seeds; the others keep theirs."""
        eta = self.eta
        grads = self.directions(grads)
        if bool(active.all()):  # the usual case: the same numbers as below, without the where
            return {k: params[k] - eta * g for k, g in grads.items()} | {
                k: t for k, t in params.items() if k not in grads
            }
        keep = active.to(next(iter(params.values())).device)
        out = dict(params)
        for k, g in grads.items():
            # where, not a 0/1 multiply: eta * inf * 0 is NaN, which would unfreeze a diverged seed
            mask = keep.view(-1, *([1] * (g.dim() - 1)))
            out[k] = torch.where(mask, params[k] - eta * g, params[k])
        return out

    def state(self) -> tuple[dict, dict]:
        """(tensors, metadata) a resume state keeps of this descent."""
        return {}, {}

    def load(self, tensors: dict, meta: dict, device) -> None:
        pass


class Adam(GradientDescent):
    """Adam (Kingma and Ba) with step size eta: directions m_hat / (sqrt(v_hat) + eps), per parameter entry.
    Its moments advance for every seed; a diverged seed's parameters stay frozen all the same."""

    def __init__(self, eta: float):
        super().__init__(eta)
        self.t, self.moments = 0, {}

    def directions(self, grads):
        b1, b2 = ADAM_BETAS
        if not self.moments:
            self.moments = {f"{w}.{k}": torch.zeros_like(g) for k, g in grads.items() for w in "mv"}
        self.t += 1
        out = {}
        for k, g in grads.items():
            m = self.moments[f"m.{k}"].mul_(b1).add_(g, alpha=1 - b1)
            v = self.moments[f"v.{k}"].mul_(b2).addcmul_(g, g, value=1 - b2)
            out[k] = (m / (1 - b1**self.t)) / ((v / (1 - b2**self.t)).sqrt() + ADAM_EPS)
        return out

    def state(self):
        return {f"adam.{k}": t for k, t in self.moments.items()}, {"adam_steps": self.t}

    def load(self, tensors, meta, device):
        self.t = int(meta.get("adam_steps", 0))
        self.moments = {k[5:]: t.to(device) for k, t in tensors.items() if k.startswith("adam.")}


class SubspaceDescent(GradientDescent):
    """Population mode: gradient descent on the coefficients (S, N_COEF) of the invariant subspace, kept in
    float64 so millions of small steps lose nothing to rounding; W and v are built from them, so the run
    stays on the subspace exactly. The kernel's gradient is projected (its noise off the subspace
    removed), which uses each seed's j* and v*.

    With ``steps`` (``dispatch.coefficient_steps``: per seed, the coefficients to their gradient, no W) a
    step needs no W, so W and v are built only where asked for (``current``: a recording, a resume state,
    the result); otherwise after each step, for the kernel's next gradient."""

    def __init__(self, eta: float, tasks, positions: torch.Tensor, dtype, device, steps: list | None = None):
        super().__init__(eta)
        self.tasks, self.positions, self.dtype, self.steps = tasks, positions, dtype, steps
        self.coef = torch.zeros(len(tasks), population.N_COEF, dtype=torch.float64, device=device)
        self.stale: set[int] = set()  # seeds whose W and v are behind their coefficients

    def gradient(self, seed, gW, gv):
        task = self.tasks[seed]
        return population.project(gW, gv, task.v_star, task.j_star, self.positions)

    def loss_and_gradient(self, seed: int, X: torch.Tensor, y: torch.Tensor) -> tuple:
        """With ``steps``: the loss and the coefficients' gradient of ``seed`` on its batch X, y."""
        return self.steps[seed](self.coef[seed], X, y)

    def descend_batches(self, seed: int, X: torch.Tensor, y: torch.Tensor, bound: float) -> tuple:
        """With ``steps``: gradient descent of ``seed`` over k batches X (k, d, D, H), y (k, H) in one call
        (``population_loops.LoopsStep.descend``): its coefficients after them, the steps taken (fewer than k
        where a loss exceeded ``bound`` or a value was not finite) and their losses. Changes nothing here."""
        return self.steps[seed].descend(self.coef[seed], X, y, self.eta, bound)

    def set_coefficients(self, per_seed: list[torch.Tensor]) -> None:
        """Every seed's coefficients after ``descend_batches``; W and v are built when next read."""
        self.coef = torch.stack(per_seed).to(self.coef.device, torch.float64)
        self.stale.update(range(len(self.tasks)))

    def current(self, params: dict) -> dict:
        """``params`` with W and v of every seed whose steps left them behind built from its coefficients."""
        if not self.stale:
            return params
        params = self.build(params, sorted(self.stale))
        self.stale.clear()
        return params

    def stack(self, per_seed):
        return {"population": torch.stack(per_seed)}

    def build(self, params: dict, seeds) -> dict:
        """``params`` with the W and v of ``seeds`` built from their coefficients."""
        W, v = params["layer0.W"].clone(), params["v"].clone()
        for s in seeds:
            task = self.tasks[s]
            W[s], v[s] = population.build(self.coef[s], task.v_star, task.j_star, self.positions, self.dtype)
        return {"layer0.W": W, "v": v}

    def step(self, params, grads, active):
        moved = active.nonzero().flatten().tolist()
        if len(moved) == len(self.tasks):  # the usual case: the same numbers as below, without the where
            self.coef = self.coef - self.eta * grads["population"]
        else:
            keep = active.to(self.coef.device)
            self.coef = torch.where(keep[:, None], self.coef - self.eta * grads["population"], self.coef)
        if self.steps is not None:
            self.stale.update(moved)
            return params
        return self.build(params, moved)

    def state(self):
        return {"population": self.coef}, {}

    def load(self, tensors, meta, device):
        self.coef = tensors["population"].to(device, torch.float64)


def subspace_parameters(coefs, tasks, positions: torch.Tensor, dtype) -> dict[str, torch.Tensor]:
    """W (S, m, m) and v (S, m) of each seed's subspace coefficients (N_COEF,) in its task's frame."""
    built = [population.build(torch.as_tensor(c), t.v_star, t.j_star, positions, dtype) for c, t in zip(coefs, tasks)]
    return {"layer0.W": torch.stack([W for W, _ in built]), "v": torch.stack([v for _, v in built])}
