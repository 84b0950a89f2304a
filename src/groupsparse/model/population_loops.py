"""Population mode's step on the symmetric subspace, from the subspace's coefficients to their gradient.

On the symmetric loops (float32 on a CPU, D >= ``dispatch.SYMMETRIC_MIN_D``) a population step needs
neither W nor dL/dW. The scores' constant block is C = P Wpp P [key i, query j], which on the subspace
is the five orbit values of the coefficients (``population``), and Wff = alpha v* v*^T + beta (I - v*
v*^T), v1 = gamma v*, so a sample's scores are C + beta K + (alpha - beta) w w^T with K = X^T X its Gram
matrix and w = X^T v*, and its values u = gamma w. The projection of the gradient needs of the Wff and
v1 gradients only v*^T G v*, tr G and v* . g_v1, which are sums over samples of w^T dL/dA w,
<dL/dA, K> and g r . w (r the mass each key receives); and of the position gradient only the orbit
sums of dL/dA itself (in C's coordinates: P drops out). So the loops here are those of
``symmetric_loops.loss_and_rows`` (the same softmax, exponential and dL/dA, a block of samples gathered
at a time) without its products with X ([Ws; v1] X, the gradient rows T^T = X^T dL/dA and sum T X^T:
2 d D^2 + 4 d^2 D FLOPs a sample) but with K (2 d D^2) and three sums over dL/dA accumulated by query
(no horizontal sum a row; its time beside the loops' is not yet measured). Nothing with P runs in a
step: the four D x D products of the general route (``population.build`` and ``population.project``)
and the building of W and v are skipped; W and v are built only when a recording or a resume state
reads them (``training.steps.Steps.parameters``).

In exact arithmetic this is the general route's step; in float32 the constant block is C rounded once
(not P (P C P) P^T at each product), and the per-sample sums are added in float64:
``tests/unit/test_population.py`` bounds the difference from the general route and from the float64
kernel (3e-6 of the gradient; along a 60-step run, 2e-6 of the coefficients).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from . import symmetric_loops
from .cpu import denormals_flushed
from .fastpath import LOG2E

JIT = symmetric_loops.JIT
BLOCK = symmetric_loops.BLOCK


@njit(**symmetric_loops.FMA, inline="always")
def gram(K, zero, Xs):
    """The Gram matrix K = X^T X of one sample (Xs (d, D), rows per feature): four rows a pass
    (``symmetric_loops.rows4`` from ``zero``), the last D mod 4 one at a time."""
    d, D = Xs.shape
    quads = D - D % 4
    for i in range(0, quads, 4):
        symmetric_loops.rows4(K, zero, Xs, Xs, i)
    for i in range(quads, D):
        kr = K[i]
        for j in range(D):
            kr[j] = 0.0
        for k in range(d):
            xk, c = Xs[k], Xs[k, i]
            for j in range(D):
                kr[j] += c * xk[j]


@njit(**symmetric_loops.FMA, inline="always")
def scores_and_top(A, CT, K, w, bw, a, top):
    """A sample's scores CT + a K + b w w^T (bw = b w) and their maximum over keys i into top."""
    D = A.shape[0]
    for j in range(D):
        top[j] = -np.inf
    for i in range(D):
        a_i, c_i, k_i, bwi = A[i], CT[i], K[i], bw[i]
        for j in range(D):
            sc = (c_i[j] + a * k_i[j]) + bwi * w[j]
            a_i[j] = sc
            top[j] = sc if sc > top[j] else top[j]


@njit(**symmetric_loops.FMA, inline="always")
def gradient_sums(A, ppT, K, w, gamma, z, ubar, g, gz, gub, kacc, wacc):
    """dL/dA = E_ij (u_i g z_j - g ubar_j z_j), u = gamma w, from E (in A): summed into ppT, and its sums
    with K and with w w^T, accumulated by query (no horizontal sum a row): returns (<dL/dA, K>, w^T dL/dA w)."""
    D = A.shape[0]
    for j in range(D):
        gz[j] = g * z[j]
        gub[j] = gz[j] * ubar[j]
        kacc[j] = 0.0
        wacc[j] = 0.0
    for i in range(D):
        a_i, p, k_i, ui, wi = A[i], ppT[i], K[i], gamma * w[i], w[i]
        for j in range(D):
            da = a_i[j] * (ui * gz[j] - gub[j])
            p[j] += da
            kacc[j] += da * k_i[j]
            wacc[j] += wi * da
    tk, tw = np.float32(0.0), np.float32(0.0)
    for j in range(D):  # D sums of D terms each, in order over keys
        tk += kacc[j]
        tw += wacc[j] * w[j]
    return tk, tw


