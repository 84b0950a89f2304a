"""The symmetric-subspace step as one numba loop per sample: float32 on a CPU at large D.

``symmetric.py`` writes the step as batched torch products over all samples of a seed; each of its
passes over the (H, D, D) scores is a round trip through memory (1 MB a seed at D = 32, 4 MB at
D = 64), and its products are small. Here one sample at a time goes through the whole forward and
backward pass with its (D, D) block in the L1 cache, in the layout [key i, query j]: every loop
runs over queries j with contiguous memory, the softmax over keys is a column operation (running
maximum and sum over rows), and the per-sample products are multiply-adds of rows by scalars,
which the compiler vectorises. Each pass updates several outputs with their coefficients held in
registers (four keys' scores from four rows of G, two features' rows of T^T from four rows of
dL/dA): the passes are short (D floats) and their set-up, not their arithmetic, bounds them.

The softmax is never normalised in memory: one pass writes E = 2^(A - top) with its column sums z
and the sums of E u; S = E / z enters only through per-query factors of the backward pass. The
exponential is a polynomial exp2 in float32 (Cephes' exp2f, relative error below 1e-7 here),
vectorised with the rest; the scores are in base 2 (log2 e folded into Wff and the constant block).

Samples arrive in the draw's layout (d, D, H); a block of BLOCK of them is gathered once into
[feature, sample, group] rows, on which the block's two products with X are long row operations:
G = [Ws; v1] X before its samples' loops, and sum_s T_s X_s^T (the Wff gradient) after them. What
remains outside (``symmetric._loss_and_grads_loops``): the position blocks' P (.) P^T.

Only "vertical" (lane-wise) arithmetic is vectorised, except the dot products (``row_dot``,
compiled with reassociation) whose order does not depend on other seeds: a seed gets the same bits
alone or among others, and a rerun the same bits.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import types
from numba.extending import intrinsic

JIT = dict(cache=True, nogil=True, boundscheck=False, error_model="numpy")
# multiply-adds fused (the same instruction in the vectorised loop and its scalar remainder)
FMA = dict(JIT, fastmath={"contract"})
BLOCK = 16  # samples per cache line of the draw's layout: gathered a block at a time

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


@njit(**FMA, inline="always")
def exp2(x):
    """2^x for float32 x <= 0: 2^n 2^t, n = round(x), |t| <= 1/2 (Cephes' exp2f polynomial); below
    2^-126 (float32's smallest normal) it returns about 2^-126 (flushed to 0 where denormals are)."""
    x = x if x > _LOW else _LOW
    n = np.floor(x + _HALF)  # float32 (math.floor would give an integer, and float64 arithmetic below)
    t = x - n
    e = ((((((_E5 * t + _E4) * t + _E3) * t + _E2) * t + _E1) * t + _E0) * t) + _ONE
    return e * _as_float32((np.int32(n) + np.int32(127)) << 23)


@njit(**dict(JIT, fastmath={"contract", "reassoc"}))
def row_dot(row, z, n):
    """sum of row[:n] z[:n], vectorised (reassociated)."""
    s = np.float32(0.0)
    for j in range(n):
        s += row[j] * z[j]
    return s


@njit(**FMA, inline="always")
def combine(out, rows, coef, accumulate):
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


@njit(**FMA, inline="always")
def _combine2(out0, out1, rows, coef0, coef1):
    """``combine`` (not accumulating) into two outputs in one pass over ``rows`` (half the loads of the
    rows), each output's arithmetic in ``combine``'s order, so its bits are those of one at a time."""
    n, K = out0.shape[0], coef0.shape[0]
    k = 0
    if K % 4 == 0:
        for j in range(n):
            out0[j] = 0.0
            out1[j] = 0.0
    else:
        r, c0, c1 = rows[0], coef0[0], coef1[0]
        for j in range(n):
            out0[j] = c0 * r[j]
            out1[j] = c1 * r[j]
        k = 1
    while k < K and (K - k) % 4 != 0:
        r, c0, c1 = rows[k], coef0[k], coef1[k]
        for j in range(n):
            out0[j] += c0 * r[j]
            out1[j] += c1 * r[j]
        k += 1
    while k < K:
        r0, r1, r2, r3 = rows[k], rows[k + 1], rows[k + 2], rows[k + 3]
        a0, a1, a2, a3 = coef0[k], coef0[k + 1], coef0[k + 2], coef0[k + 3]
        b0, b1, b2, b3 = coef1[k], coef1[k + 1], coef1[k + 2], coef1[k + 3]
        for j in range(n):
            x0, x1, x2, x3 = r0[j], r1[j], r2[j], r3[j]
            out0[j] += ((a0 * x0 + a1 * x1) + a2 * x2) + a3 * x3
            out1[j] += ((b0 * x0 + b1 * x1) + b2 * x2) + b3 * x3
        k += 4


@njit(**FMA, inline="always")
def rows4(A, C, G, Xs, i):
    """Rows i..i+3 of A = C + Xs^T G (A, C (D, D); G, Xs (d, D)) in one set of passes over G's d rows,
    coefficients in registers: C plus single rows until the rest is a multiple of four, then fours. The
    scores (G = [Ws] X, C the constant block) and population mode's Gram matrix (G = X, C = 0)."""
    a0, a1, a2, a3 = A[i], A[i + 1], A[i + 2], A[i + 3]
    c0, c1, c2, c3 = C[i], C[i + 1], C[i + 2], C[i + 3]
    d, n = G.shape[0], A.shape[1]
    k = 0
    if d % 4 == 0:
        for j in range(n):
            a0[j] = c0[j]
            a1[j] = c1[j]
            a2[j] = c2[j]
            a3[j] = c3[j]
    else:
        g = G[0]
        x0, x1, x2, x3 = Xs[0, i], Xs[0, i + 1], Xs[0, i + 2], Xs[0, i + 3]
        for j in range(n):
            gj = g[j]
            a0[j] = c0[j] + x0 * gj
            a1[j] = c1[j] + x1 * gj
            a2[j] = c2[j] + x2 * gj
            a3[j] = c3[j] + x3 * gj
        k = 1
    while k < d and (d - k) % 4 != 0:
        g = G[k]
        x0, x1, x2, x3 = Xs[k, i], Xs[k, i + 1], Xs[k, i + 2], Xs[k, i + 3]
        for j in range(n):
            gj = g[j]
            a0[j] += x0 * gj
            a1[j] += x1 * gj
            a2[j] += x2 * gj
            a3[j] += x3 * gj
        k += 1
    while k < d:
        g0, g1, g2, g3 = G[k], G[k + 1], G[k + 2], G[k + 3]
        p0, p1, p2, p3 = Xs[k, i], Xs[k + 1, i], Xs[k + 2, i], Xs[k + 3, i]
        q0, q1, q2, q3 = Xs[k, i + 1], Xs[k + 1, i + 1], Xs[k + 2, i + 1], Xs[k + 3, i + 1]
        r0, r1, r2, r3 = Xs[k, i + 2], Xs[k + 1, i + 2], Xs[k + 2, i + 2], Xs[k + 3, i + 2]
        s0, s1, s2, s3 = Xs[k, i + 3], Xs[k + 1, i + 3], Xs[k + 2, i + 3], Xs[k + 3, i + 3]
        for j in range(n):
            y0, y1, y2, y3 = g0[j], g1[j], g2[j], g3[j]
            a0[j] += ((p0 * y0 + p1 * y1) + p2 * y2) + p3 * y3
            a1[j] += ((q0 * y0 + q1 * y1) + q2 * y2) + q3 * y3
            a2[j] += ((r0 * y0 + r1 * y1) + r2 * y2) + r3 * y3
            a3[j] += ((s0 * y0 + s1 * y1) + s2 * y2) + s3 * y3
        k += 4


@njit(**FMA, inline="always")
def _scores4(A, CT, G, Xs, i, top):
    """Scores of keys i..i+3 (rows of A, ``rows4``) and their maximum over keys into top."""
    rows4(A, CT, G, Xs, i)
    a0, a1, a2, a3 = A[i], A[i + 1], A[i + 2], A[i + 3]
    for j in range(A.shape[1]):
        t = top[j]
        t = a0[j] if a0[j] > t else t
        t = a1[j] if a1[j] > t else t
        t = a2[j] if a2[j] > t else t
        top[j] = a3[j] if a3[j] > t else t


@njit(**FMA, inline="always")
def gather_block(Xb, X, b, nb):
    """Samples b..b+nb of X (d, D, H), the draw's layout, into Xb (d, BLOCK, D) [feature, sample, group]."""
    d, D = X.shape[0], X.shape[1]
    for k in range(d):
        for i in range(D):
            src = X[k, i, b : b + nb]
            for s in range(nb):
                Xb[k, s, i] = src[s]


@njit(**FMA, inline="always")
def softmax_columns(A, top, z, acc, weights):
    """Over keys i (rows of A, scores): A <- E = 2^(A - top), z_j = sum_i E_ij and acc_j = sum_i weights_i
    E_ij (the unnormalised softmax of each query's column and its weighted sum)."""
    D = A.shape[1]
    for j in range(D):
        z[j] = 0.0
        acc[j] = 0.0
    for i in range(A.shape[0]):
        a, wi = A[i], weights[i]
        for j in range(D):
            e = exp2(a[j] - top[j])
            a[j] = e
            z[j] += e
            acc[j] += wi * e


@njit(**FMA, inline="always")
def logistic(yb, f, H):
    """A sample's logistic loss at margin -yb f (float64) and its slope g / H (float32); the mirror half
    of an antithetic batch has the same margin and slope."""
    nm = -yb * f
    return (nm if nm > 0 else 0.0) + math.log1p(math.exp(-abs(nm))), np.float32(-yb / H / (1.0 + math.exp(-nm)))


@njit(**FMA, inline="always")
def combine_each(out, rows, coefs):
    """out[k] = sum_i coefs[k, i] rows[i] for every k: two outputs a pass over ``rows`` (``_combine2``), the
    last of an odd number alone. G = [Ws; v1] X over a block of samples, T^T = X^T dL/dA of a sample."""
    n = out.shape[0]
    k = 0
    while k + 1 < n:
        _combine2(out[k], out[k + 1], rows, coefs[k], coefs[k + 1])
        k += 2
    if k < n:
        combine(out[k], rows, coefs[k], False)


@njit(**FMA, inline="always")
def scores_and_top(A, CT, G, Xs, top, xi):
    """A sample's scores A[i, j] = CT[i, j] + x_i^T Wff x_j (base 2; G = Ws X, its rows) and their maximum
    over keys i into top: four keys a pass, the last D mod 4 one at a time (xi: a key's features)."""
    d, D = Xs.shape
    for j in range(D):
        top[j] = -np.inf
    quads = D - D % 4
    for i in range(0, quads, 4):
        _scores4(A, CT, G, Xs, i, top)
    for i in range(quads, D):
        a, c = A[i], CT[i]
        for k in range(d):
            xi[k] = Xs[k, i]
        for j in range(D):
            a[j] = c[j]
        combine(a, G, xi, True)
        for j in range(D):
            top[j] = a[j] if a[j] > top[j] else top[j]


@njit(**FMA, inline="always")
def gradient_rows(A, ppT, u, z, ubar, g, gz, gub, r, T, Xs, sk, gv1):
    """The backward pass of one sample from E (in A), its column sums' inverses z and ubar: dL/dA = g S o
    (u_i - ubar_j) = E_ij (u_i g z_j - g ubar_j z_j) into A and summed into ppT; T^T = X^T dL/dA (rows over
    queries) into T; the v1 gradient g sum_i r_i x_i into gv1, r_i = sum_j S_ij the mass key i receives."""
    d, D = Xs.shape
    for j in range(D):
        gz[j] = g * z[j]
        gub[j] = gz[j] * ubar[j]
    for i in range(D):
        a, p, ui = A[i], ppT[i], u[i]
        r[i] = row_dot(a, z, D)
        for j in range(D):
            a[j] = a[j] * (ui * gz[j] - gub[j])
            p[j] += a[j]
    combine_each(T, A, Xs)
    for k in range(d):  # d sums at once (each in order over i): not one chain of dependent adds
        sk[k] = 0.0
    for i in range(D):
        ri = r[i]
        for k in range(d):
            sk[k] += ri * Xs[k, i]
    for k in range(d):
        gv1[k] += g * sk[k]


@njit(**FMA)
def loss_and_rows(X, Wv, CT, y, gff, gv1, ppT):
    """One seed's step on the subspace, sample by sample; returns the mean logistic loss.

    X (d, D, H) the samples (the draw's layout); Wv (d + 1, d): rows k < d are Ws = log2(e) scale Wff,
    row d is v1; CT (D, D) = log2(e) scale P Wpp P^T [key i, query j]; y (H,). Writes to gff (d, d)
    the sum over samples of T^T X (the Wff gradient over scale), to gv1 (d,) the v1 gradient and to
    ppT (D, D) the sum over samples of dL/dA [key i, query j].
    """
    d, D, H = X.shape
    gv1[:] = 0.0
    ppT[:, :] = 0.0
    A = np.empty((D, D), np.float32)  # scores, then E = 2^(A - top), then dL/dA [key i, query j]
    top = np.empty(D, np.float32)
    z = np.empty(D, np.float32)
    ubar = np.empty(D, np.float32)
    gub = np.empty(D, np.float32)
    gz = np.empty(D, np.float32)
    r = np.empty(D, np.float32)
    xi = np.empty(d, np.float32)
    sk = np.empty(d, np.float32)
    # a block of samples laid out [feature k, sample s, group i]: the draw's cache lines hold BLOCK
    # samples; per block, G = [Ws; v1] X and sum_s T_s X_s^T are products over rows of BLOCK D
    Xb = np.zeros((d, BLOCK, D), np.float32)
    Gb = np.zeros((d + 1, BLOCK, D), np.float32)
    Tb = np.zeros((d, BLOCK, D), np.float32)
    Xf, Gf, Tf = Xb.reshape((d, BLOCK * D)), Gb.reshape((d + 1, BLOCK * D)), Tb.reshape((d, BLOCK * D))
    Xs = np.empty((d, D), np.float32)  # this sample's rows
    G = np.empty((d + 1, D), np.float32)
    T = np.empty((d, D), np.float32)
    gff[:, :] = 0.0
    loss = 0.0
    for b in range(H):
        t = b % BLOCK
        if t == 0:
            nb = min(BLOCK, H - b)
            gather_block(Xb, X, b, nb)
            combine_each(Gf, Xf, Wv)  # G over the whole block (a last, shorter block's rows past nb: never read)
        for k in range(d):
            xs, xb, gs, gb = Xs[k], Xb[k, t], G[k], Gb[k, t]
            for j in range(D):
                xs[j] = xb[j]
                gs[j] = gb[j]
        gs, gb = G[d], Gb[d, t]
        for j in range(D):
            gs[j] = gb[j]
        u = G[d]
        scores_and_top(A, CT, G[:d], Xs, top, xi)
        # softmax over keys i (a column operation): E = 2^(A - top) = 2^n 2^x with |x| <= 1/2, its sums
        # over keys z_j and the unnormalised values sum_i E_ij u_i; S = E / z is never written
        softmax_columns(A, top, z, ubar, u)
        f = np.float32(0.0)
        for j in range(D):
            z[j] = _ONE / z[j]
            ubar[j] *= z[j]  # ubar_j = sum_i S_ij u_i
            f += ubar[j]
        # the mirror half has outputs -f and labels -y: the same margin, so the mean over 2H samples is
        # the mean over H, and every gradient term has the slope g of H samples
        term, g = logistic(y[b], f, H)
        loss += term
        gradient_rows(A, ppT, u, z, ubar, g, gz, gub, r, T, Xs, sk, gv1)
        for k in range(d):
            ts, tb = T[k], Tb[k, t]
            for j in range(D):
                tb[j] = ts[j]
        if t == nb - 1:  # sum_s T_s X_s^T over the block: d^2 dot products of nb D terms
            n = nb * D
            for k in range(d):
                for m in range(d):
                    gff[k, m] += row_dot(Tf[k], Xf[m], n)
    return loss / H
