"""The symmetric-subspace step as one numba loop per sample: float32 on a CPU at large D.

``symmetric.py`` writes the step as batched torch products over all samples of a seed; each of its
passes over the (H, D, D) scores is a round trip through memory (1 MB a seed at D = 32, 4 MB at
D = 64), and its products are small. Here one sample at a time goes through the whole forward and
backward pass with its (D, D) block in the L1 cache, in the layout [key i, query j]: every loop
runs over queries j with contiguous memory, the softmax over keys is a column operation (running
maximum and sum over rows), and the per-sample products are multiply-adds of rows by scalars,
which the compiler vectorises. The exponential is a polynomial exp2 (Cephes' exp2f, relative error
about 2e-7, float32's own rounding), vectorised with the rest; the scores are in base 2
(log2 e folded into Wff and the constant block).

What remains outside (``symmetric._loss_and_grads_loops``): [Ws; v1] X before the loop and, after
it, the sum over samples and queries of T^T X (the Wff gradient), each one BLAS product over all
samples, and the position blocks' P (.) P^T.

Only "vertical" (lane-wise) arithmetic is vectorised, except the mass each key receives
(``_row_sum``, compiled with reassociation), so the numbers do not depend on other seeds: a seed
gets the same bits alone or among others, and a rerun the same bits.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import types
from numba.extending import intrinsic

_JIT = dict(cache=True, nogil=True, boundscheck=False, error_model="numpy")
# multiply-adds fused (the same instruction in the vectorised loop and its scalar remainder)
_FMA = dict(_JIT, fastmath={"contract"})
BLOCK = 16  # samples per cache line of the draw's layout: gathered (and T scattered) a block at a time

# Cephes exp2f on [-1/2, 1/2]: 2^x = 1 + x P(x)
_E5, _E4, _E3 = np.float32(1.535336188319500e-4), np.float32(1.339887440266574e-3), np.float32(9.618437357674640e-3)
_E2, _E1, _E0 = np.float32(5.550332471162809e-2), np.float32(2.402264791363012e-1), np.float32(6.931472028550421e-1)
_LOW, _HALF, _ONE = np.float32(-126.0), np.float32(0.5), np.float32(1.0)  # 2^-126: float32's smallest normal


@intrinsic
def _as_float32(typingctx, bits):
    """The float32 whose bits are the int32 ``bits`` (a register move, vectorisable; numba has no
    scalar bit cast)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(**_FMA, inline="always")
def _exp2(x):
    """2^x for float32 x <= 0: 2^n 2^t, n = round(x), |t| <= 1/2 (Cephes' exp2f polynomial); below
    2^-126 (float32's smallest normal) it returns about 2^-126 (flushed to 0 where denormals are)."""
    x = x if x > _LOW else _LOW
    n = math.floor(x + _HALF)
    t = x - n
    e = ((((((_E5 * t + _E4) * t + _E3) * t + _E2) * t + _E1) * t + _E0) * t) + _ONE
    return e * _as_float32((np.int32(n) + np.int32(127)) << 23)


@njit(**_FMA)
def exp2_shifted(x):
    """2^x of a float32 array with x <= 0, as the loops compute it (for tests)."""
    out = np.empty_like(x)
    for j in range(x.shape[0]):
        out[j] = _exp2(x[j])
    return out


@njit(**dict(_JIT, fastmath={"contract", "reassoc"}))
def _row_sum(row, n):
    """sum of row[:n], vectorised (reassociated): the mass a key receives."""
    s = np.float32(0.0)
    for j in range(n):
        s += row[j]
    return s


@njit(**_FMA, inline="always")
def _combine(out, rows, coef, accumulate):
    """out (+)= sum_k coef[k] rows[k]: four rows per pass over out (a quarter of the loads and stores
    of one row at a time; the sum of each four in order, then added to out)."""
    n, K = out.shape[0], coef.shape[0]
    k = 0
    if not accumulate:
        if K % 4 == 0:
            for j in range(n):
                out[j] = 0.0
        else:
            r, c = rows[0], coef[0]
            for j in range(n):
                out[j] = c * r[j]
            k = 1
    while k < K and (K - k) % 4 != 0:
        r, c = rows[k], coef[k]
        for j in range(n):
            out[j] += c * r[j]
        k += 1
    while k < K:
        r0, r1, r2, r3 = rows[k], rows[k + 1], rows[k + 2], rows[k + 3]
        c0, c1, c2, c3 = coef[k], coef[k + 1], coef[k + 2], coef[k + 3]
        for j in range(n):
            out[j] += ((c0 * r0[j] + c1 * r1[j]) + c2 * r2[j]) + c3 * r3[j]
        k += 4


