"""The elementwise middle of the fast kernel, fused into three loops (numba), for float32 on a CPU.

``fastpath.seed_loss_and_grads`` computes, between its two matrix products, about 40 torch
passes over (D, D, B/2) tensors (the two per-sample contractions alone are d + D passes), each
a round trip through memory. These loops do the same arithmetic in three passes, a row of H
samples at a time, so a row's intermediates stay in the L1 cache. With the small products of
``prologue`` and ``epilogue`` (and the two large ones in numpy's BLAS), the kernel for 5 seeds at
d = D = 10, B = 2048 went from 5.2 to 2.9 ms. The formulas are the torch path's, term for term,
without fused multiply-adds; the rounding differs from torch's (its multiply-adds fuse, its sums
reduce in another order) by float32 rounding. float64 runs keep the torch path, bit for bit.

Compiled on first use (about 5 s), cached on disk (``cache=True``). Without fastmath no sum is
reordered, so every value is computed the same way whatever the vector width or the thread:
a seed gets the same bits alone or among others. ``nogil``: seed workers run them in parallel.
Layouts as in fastpath: X (d, D, H), R (d + 2D + 1, D, H), attention A (M, D, D, H) [half,
key i, query j, sample], M = 2 halves [X, -X] with antithetic batches, else 1.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = dict(cache=True, nogil=True, boundscheck=False, error_model="numpy")  # numpy: no zero-division branch


@njit(**_JIT)
def scores(R, X, C, A):
    """A = scores minus their maximum over keys i (base 2; exp2 follows in torch).

    Score A[h, i, j] = even +- odd: even = x_i^T Wff x_j (sum_k R[k, i] X[k, j]) + C[i, j],
    odd = R[d + D + i, j] + R[d + j, i] (the position cross blocks), - for the mirror half.
    """
    d, D, H = X.shape
    M = A.shape[0]
    acc = np.empty(H, A.dtype)
    top = np.empty((M, H), A.dtype)
    for j in range(D):
        top[:] = -np.inf
        for i in range(D):
            r0, x0 = R[0, i], X[0, j]
            for b in range(H):
                acc[b] = r0[b] * x0[b]
            for k in range(1, d):
                rk, xk = R[k, i], X[k, j]
                for b in range(H):
                    acc[b] = acc[b] + rk[b] * xk[b]
            c, ro, rt = C[i, j], R[d + D + i, j], R[d + j, i]
            a0, t0 = A[0, i, j], top[0]
            if M == 2:
                a1, t1 = A[1, i, j], top[1]
                for b in range(H):
                    e, o = acc[b] + c, ro[b] + rt[b]
                    a0[b], a1[b] = e + o, e - o
                    t0[b] = a0[b] if a0[b] > t0[b] else t0[b]
                    t1[b] = a1[b] if a1[b] > t1[b] else t1[b]
            else:
                for b in range(H):
                    a0[b] = (acc[b] + c) + (ro[b] + rt[b])
                    t0[b] = a0[b] if a0[b] > t0[b] else t0[b]
        for h in range(M):
            t = top[h]
            for i in range(D):
                a = A[h, i, j]
                for b in range(H):
                    a[b] = a[b] - t[b]


@njit(**_JIT)
def normalise(A, v1x, pv, u, r, ubar, f):
    """In place: A = 2^scores -> softmax over keys i. Also the values u_i = +-x_i . v1 + p_i . v2,
    the mass each key receives r_i = sum_j S_ij, ubar_j = sum_i S_ij u_i and the outputs f = sum_i u_i r_i."""
    M, D, _, H = A.shape
    z = np.empty(H, A.dtype)
    for i in range(D):
        for b in range(H):
            u[0, i, b] = pv[i] + v1x[i, b]
            if M == 2:
                u[1, i, b] = pv[i] - v1x[i, b]
    r[:] = 0
    ubar[:] = 0
    for h in range(M):
        for j in range(D):
            z[:] = A[h, 0, j]
            for i in range(1, D):
                a = A[h, i, j]
                for b in range(H):
                    z[b] = z[b] + a[b]
            ub = ubar[h, j]
            for i in range(D):
                a, ui, ri = A[h, i, j], u[h, i], r[h, i]
                for b in range(H):
                    a[b] = a[b] / z[b]
                    ri[b] = ri[b] + a[b]
                    ub[b] = ub[b] + a[b] * ui[b]
    f[:] = 0
    for h in range(M):
        for i in range(D):
            fh, ui, ri = f[h], u[h, i], r[h, i]
            for b in range(H):
                fh[b] = fh[b] + ui[b] * ri[b]


@njit(**_JIT)
def gradient_rows(A, u, ubar, r, g, X, K, even_gG, even_gr):
    """K (as fastpath's: [T; g r odd part; gG odd part (; transposed)]), gG's and g r's even parts.

    gG[i, j] = S_ij (u_i g - ubar_j g) is dL/dA per sample; with antithetic batches the halves
    fold into even (sum) and odd (difference) parts; T[k, j] = sum_i X[k, i] gG_even[i, j].
    """
    M, D, _, H = A.shape
    d = X.shape[0]
    ug, bg = np.empty((M, D, H), A.dtype), np.empty((M, D, H), A.dtype)
    for h in range(M):
        for i in range(D):
            for b in range(H):
                ug[h, i, b] = u[h, i, b] * g[h, b]
                bg[h, i, b] = ubar[h, i, b] * g[h, b]
    for j in range(D):
        for i in range(D):
            a0, u0, b0, ev, ko = A[0, i, j], ug[0, i], bg[0, j], even_gG[i, j], K[d + 1 + i, j]
            if M == 2:
                a1, u1, b1, kt = A[1, i, j], ug[1, i], bg[1, j], K[d + 1 + D + j, i]
                for b in range(H):
                    e0, e1 = (u0[b] - b0[b]) * a0[b], (u1[b] - b1[b]) * a1[b]
                    ev[b] = e0 + e1
                    ko[b] = e0 - e1
                    kt[b] = ko[b]
            else:
                for b in range(H):
                    ev[b] = (u0[b] - b0[b]) * a0[b]
                    ko[b] = ev[b]
        for k in range(d):  # T[k, j] = sum_i X[k, i] gG_even[i, j]
            t = K[k, j]
            for i in range(D):
                x, ev = X[k, i], even_gG[i, j]
                if i == 0:
                    for b in range(H):
                        t[b] = x[b] * ev[b]
                else:
                    for b in range(H):
                        t[b] = t[b] + x[b] * ev[b]
    for i in range(D):  # g r: odd part to K (the v1 gradient), even part (the v2 gradient)
        for b in range(H):
            if M == 2:
                g0, g1 = r[0, i, b] * g[0, b], r[1, i, b] * g[1, b]
                K[d, i, b], even_gr[i, b] = g0 - g1, g0 + g1
            else:
                K[d, i, b] = even_gr[i, b] = r[0, i, b] * g[0, b]


@njit(**_JIT)
def prologue(W, v, P, c, WcatT, C, pv):
    """What the scores are made of, from Ws = c W (c = scale log2(e)): WcatT (d + 2D + 1, d) multiplies X
    into R (fastpath._score_rows), C = P Ws_pp P^T (the constant score block), pv = P v2."""
    D = P.shape[0]
    d = W.shape[0] - D
    for k in range(d):
        for r in range(d):
            WcatT[r, k] = c * W[k, r]
        for j in range(D):
            s1 = s2 = 0.0
            for n in range(D):
                s1 += (c * W[k, d + n]) * P[j, n]  # (Ws_fp P^T)[k, j]
                s2 += (c * W[d + n, k]) * P[j, n]  # (Ws_pf^T P^T)[k, j]
            WcatT[d + j, k], WcatT[d + D + j, k] = s1, s2
        WcatT[d + 2 * D, k] = v[k]
    for i in range(D):
        for j in range(D):
            s = 0.0
            for n in range(D):
                t = 0.0
                for q in range(D):
                    t += P[i, q] * (c * W[d + q, d + n])
                s += t * P[j, n]
            C[i, j] = s
        s = 0.0
        for n in range(D):
            s += P[i, n] * v[d + n]
        pv[i] = s


@njit(**_JIT)
def epilogue(KX, Tsum, pp, pvsum, P, scale, antithetic, gW, gv):
    """dL/dW and dL/dv from KX = K X^T (fastpath._assemble): the Wff block, the cross blocks through P,
    Wpp = P^T pp P; v1 from KX's row d, v2 = P^T (sum of the even g r). Tsum: T summed (iid batches)."""
    D = P.shape[0]
    d = gW.shape[0] - D
    for k in range(d):
        for j in range(d):
            gW[k, j] = KX[k, j] * scale
        for j in range(D):
            s = t = 0.0
            for n in range(D):
                s += (KX[d + 1 + D + n, k] if antithetic else Tsum[k, n]) * P[n, j]  # V P
                t += P[n, j] * KX[d + 1 + n, k]  # P^T KX
            gW[k, d + j], gW[d + j, k] = s * scale, t * scale
        gv[k] = KX[d, k]
    for i in range(D):
        for j in range(D):
            s = 0.0
            for n in range(D):
                t = 0.0
                for q in range(D):
                    t += P[q, i] * pp[q, n]
                s += t * P[n, j]
            gW[d + i, d + j] = s * scale
        s = 0.0
        for n in range(D):
            s += pvsum[n] * P[n, i]
        gv[d + i] = s


@njit(**_JIT)
def weighted_attention_sum(S, gu, gubar, out):
    """out[j, i] += sum_b S[b, j, i] (gu[b, i] - gubar[b, j]): symmetric.py's sum over samples of dL/dA.
    The sum over b runs in order for every (j, i); the loop over keys i is the vectorised one."""
    H, D, _ = S.shape
    for b in range(H):
        for j in range(D):
            s, o, w, c = S[b, j], out[j], gu[b], gubar[b, j]
            for i in range(D):
                o[i] = o[i] + s[i] * (w[i] - c)
