"""The parameter space around population GD's invariant subspace, split by the data law's symmetries, and
the loss Hessian on it (docs/STUDY.md section 3.6).

In the frame R = blockdiag(U, P) (U orthonormal with first column v*, P the positions) the parameters
read W~ = R^T W R, v~ = R^T v: W~ff = U^T Wff U, the position block W~pp = P Wpp P = C [key i, query j],
the cross blocks U^T Wfp P and P Wpf U. R is orthogonal, so a spectrum is the same in either frame. The
symmetries (X -> -X; rotations fixing v*; permutations fixing j*) split the space into sectors that
the population Hessian at any point of the subspace maps into themselves (it commutes with the
symmetries there), so a transverse perturbation's linearised dynamics is one sector at a time:

    subspace    the eight coefficients' directions (``population.COEFFICIENTS``) less the two that are gauge
    gauge       directions that change no output: a constant added to a query's column of scores,
                C += 1 c^T (two of them lie in the eight coefficients' span) and W~pf = 1 w^T
    pos_perm    C's permutation-breaking part (off its five orbit means), gauge removed
    wff_aniso   W~ff's part across v* that is not a multiple of the identity
    v1_across   v1 across v* with W~ff's mixed entries [v*, across] and [across, v*] (rotations fixing
                v* act on all three as on a vector, so they couple)
    odd_along   odd under X -> -X, along v*: v2, the cross blocks' v* row / column (gauge removed)
    odd_across  odd under X -> -X, across v*: the cross blocks' other rows / columns (gauge removed)

Each sector is an orthogonal projector; together they sum to the identity (tests/unit/test_transverse.py).
"""

from __future__ import annotations

import torch

from ..config.specs import ModelSpec
from . import population
from .transformer import embed, forward, logistic_loss, sine_positions

SECTORS = ("subspace", "gauge", "pos_perm", "wff_aniso", "v1_across", "odd_along", "odd_across")
TRANSVERSE = SECTORS[2:]  # the sectors whose growth is measured (the gauge's Hessian is exactly 0)


def frame(v_star: torch.Tensor, D: int) -> torch.Tensor:
    """R = blockdiag(U, P), float64: U's first column is v*, the others an orthonormal basis across it."""
    d = v_star.shape[0]
    vs = v_star.to(torch.float64) / v_star.to(torch.float64).norm()
    w = -vs.clone()
    w[0] += 1.0  # the Householder reflection along e_1 - v* maps e_1 to v*
    U = torch.eye(d, dtype=torch.float64)
    if float(w.norm()) > 1e-12:
        U -= 2.0 * torch.outer(w, w) / (w @ w)
    R = torch.zeros(d + D, d + D, dtype=torch.float64)
    R[:d, :d], R[d:, d:] = U, sine_positions(D)
    return R


def unflatten(theta: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W (m, m), v (m,)) of a flat parameter vector [W.flatten(), v]."""
    return theta[: m * m].reshape(m, m), theta[m * m :]


def flatten(W: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat([W.reshape(-1), v])


def _orbit_part(C: torch.Tensor, j_star: int) -> torch.Tensor:
    """C's orthogonal projection onto the span of the five orbit indicators (their means)."""
    masks = population.orbit_masks(C.shape[0], j_star)
    means = (masks * C).sum((1, 2)) / masks.sum((1, 2))
    return (means[:, None, None] * masks).sum(0)


def _column_constant(M: torch.Tensor) -> torch.Tensor:
    """M's projection onto {1 c^T}: its column means, repeated down each column."""
    return M.mean(0, keepdim=True).expand_as(M)


def project_frame(sector: str, Wt: torch.Tensor, vt: torch.Tensor, d: int, j_star: int) -> tuple:
    """The projection onto ``sector`` of (W~, v~) in the frame's coordinates."""
    if sector not in SECTORS:
        raise ValueError(f"unknown sector {sector!r}; sectors: {', '.join(SECTORS)}")
    oW, ov = torch.zeros_like(Wt), torch.zeros_like(vt)
    ff, C = Wt[:d, :d], Wt[d:, d:]
    across_mean = torch.diagonal(ff)[1:].mean()
    eye = torch.eye(d - 1, dtype=Wt.dtype)
    # C's orbit span and the gauge {1 c^T} commute as projectors (the gauge maps the orbit span into itself)
    C_orbit = _orbit_part(C, j_star)
    C_gauge = _column_constant(C)
    if sector == "subspace":
        oW[0, 0], ov[0] = ff[0, 0], vt[0]
        oW[1:d, 1:d] = across_mean * eye
        oW[d:, d:] = C_orbit - _column_constant(C_orbit)
    elif sector == "gauge":
        oW[d:, d:] = C_gauge
        oW[d:, :d] = _column_constant(Wt[d:, :d])
    elif sector == "pos_perm":
        oW[d:, d:] = C - C_orbit - (C_gauge - _column_constant(C_orbit))
    elif sector == "wff_aniso":
        oW[1:d, 1:d] = ff[1:, 1:] - across_mean * eye
    elif sector == "v1_across":
        oW[0, 1:d], oW[1:d, 0], ov[1:d] = ff[0, 1:], ff[1:, 0], vt[1:d]
    elif sector == "odd_along":
        oW[0, d:], ov[d:] = Wt[0, d:], vt[d:]
        oW[d:, 0] = Wt[d:, 0] - Wt[d:, 0].mean()
    else:  # odd_across
        oW[1:d, d:] = Wt[1:d, d:]
        oW[d:, 1:d] = Wt[d:, 1:d] - _column_constant(Wt[d:, 1:d])
    return oW, ov


