"""Population gradient flow's vector field on the invariant subspace (docs/STUDY.md section 3).

On the subspace (``population.py``) population gradient descent is the Euler discretisation, step eta,
of the flow dc/dtau = -M^-1 grad L(c) of the eight coefficients c = (alpha, beta, gamma, ss, sq, qs,
dd, oo), M the orbit sizes (``orbit_sizes``): c_k -= eta <G, E_k> / |E_k|^2 is one Euler step. L is an
expectation over X, the same for every j* and v*, so it is computed in the frame j* = 0, v* = e_1:
a sample is w_i = x_i . v* (D numbers) and the features across v* (d - 1 x D); the scores are
A_ij = scale (C_ij + beta Kp_ij + alpha w_i w_j) [key i, query j], Kp = X_perp^T X_perp, C the five
orbit values, the output f = gamma sum_j sum_i S_ij w_i, the label sign(w_j*).

**The integral over t = w_j*, done by quadrature.** Once attention has formed, the logistic weight
sigmoid(-y f) is far from 0 only where the margin y f is of order 1, a sliver of width ~1 / (gamma D)
in t = |w_j*|: at D = 16, flow time 2 D^3, every part of the gradient came from the 8% of samples with
|t| < 0.1. A plain Monte Carlo sample of N inputs puts ~N / (gamma D) points there; a flow over a
fixed plain sample then drifts to fit those few points (the bias of a sample-average approximation),
the more so the larger D. Here each outer sample (everything but t) is integrated over t exactly
enough: the scores of keys and queries other than j* do not depend on t, so their sums over the
D x D block are formed once (O(d D^2)), and each value of t costs O(D): the margin's root t0 is found
(bisection and Newton), and Gauss-Legendre nodes in x with t = t0 + s sinh(x), s = 1 / f'(t0), put
fine nodes where the logistic weight changes. The mirror X -> -X leaves the loss unchanged on the
subspace, so t runs over [0, T_MAX] with density 2 phi(t) and label +1. The outer samples are then
a plain Monte Carlo sample whose every point contributes: the flow over them is a deterministic,
smooth ODE (a sample-average approximation, replicated by drawing other outer samples), its sample
size N checked by doubling (``training/flow.py``).

Two implementations of the same sums: ``flow_loops.py`` (numba, float64 on a CPU, per sample) and
``_TorchField`` here (batched torch, any device: the GPU's). ``tests/unit/test_flow.py`` checks them
against each other, against the projected full gradient of the paper model, and against a brute-force
integral over t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .population import COEFFICIENTS, N_COEF

T_MAX = 8.5  # t = |x_j* . v*| beyond this carries probability 2 (1 - Phi(8.5)) < 1e-16
S_MAX = 1.0  # the adapted nodes' scale s = 1 / f'(t0) at most this: early, when f is flat, t's own scale
EVAL_NODES = 48  # fixed Gauss-Legendre nodes on [0, T_MAX] for the attention (smooth in t)
ROWS = 9  # a sample's row: the gradient (8) and the loss


def orbit_sizes(d: int, D: int) -> np.ndarray:
    """|E_k|^2 of the subspace's basis (COEFFICIENTS' order): population GD divides the gradient by them."""
    return np.array([1.0, d - 1, 1.0, 1.0, D - 1, D - 1, D - 1, (D - 1) * (D - 2)])


@dataclass(frozen=True)
class Sample:
    """N outer samples in the frame j* = 0, v* = e_1: ``w`` (N, D) the groups' coordinate along v*
    (column 0, j*'s, is the integration variable t: stored as 0), ``across`` (N, d - 1, D) the features
    across v*; float64, contiguous."""

    w: torch.Tensor
    across: torch.Tensor

    @property
    def size(self) -> int:
        return self.w.shape[0]

    def part(self, start: int, stop: int) -> Sample:
        return Sample(self.w[start:stop], self.across[start:stop])


SAMPLERS = ("sobol", "mc")


def draw(d: int, D: int, N: int, generator: torch.Generator, sampler: str = "sobol") -> Sample:
    """N outer samples of the N(0, I) inputs other than x_j* . v*, from ``generator`` (CPU).

    ``sobol``: a scrambled Sobol' sequence (scipy.stats.qmc, its scrambling seeded from ``generator``)
    mapped through the normal quantile, one dimension per coordinate ((D - 1) + (d - 1) D of them): at
    D = 16 and 64 it cut the spread of the vector field's position coefficients over samples 3-6 times
    against plain draws of the same size (docs/STUDY.md section 3); N a power of 2 keeps its balance.
    ``mc``: plain draws. Either way the first N samples of a larger draw are these (the doubling
    check is nested)."""
    if d < 2 or D < 3:
        raise ValueError(f"the flow needs d >= 2 and D >= 3 (every orbit non-empty), got d = {d}, D = {D}")
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}: {', '.join(SAMPLERS)}")
    w = torch.zeros(N, D, dtype=torch.float64)
    across = torch.empty(N, d - 1, D, dtype=torch.float64)
    if sampler == "sobol":
        from scipy.stats import norm, qmc

        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        engine = qmc.Sobol((D - 1) + (d - 1) * D, scramble=True, seed=np.random.default_rng(seed))
        for s in range(0, N, DRAW_CHUNK):  # the sequence continues from chunk to chunk
            n = min(DRAW_CHUNK, N - s)
            u = np.clip(engine.random(n), 2.0**-60, 1 - 2.0**-53)
            z = torch.from_numpy(norm.ppf(u))
            w[s : s + n, 1:] = z[:, : D - 1]
            across[s : s + n] = z[:, D - 1 :].reshape(n, d - 1, D)
        return Sample(w, across)
    for s in range(0, N, DRAW_CHUNK):
        n = min(DRAW_CHUNK, N - s)
        X = torch.randn(n, d, D, generator=generator, dtype=torch.float64)
        w[s : s + n] = X[:, 0]
        across[s : s + n] = X[:, 1:]
    w[:, 0] = 0.0
    return Sample(w, across)


DRAW_CHUNK = 256  # samples a draw call: a larger N's draws begin with a smaller N's


def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


def attention_nodes(n: int = EVAL_NODES) -> tuple[np.ndarray, np.ndarray]:
    """Fixed nodes on [0, T_MAX] and their weights with the density 2 phi(t) folded in."""
    x, w = gauss_legendre(n)
    t = (x + 1) * T_MAX / 2
    return t, w * T_MAX / 2 * 2 * np.exp(-t * t / 2) / math.sqrt(2 * math.pi)


class Field:
    """The flow's vector field over one outer sample: ``gradient(c)`` is the sample mean of the integral
    over t of the loss's gradient at coefficients c (8,), ``velocity(c)`` = -M^-1 gradient.

    ``nodes``: Gauss-Legendre nodes of the adapted rule over t; ``implementation``: "loops" (numba, CPU)
    or "torch" (any device; the sample's). ``chunk``: samples a torch call (memory ~ 8 chunk D^2 bytes a
    temporary)."""

    def __init__(self, sample: Sample, d: int, scale: float = 1.0, nodes: int = 32, implementation: str = "loops"):
        if implementation not in ("loops", "torch"):
            raise ValueError(f"unknown flow implementation {implementation!r}: loops or torch")
        if implementation == "loops" and sample.w.device.type != "cpu":
            raise ValueError("the flow's loops run on a CPU; use implementation 'torch' on a GPU")
        self.sample, self.d, self.scale, self.implementation = sample, d, float(scale), implementation
        self.D = sample.w.shape[1]
        self.sizes = orbit_sizes(d, self.D)
        self.xq, self.wq = gauss_legendre(nodes)
        self.evaluations = 0

    def rows(self, coef) -> np.ndarray:
        """(N, ROWS) per outer sample: the gradient (8) integrated over t, and the loss."""
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        if self.implementation == "loops":
            from . import flow_loops

            out = np.empty((self.sample.size, ROWS))
            flow_loops.gradient_rows(
                self.sample.w.numpy(), self.sample.across.numpy(), coef, self.scale, self.xq, self.wq,
                T_MAX, S_MAX, out,
            )  # fmt: skip
            return out
        return _TorchField(self.sample, coef, self.scale).gradient_rows(self.xq, self.wq)

    def gradient(self, coef) -> tuple[float, np.ndarray]:
        """Mean loss and its gradient (N_COEF,) at ``coef``; the rows are summed in order (the same bits
        for any thread count)."""
        self.evaluations += 1
        total = self.rows(coef).sum(0)
        return float(total[8]) / self.sample.size, total[:N_COEF] / self.sample.size

    def velocity(self, coef) -> np.ndarray:
        """dc/dtau = -M^-1 grad L(c): population GD's step direction per unit of flow time."""
        return -self.gradient(coef)[1] / self.sizes


def evaluate(coef, sample: Sample, scale: float = 1.0, nodes: int = 32, implementation: str = "loops") -> dict:
    """What a record holds at ``coef``, on an evaluation sample: r_own = E[1 - S[j*, j*]], r_other =
    E[1 - S[j*, j]] for a query j != j* (the same for all of them on the subspace), min_attention =
    1 - max of the two (the minimum over queries of the expected attention on j*), mean_attention,
    self_attention = E[S[j, j]] for a query j != j*, loss, accuracy."""
    coef = np.ascontiguousarray(coef, dtype=np.float64)
    tq, tw = attention_nodes()
    xq, wq = gauss_legendre(nodes)
    if implementation == "loops":
        from . import flow_loops

        rows = np.empty((sample.size, 5))
        flow_loops.evaluation_rows(
            sample.w.numpy(), sample.across.numpy(), coef, float(scale), tq, tw, xq, wq, T_MAX, S_MAX, rows
        )
    else:
        rows = _TorchField(sample, coef, float(scale)).evaluation_rows(tq, tw, xq, wq)
    own, other, loss, accuracy, self_attention = rows.sum(0) / sample.size
    if coef[2] == 0:  # f = 0 for every input (the zero start): each prediction a tie, counted 1/2
        accuracy = 0.5
    D = sample.w.shape[1]
    return {
        "r_own": float(own),
        "r_other": float(other),
        "self_attention": float(self_attention),
        "min_attention": 1.0 - max(float(own), float(other)),
        "mean_attention": 1.0 - (float(own) + (D - 1) * float(other)) / D,
        "loss": float(loss),
        "accuracy": float(accuracy),
    }


def point_row(coef, w, across, t: float, scale: float = 1.0, implementation: str = "loops") -> np.ndarray:
    """One input's loss gradient (8,) and loss at x_j* . v* = t, label +1 (w (D,), across (d - 1, D)):
    the integrand of ``Field.rows``, for tests against the paper model's gradient."""
    coef = np.ascontiguousarray(coef, dtype=np.float64)
    if implementation == "loops":
        from . import flow_loops

        out = np.empty(ROWS)
        flow_loops.point_row(np.ascontiguousarray(w, dtype=np.float64), np.ascontiguousarray(across, dtype=np.float64),
                             coef, float(scale), float(t), out)  # fmt: skip
        return out
    field = _TorchField(Sample(torch.as_tensor(w)[None], torch.as_tensor(across)[None]), coef, float(scale))
    c = field._columns(field.sample)
    G, loss = field._pieces(c, torch.tensor([[float(t)]], dtype=torch.float64))
    return torch.cat([G[0, 0], loss[0]]).numpy()


class _TorchField:
    """The same sums as ``flow_loops``, batched over a chunk of samples and nodes in torch (any device)."""

    CHUNK = 64

    def __init__(self, sample: Sample, coef: np.ndarray, scale: float):
        self.sample, self.coef, self.scale = sample, [float(c) for c in coef], scale

    def _columns(self, part: Sample):
        alpha, beta, _gamma, ss, sq, qs, dd, oo = self.coef
        sc, w = self.scale, part.w
        Kp = part.across.transpose(1, 2) @ part.across
        wo, K = w[:, 1:], Kp[:, 1:, 1:]
        A = beta * K + alpha * wo[:, :, None] * wo[:, None, :] + oo
        A.diagonal(dim1=1, dim2=2).add_(dd - oo)
        A = sc * A
        top = A.amax(1, keepdim=True)
        E = torch.exp(A - top)
        Z0 = E.sum(1)
        Ew = E * wo[:, :, None]
        return {
            "Kp": Kp,
            "w": wo,
            "mu": Ew.sum(1) / Z0,
            "u": (Ew * wo[:, :, None]).sum(1) / Z0,
            "pK": (Ew * K).sum(1) / Z0,
            "qK": (E * K).sum(1) / Z0,
            "ejj": E.diagonal(dim1=1, dim2=2) / Z0,
            "L": torch.log(Z0) + top[:, 0, :],
            "a": sc * (sq + beta * Kp[:, 0, 1:]),
            "b": sc * (qs + beta * Kp[:, 1:, 0]),
            "b0": sc * (ss + beta * Kp[:, 0, 0]),
        }

    def _margin(self, c, t, slope: bool = False):
        """f at t (n, Q), its slope (or None), query j*'s attention (S0 (n, Q), Si (n, Q, D - 1)) and the
        other queries' rho, m (n, Q, D - 1)."""
        kappa, gamma = self.scale * self.coef[0], self.coef[2]
        w, tt = c["w"][:, None, :], t[:, :, None]
        rho = torch.sigmoid(c["L"][:, None, :] - c["a"][:, None, :] - kappa * tt * w)
        mu = c["mu"][:, None, :]
        m = rho * mu + (1 - rho) * tt
        Ai = c["b"][:, None, :] + kappa * w * tt
        A0 = c["b0"][:, None] + kappa * t * t
        top = torch.maximum(Ai.amax(2), A0)
        Ei, E0 = torch.exp(Ai - top[:, :, None]), torch.exp(A0 - top)
        Z = Ei.sum(2) + E0
        Si, S0 = Ei / Z[:, :, None], E0 / Z
        m0 = (Si * w).sum(2) + S0 * t
        f = gamma * (m.sum(2) + m0)
        fp = None
        if slope:
            dm = (rho * (1 - rho) * (-kappa * w) * (mu - tt) + (1 - rho)).sum(2)
            da = S0 * 2 * kappa * t + (Si * kappa * w).sum(2)
            dm0 = S0 + S0 * 2 * kappa * t * t + (Si * kappa * w * w).sum(2) - da * m0
            fp = gamma * (dm + dm0)
        return f, fp, S0, Si, rho, m, m0

    def _root(self, c, n):
        """``flow_loops._root`` batched: safeguarded Newton from the tangent's crossing at 0."""
        from .flow_loops import ROOT_ITERATIONS

        like = c["w"]
        zero = torch.zeros(n, dtype=like.dtype, device=like.device)
        margin = lambda t: tuple(x[:, 0] for x in self._margin(c, t[:, None], True)[:2])
        f0, s0 = margin(zero)
        fT, sT = margin(zero + T_MAX)
        lo, hi = zero.clone(), zero + T_MAX
        t = torch.where(s0 > 0, -f0 / s0, hi / 2)
        t = torch.where((lo < t) & (t < hi), t, (lo + hi) / 2)
        f, s = margin(t)
        done = (f0 >= 0) | (fT <= 0)
        for _ in range(ROOT_ITERATIONS):
            lo = torch.where(~done & (f < 0), t, lo)
            hi = torch.where(~done & (f >= 0), t, hi)
            nt = torch.where(s > 0, t - f / s, torch.full_like(t, -1.0))
            nt = torch.where((lo < nt) & (nt < hi), nt, (lo + hi) / 2)
            step_done = (nt - t).abs() <= 1e-12 * (1 + t)
            t = torch.where(done, t, nt)
            fn, sn = margin(t)
            f, s = torch.where(done, f, fn), torch.where(done, s, sn)
            done = done | step_done | (f == 0)
            if bool(done.all()):
                break
        t = torch.where(f0 >= 0, zero, torch.where(fT <= 0, zero + T_MAX, t))
        s = torch.where(f0 >= 0, s0, torch.where(fT <= 0, sT, s))
        return t, s

    def _adapted_nodes(self, c, xq, wq):
        n = c["w"].shape[0]
        t0, slope = self._root(c, n)
        s = torch.where(slope > 1 / S_MAX, 1 / slope, torch.full_like(slope, S_MAX)).clamp_min(1e-12)
        x1, x2 = torch.asinh(t0 / s), torch.asinh((T_MAX - t0) / s)
        half = 0.5 * (x1 + x2)
        xq, wq = (torch.as_tensor(a, dtype=t0.dtype, device=t0.device) for a in (xq, wq))
        x = -x1[:, None] + (xq[None, :] + 1) * half[:, None]
        t = (t0[:, None] + s[:, None] * torch.sinh(x)).clamp(0, T_MAX)
        weight = wq[None, :] * half[:, None] * s[:, None] * torch.cosh(x) * 2 * torch.exp(-t * t / 2)
        return t0, t, weight / math.sqrt(2 * math.pi)

    def _pieces(self, c, t):
        """Per node (n, Q): the gradient (n, Q, 8) before its weight, and the loss."""
        gamma, sc = self.coef[2], self.scale
        f, _fp, S0, Si, rho, m, m0 = self._margin(c, t)
        w, tt = c["w"][:, None, :], t[:, :, None]
        g = torch.sigmoid(-f)
        k = -g * gamma * sc
        dev = (1 - rho) * (tt - m)
        mu = c["mu"][:, None, :]
        ga = (w * (rho * (c["u"][:, None, :] - m * mu) + dev * tt)).sum(2)
        gb = (rho * (c["pK"][:, None, :] - m * c["qK"][:, None, :]) + dev * c["Kp"][:, None, 0, 1:]).sum(2)
        dd = rho * c["ejj"][:, None, :] * (w - m)
        goo = (rho * (mu - m) - dd).sum(2)
        dev0 = S0 * (t - m0)
        di = Si * (w - m0[:, :, None])
        ga = ga + dev0 * t * t + (di * w).sum(2) * t
        gb = gb + dev0 * c["Kp"][:, None, 0, 0] + (di * c["Kp"][:, None, 1:, 0]).sum(2)
        msum = m.sum(2) + m0
        G = torch.stack([k * ga, k * gb, -g * msum, k * dev0, k * dev.sum(2), k * di.sum(2), k * dd.sum(2), k * goo], 2)
        return G, torch.nn.functional.softplus(-f)

    def gradient_rows(self, xq, wq) -> np.ndarray:
        out = []
        for s in range(0, self.sample.size, self.CHUNK):
            c = self._columns(self.sample.part(s, s + self.CHUNK))
            _t0, t, weight = self._adapted_nodes(c, xq, wq)
            G, loss = self._pieces(c, t)
            out.append(torch.cat([(G * weight[:, :, None]).sum(1), (loss * weight).sum(1, keepdim=True)], 1))
        return torch.cat(out).cpu().numpy()

    def evaluation_rows(self, tq, tw, xq, wq) -> np.ndarray:
        out = []
        for s in range(0, self.sample.size, self.CHUNK):
            c = self._columns(self.sample.part(s, s + self.CHUNK))
            n = c["w"].shape[0]
            like = c["w"]
            t = torch.as_tensor(tq, dtype=like.dtype, device=like.device)[None, :].expand(n, -1).contiguous()
            weight = torch.as_tensor(tw, dtype=like.dtype, device=like.device)[None, :]
            _f, _fp, _S0, Si, rho, _m, _m0 = self._margin(c, t)
            own = (Si.sum(2) * weight).sum(1)
            other = (rho.mean(2) * weight).sum(1)
            diag = ((rho * c["ejj"][:, None, :]).mean(2) * weight).sum(1)
            t0, ta, wa = self._adapted_nodes(c, xq, wq)
            loss = (self._pieces(c, ta)[1] * wa).sum(1)
            accuracy = torch.erfc(t0 / math.sqrt(2))
            out.append(torch.stack([own, other, loss, accuracy, diag], 1))
        return torch.cat(out).cpu().numpy()


__all__ = ["COEFFICIENTS", "Field", "Sample", "draw", "evaluate", "orbit_sizes", "point_row"]
