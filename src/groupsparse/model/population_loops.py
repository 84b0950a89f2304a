"""Population mode's step on the symmetric loops, from the subspace's coefficients to their gradient.

With the symmetric loops (float32 on a CPU, D >= ``dispatch.SYMMETRIC_MIN_D``) a population step needs
neither W nor the gradient dL/dW: the loops take the scores' blocks [Ws; v1] and the constant block in
C = P Wpp P coordinates [key i, query j], and they return the Wff gradient, the v1 gradient and the sum
of dL/dA in the same coordinates. On the subspace C is the coefficients' five orbit values
(``population``), so the loops' inputs are written straight from the eight coefficients and their
outputs projected straight onto them: the four D x D products with P of the general route (C to Wpp
for W, Wpp back to C for the loops, and the same twice for the gradient; ``population.build`` and
``population.project``) and the building of W and v are skipped. W and v are built only when a
recording or a resume state reads them (``training.descent.SubspaceDescent``).

In exact arithmetic this is the general route's step; in float32 the constant block is C rounded once
instead of P (P C P) P^T rounded at each product, and the projection sums the loops' float32 outputs in
float64 (the general route rounds gW to float32 first): the coefficients move by float32 rounding
(``tests/unit/test_population.py`` bounds it against the general route and the float64 kernel).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from . import symmetric_loops
from .cpu import denormals_flushed
from .fastpath import LOG2E

_JIT = dict(cache=True, nogil=True, boundscheck=False, error_model="numpy")


@njit(**_JIT)
def loop_inputs(coef, outer, across, v_star, orbit, c, Wv, CT):
    """The loops' [Ws; v1] (d + 1, d) and CT (D, D) from the coefficients (float64): Ws = c Wff with Wff =
    alpha v* v*^T + beta (I - v* v*^T) in float32 (as ``population.build`` rounds it), v1 = gamma v*, and
    CT = c C, C[i, j] the value of (i, j)'s orbit (``orbit`` (D, D) its index into the five values)."""
    d, D = v_star.shape[0], orbit.shape[0]
    cf = np.float32(c)
    for k in range(d):
        for m in range(d):
            Wv[k, m] = np.float32(coef[0] * outer[k, m] + coef[1] * across[k, m]) * cf
        Wv[d, k] = np.float32(coef[2] * v_star[k])
    for i in range(D):
        for j in range(D):
            CT[i, j] = np.float32(coef[3 + orbit[i, j]]) * cf


@njit(**_JIT)
def projected(gff, gv1, ppT, v_star, j_star, scale, out):
    """The coefficients' gradient (8,) float64 from the loops' outputs: Wff's along v* (v*^T G v*) and across
    it (its trace less that, over d - 1), v1's along v*, and the orbit means of scale ppT (the gradient in
    C's coordinates: P drops out). The orthogonal projection of ``population.project``."""
    d, D = v_star.shape[0], ppT.shape[0]
    along, trace, gamma = 0.0, 0.0, 0.0
    for k in range(d):
        row = 0.0
        for m in range(d):
            row += np.float64(gff[k, m]) * v_star[m]
        along += v_star[k] * row
        trace += np.float64(gff[k, k])
        gamma += v_star[k] * np.float64(gv1[k])
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
    out[0] = scale * along
    out[1] = scale * (trace - along) / (d - 1)
    out[2] = gamma
    out[3] = scale * ss
    out[4] = scale * (row - ss) / n
    out[5] = scale * (col - ss) / n
    out[6] = scale * (diag - ss) / n
    out[7] = scale * (total - row - col + ss - (diag - ss)) / (n * (n - 1))


class LoopsStep:
    """One seed's population step on the symmetric loops: ``(coef, X, y) -> (loss, coefficients' gradient)``.

    Holds what the seed's steps share: v* and its projectors, the orbit index of j*, the loops' buffers
    (a seed runs on one thread at a time)."""

    def __init__(self, v_star: torch.Tensor, j_star: int, D: int, scale: float):
        vs = v_star.detach().to("cpu", torch.float64).numpy().copy()
        d = vs.shape[0]
        self.v_star, self.j_star, self.scale, self.c = vs, int(j_star), float(scale), float(scale) * LOG2E
        self.outer = np.outer(vs, vs)
        self.across = np.eye(d) - self.outer
        star = np.zeros(D, dtype=bool)
        star[self.j_star] = True
        key, query, eye = star[:, None], star[None, :], np.eye(D, dtype=bool)
        self.orbit = np.select(  # population.orbit_masks' order: ss, sq, qs, dd, oo
            [key & query, key & ~query, ~key & query, eye], [0, 1, 2, 3], 4
        ).astype(np.int64)
        f32 = dict(dtype=np.float32)
        self.Wv, self.CT = np.empty((d + 1, d), **f32), np.empty((D, D), **f32)
        self.gff, self.gv1, self.ppT = np.empty((d, d), **f32), np.empty(d, **f32), np.empty((D, D), **f32)

    def __call__(self, coef: torch.Tensor, X: torch.Tensor, y: torch.Tensor):
        """Mean logistic loss (0-dim float32) and the gradient (N_COEF,) float64 of the seed's coefficients
        ``coef`` (float64) on its batch X (d, D, H) float32 (the first half of [X, -X]), labels y (H,)."""
        if not (X.dtype == torch.float32 and X.device.type == "cpu"):
            raise ValueError(f"the symmetric loops run float32 on a CPU, got {X.dtype} on {X.device}")
        loop_inputs(coef.numpy(), self.outer, self.across, self.v_star, self.orbit, self.c, self.Wv, self.CT)
        with denormals_flushed():
            loss = symmetric_loops.loss_and_rows(
                X.contiguous().numpy(), self.Wv, self.CT, y.contiguous().numpy(), self.gff, self.gv1, self.ppT
            )
        grad = torch.empty(8, dtype=torch.float64)
        projected(self.gff, self.gv1, self.ppT, self.v_star, self.j_star, self.scale, grad.numpy())
        return torch.tensor(loss, dtype=torch.float32), grad