@njit(**_FMA)
def loss_and_rows(X, GU, CT, y, TT, gv1, ppT):
    """One seed's step on the subspace, sample by sample; returns the mean logistic loss.

    X (d, D, H) the samples (the draw's layout); GU (d + 1, D, H): rows k < d are (Ws x_j)[k] with
    Ws = log2(e) scale Wff, row d the values u_j = v1 . x_j (one product before the loop); CT (D, D)
    = log2(e) scale P Wpp P^T [key i, query j]; y (H,). Writes TT (d, D, H): g T^T, whose product
    with X summed over samples and queries is the Wff gradient; writes to gv1 (d,) the v1 gradient
    and to ppT (D, D) the sum over samples of dL/dA [key i, query j].
    """
    d, D, H = X.shape
    gv1[:] = 0.0
    ppT[:, :] = 0.0
    A = np.empty((D, D), np.float32)  # scores, then attention S, then dL/dA [key i, query j]
    top = np.empty(D, np.float32)
    z = np.empty(D, np.float32)
    ubar = np.empty(D, np.float32)
    gub = np.empty(D, np.float32)
    r = np.empty(D, np.float32)
    xi = np.empty(d, np.float32)
    # a block of samples, each (d, D) (and G, u), read once per block: the draw's cache lines hold BLOCK samples
    Xb = np.empty((BLOCK, d, D), np.float32)
    Gb = np.empty((BLOCK, d + 1, D), np.float32)
    Tb = np.empty((BLOCK, d, D), np.float32)
    loss = 0.0
    for b in range(H):
        t = b % BLOCK
        if t == 0:
            nb = min(BLOCK, H - b)
            for k in range(d + 1):
                for i in range(D):
                    for s in range(nb):
                        Gb[s, k, i] = GU[k, i, b + s]
            for k in range(d):
                for i in range(D):
                    for s in range(nb):
                        Xb[s, k, i] = X[k, i, b + s]
        Xs, G, T = Xb[t], Gb[t], Tb[t]
        u = G[d]
        # scores A[i, j] = CT[i, j] + x_i^T Wff x_j (base 2), and their maximum over keys i
        for j in range(D):
            top[j] = -np.inf
        for i in range(D):
            a, c = A[i], CT[i]
            for k in range(d):
                xi[k] = Xs[k, i]
            for j in range(D):
                a[j] = c[j]
            _combine(a, G[:d], xi, True)
            for j in range(D):
                top[j] = a[j] if a[j] > top[j] else top[j]
        # softmax over keys i (a column operation): 2^(A - top) = 2^n 2^x with |x| <= 1/2
        for j in range(D):
            z[j] = 0.0
        for i in range(D):
            a = A[i]
            for j in range(D):
                a[j] = _exp2(a[j] - top[j])
                z[j] += a[j]
        for j in range(D):
            z[j] = _ONE / z[j]
            ubar[j] = 0.0
        # S, ubar_j = sum_i S_ij u_i, r_i = sum_j S_ij (the mass key i receives)
        for i in range(D):
            a, ui = A[i], u[i]
            for j in range(D):
                a[j] *= z[j]
                ubar[j] += ui * a[j]
            r[i] = _row_sum(a, D)
        f = np.float32(0.0)
        for j in range(D):
            f += ubar[j]
        # the mirror half has outputs -f and labels -y: the same margin, so the mean over 2H samples is
        # the mean over H, and every gradient term has the slope g of H samples
        nm = -y[b] * f
        loss += (nm if nm > 0 else 0.0) + math.log1p(math.exp(-abs(nm)))
        g = np.float32(-y[b] / H / (1.0 + math.exp(-nm)))
        # dL/dA = g S o (u_i - ubar_j): summed over samples, and T^T = X^T dL/dA (rows over queries)
        for j in range(D):
            gub[j] = g * ubar[j]
        for i in range(D):
            a, p, gui = A[i], ppT[i], g * u[i]
            for j in range(D):
                a[j] = a[j] * (gui - gub[j])
                p[j] += a[j]
        for k in range(d):
            _combine(T[k], A, Xs[k], False)
        for k in range(d):
            xk, s = Xs[k], np.float32(0.0)
            for i in range(D):
                s += r[i] * xk[i]
            gv1[k] += g * s
        if t == nb - 1:
            b0 = b - t
            for k in range(d):
                for j in range(D):
                    for s in range(nb):
                        TT[k, j, b0 + s] = Tb[s, k, j]
    return loss / H