class Sectors:
    """The sector projectors of one task (v*, j*) on flat parameter vectors [W.flatten(), v], float64."""

    def __init__(self, v_star: torch.Tensor, j_star: int, D: int):
        population.check_shape(v_star.shape[0], D)
        self.d, self.D, self.j_star = v_star.shape[0], D, j_star
        self.m = self.d + D
        self.R = frame(v_star, D)

    def project(self, sector: str, theta: torch.Tensor) -> torch.Tensor:
        W, v = unflatten(theta, self.m)
        R = self.R
        oW, ov = project_frame(sector, R.T @ W @ R, R.T @ v, self.d, self.j_star)
        return flatten(R @ oW @ R.T, R @ ov)

    def dimension(self, sector: str) -> int:
        """The sector's dimension (the trace of its projector, counted by construction)."""
        d, D = self.d, self.D
        return {
            "subspace": population.N_COEF - 2,
            "gauge": D + d,
            "pos_perm": D * D - 5 - (D - 2),
            "wff_aniso": (d - 1) ** 2 - 1,
            "v1_across": 3 * (d - 1),
            "odd_along": 3 * D - 1,
            "odd_across": 2 * (d - 1) * D - (d - 1),
        }[sector]

    def random(self, sector: str, gen: torch.Generator) -> torch.Tensor:
        """A unit vector of the sector, Gaussian before projection (so uniform on its sphere)."""
        x = self.project(sector, torch.randn(self.m * self.m + self.m, generator=gen, dtype=torch.float64))
        return x / x.norm()


class SampleLoss:
    """The paper model's logistic loss on one fixed antithetic sample, float64, as a function of the flat
    parameters [W.flatten(), v]: X (d, D, H) in the draw's layout (the batch is [X, -X] with labels
    [y, -y]), P the positions. The gradient is the closed form every run uses (``fastpath``); a
    Hessian-vector product is its central difference (error about eps^2, 1e-9 relative here), and
    :meth:`hvp_autograd` the exact one through ``transformer.forward``, for checking it."""

    eps = 1e-5  # central difference step along a unit vector: truncation ~eps^2, rounding ~1e-16 / eps

    def __init__(self, X: torch.Tensor, y: torch.Tensor):
        self.X, self.y = X.to(torch.float64).contiguous(), y.to(torch.float64)
        self.d, self.D = X.shape[0], X.shape[1]
        self.m = self.d + self.D
        self.P = sine_positions(self.D)

    def chunks(self, k: int) -> list[SampleLoss]:
        """The sample split into ``k`` equal parts (their mean loss is this loss)."""
        if self.X.shape[2] % k:
            raise ValueError(f"{self.X.shape[2]} sample pairs do not split into {k} equal chunks")
        return [SampleLoss(X, y) for X, y in zip(self.X.chunk(k, dim=2), self.y.chunk(k))]

    def loss_and_gradient(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        from .fastpath import seed_loss_and_grads

        W, v = unflatten(theta, self.m)
        loss, gW, gv = seed_loss_and_grads(W, v, self.X, self.y, self.P, 1.0, True)
        return float(loss), flatten(gW, gv)

    def gradient(self, theta: torch.Tensor) -> torch.Tensor:
        return self.loss_and_gradient(theta)[1]

    def hvp(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """H(theta) x by the central difference of the closed-form gradient."""
        scale = float(x.norm())
        if scale == 0:
            return torch.zeros_like(x)
        h = self.eps / scale
        return (self.gradient(theta + h * x) - self.gradient(theta - h * x)) / (2 * h)

    def quadratic(self, theta: torch.Tensor, x: torch.Tensor) -> float:
        """x^T H(theta) x."""
        return float(x @ self.hvp(theta, x))

    def autograd_loss(self, theta: torch.Tensor) -> torch.Tensor:
        spec = ModelSpec()
        Xs = self.X.permute(2, 1, 0)
        Z = embed(torch.cat([Xs, -Xs]), spec)[None]
        W, v = unflatten(theta, self.m)
        f, _ = forward({"layer0.W": W[None], "v": v[None]}, Z, spec)
        return logistic_loss(f, torch.cat([self.y, -self.y])[None])[0]

    def hvp_autograd(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """H(theta) x, exact (double backward through the autograd model)."""
        theta = theta.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(self.autograd_loss(theta), theta, create_graph=True)
        return torch.autograd.grad(g @ x, theta)[0]


def lanczos(op, start: torch.Tensor, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ritz values (ascending) and unit Ritz vectors (columns) of the symmetric ``op`` on the Krylov space of
    ``start``, ``iters`` steps with full reorthogonalisation (the spaces here have at most a few thousand
    dimensions, so keeping the basis is cheap and keeps the extremes free of ghost copies)."""
    q = start / start.norm()
    basis, alphas, betas = [q], [], []
    for k in range(iters):
        w = op(basis[-1])
        alphas.append(float(w @ basis[-1]))
        Qk = torch.stack(basis, 1)
        w = w - Qk @ (Qk.T @ w)
        w = w - Qk @ (Qk.T @ w)  # twice is enough (Kahan's "twice is enough")
        beta = float(w.norm())
        if k == iters - 1 or beta < 1e-10 * max(1.0, abs(alphas[-1])):  # the Krylov space is invariant
            break
        betas.append(beta)
        basis.append(w / beta)
    n = len(alphas)
    T = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if n > 1:
        off = torch.tensor(betas[: n - 1], dtype=torch.float64)
        T += torch.diag(off, 1) + torch.diag(off, -1)
    values, vectors = torch.linalg.eigh(T)
    return values, torch.stack(basis[:n], 1) @ vectors