@njit(**symmetric_loops.FMA)
def loss_and_sums(X, v_star, CT, a, b, gamma, y, ppT, sums):
    """One seed's population step on the subspace, sample by sample; returns the mean logistic loss.

    X (d, D, H) the samples (the draw's layout), v_star (d,) float32, CT (D, D) = c C the constant
    block (base 2), a = c beta and b = c (alpha - beta) (Ws = a I + b v* v*^T), gamma (v1 = gamma v*),
    y (H,). Per sample: w = X^T v* (over a block of samples), K = X^T X, the scores CT + a K + b w w^T,
    the softmax over keys and dL/dA as in ``symmetric_loops.loss_and_rows``; w^T dL/dA w and
    <dL/dA, K> accumulated by query. Writes ppT (D, D), the sum over samples of dL/dA [key i, query j],
    and sums (3,) float64: [sum w^T dL/dA w, sum <dL/dA, K>, sum g r . w] (the Wff gradient over scale
    along v*, its trace, the v1 gradient along v*). FLOPs: ``kernel_flops.population_loops_flops``.
    """
    d, D, H = X.shape
    ppT[:, :] = 0.0
    loss, along, trace, gv = 0.0, 0.0, 0.0, 0.0
    K = np.empty((D, D), np.float32)  # the Gram matrix of the sample [key i, query j]
    A = np.empty((D, D), np.float32)  # scores, then E = 2^(A - top), then dL/dA
    top, z, ubar = np.empty(D, np.float32), np.empty(D, np.float32), np.empty(D, np.float32)
    gub, gz, ew, bw = np.empty(D, np.float32), np.empty(D, np.float32), np.empty(D, np.float32), np.empty(D, np.float32)
    kacc, wacc = np.empty(D, np.float32), np.empty(D, np.float32)
    Xb = np.zeros((d, BLOCK, D), np.float32)  # a block of samples [feature k, sample s, group i]
    wb = np.zeros((1, BLOCK * D), np.float32)  # their w = X^T v*, [sample s, group i]
    Xf = Xb.reshape((d, BLOCK * D))
    Xs = np.empty((d, D), np.float32)
    w = np.empty(D, np.float32)
    zero = np.zeros((D, D), np.float32)  # K = 0 + X^T X
    for bs in range(H):
        t = bs % BLOCK
        if t == 0:
            nb = min(BLOCK, H - bs)
            symmetric_loops.gather_block(Xb, X, bs, nb)
            symmetric_loops.combine(wb[0], Xf, v_star, False)
        for k in range(d):
            xs, xb = Xs[k], Xb[k, t]
            for j in range(D):
                xs[j] = xb[j]
        for j in range(D):
            w[j] = wb[0, t * D + j]
            bw[j] = b * w[j]
        gram(K, zero, Xs)
        scores_and_top(A, CT, K, w, bw, a, top)
        symmetric_loops.softmax_columns(A, top, z, ew, w)  # E, its sums z and sum_i w_i E_ij
        f, gv_s = np.float32(0.0), np.float32(0.0)
        for j in range(D):
            z[j] = np.float32(1.0) / z[j]
            ubar[j] = gamma * (ew[j] * z[j])  # sum_i S_ij u_i, u = gamma w
            f += ubar[j]
            gv_s += ew[j] * z[j]  # sum_i r_i w_i: r_i = sum_j S_ij, the mass key i receives
        term, g = symmetric_loops.logistic(y[bs], f, H)
        loss += term
        tk, tw = gradient_sums(A, ppT, K, w, gamma, z, ubar, g, gz, gub, kacc, wacc)
        along += tw
        trace += tk
        gv += g * gv_s
    sums[0], sums[1], sums[2] = along, trace, gv
    return loss / H


@njit(**JIT)
def projected(sums, ppT, d, j_star, scale, out):
    """The coefficients' gradient (8,) float64 from ``loss_and_sums``' outputs: Wff's along v* (v*^T G v*) and
    across it (tr G less that, over d - 1), v1's along v*, and the orbit means of scale ppT (the gradient in
    C's coordinates: P drops out). The orthogonal projection of ``population.project``."""
    D = ppT.shape[0]
    s = j_star
    ss = np.float64(ppT[s, s])
    row, col, diag, total = 0.0, 0.0, 0.0, 0.0
    for i in range(D):
        part = 0.0
        for j in range(D):
            part += np.float64(ppT[i, j])
        total += part
        diag += np.float64(ppT[i, i])
        col += np.float64(ppT[i, s])
    for j in range(D):
        row += np.float64(ppT[s, j])
    n = D - 1
    along, trace = sums[0], sums[1]
    out[0] = scale * along
    out[1] = scale * (trace - along) / (d - 1)
    out[2] = sums[2]
    out[3] = scale * ss
    out[4] = scale * (row - ss) / n
    out[5] = scale * (col - ss) / n
    out[6] = scale * (diag - ss) / n
    out[7] = scale * (total - row - col + ss - (diag - ss)) / (n * (n - 1))


@njit(**JIT)
def step(X, y, coef, v_star, orbit, j_star, c, scale, CT, ppT, sums, out):
    """One seed's step from its coefficients ``coef`` (8,) float64 to their gradient ``out`` (8,): the loops'
    constant block CT = c C from the five orbit values (``orbit`` (D, D) each pair's orbit), Ws = c Wff as
    a I + b v* v*^T, v1 = gamma v*, then ``loss_and_sums`` and ``projected``; returns the loss."""
    D = orbit.shape[0]
    for i in range(D):
        for j in range(D):
            CT[i, j] = np.float32(coef[3 + orbit[i, j]] * c)
    a, b = np.float32(c * coef[1]), np.float32(c * (coef[0] - coef[1]))
    loss = loss_and_sums(X, v_star, CT, a, b, np.float32(coef[2]), y, ppT, sums)
    projected(sums, ppT, v_star.shape[0], j_star, scale, out)
    return loss


@njit(**JIT)
def descend(Xs, ys, coef, v_star, orbit, j_star, c, scale, eta, bound, CT, ppT, sums, grad, losses):
    """Gradient descent on one seed's coefficients ``coef`` (8,) float64, in place, over the batches Xs (k, d, D,
    H), ys (k, H): per batch ``step``, then coef - eta x gradient, as ``training.descent.SubspaceDescent.step``
    computes it (JIT: no contraction into a multiply-add). Stops before the update of the first batch whose
    loss (rounded to float32, as the trainer reads it) is not finite or exceeds ``bound``, or whose gradient
    is not finite; returns the number of batches descended, their losses in ``losses`` (k,)."""
    for t in range(Xs.shape[0]):
        loss = np.float64(np.float32(step(Xs[t], ys[t], coef, v_star, orbit, j_star, c, scale, CT, ppT, sums, grad)))
        if not loss <= bound:  # NaN fails too
            return t
        for k in range(grad.shape[0]):
            if not np.isfinite(grad[k]):
                return t
        losses[t] = loss
        for k in range(coef.shape[0]):
            coef[k] = coef[k] - eta * grad[k]
    return Xs.shape[0]


class LoopsStep:
    """One seed's population step on the loops: ``(coef, X, y) -> (loss, coefficients' gradient)``.

    Holds what the seed's steps share: v*, the orbit index of j*, the buffers (a seed runs on one thread
    at a time)."""

    def __init__(self, v_star: torch.Tensor, j_star: int, D: int, scale: float):
        vs = v_star.detach().to("cpu", torch.float64).numpy()
        self.j_star, self.scale, self.c = int(j_star), float(scale), float(scale) * LOG2E
        self.v_star = vs.astype(np.float32)
        star = np.zeros(D, dtype=bool)
        star[self.j_star] = True
        key, query, eye = star[:, None], star[None, :], np.eye(D, dtype=bool)
        self.orbit = np.select(  # population.orbit_masks' order: ss, sq, qs, dd, oo
            [key & query, key & ~query, ~key & query, eye], [0, 1, 2, 3], 4
        )
        self.CT, self.ppT = np.empty((D, D), np.float32), np.empty((D, D), np.float32)
        self.sums = np.empty(3)

    def __call__(self, coef: torch.Tensor, X: torch.Tensor, y: torch.Tensor):
        """Mean logistic loss (0-dim float32) and the gradient (N_COEF,) float64 of the seed's coefficients
        ``coef`` (float64) on its batch X (d, D, H) float32 (the first half of [X, -X]), labels y (H,)."""
        if not (X.dtype == torch.float32 and X.device.type == "cpu"):
            raise ValueError(f"the symmetric loops run float32 on a CPU, got {X.dtype} on {X.device}")
        grad = np.empty(8)
        with denormals_flushed():
            loss = step(
                X.contiguous().numpy(), y.contiguous().numpy(), coef.numpy(), self.v_star, self.orbit, self.j_star,
                self.c, self.scale, self.CT, self.ppT, self.sums, grad,
            )  # fmt: skip
        return torch.tensor(loss, dtype=torch.float32), torch.from_numpy(grad)

    def descend(self, coef: torch.Tensor, X: torch.Tensor, y: torch.Tensor, eta: float, bound: float):
        """Gradient descent at ``eta`` from ``coef`` (N_COEF,) float64 over k batches X (k, d, D, H), y (k, H),
        in one call: the coefficients after the steps (a new tensor), how many steps were taken (k, or fewer
        where a loss exceeded ``bound`` or was not finite, see ``descend``) and their losses (k,) float64."""
        if not (X.dtype == torch.float32 and X.device.type == "cpu"):
            raise ValueError(f"the symmetric loops run float32 on a CPU, got {X.dtype} on {X.device}")
        out = coef.detach().to(torch.float64).clone().numpy()
        losses, grad = np.full(X.shape[0], np.nan), np.empty(8)
        with denormals_flushed():
            done = descend(
                X.contiguous().numpy(), y.contiguous().numpy(), out, self.v_star, self.orbit, self.j_star, self.c,
                self.scale, float(eta), float(bound), self.CT, self.ppT, self.sums, grad, losses,
            )  # fmt: skip
        return torch.from_numpy(out), int(done), torch.from_numpy(losses)
