"""Population gradient flow's vector field, one numba loop per outer sample: float64 on a CPU.

The maths is ``flow.py``'s (read it first); this is its CPU implementation. Per outer sample (the
groups other than j*, and every group's features across v*) the t-independent sums over the D x D
scores are formed once (``_columns``: O(d D^2)), then the integral over t = |x_j* . v*| takes
O(D) per quadrature node (``_node``): the root of the margin f(t) by bisection and Newton, the
adapted nodes, and the gradient pieces at each node. Every sample writes its own row of the outputs;
``flow.py`` sums the rows in order, so the result does not depend on the thread count.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.core import types
from numba.extending import intrinsic

JIT = dict(cache=True, nogil=True, boundscheck=False, error_model="numpy")
FMA = dict(JIT, fastmath={"contract"})  # multiply-adds fused: the same instruction in vector and scalar code
_SQRT_2PI = math.sqrt(2.0 * math.pi)

ROOT_ITERATIONS = 60  # at most (Newton converges in a handful; a bisection halves the bracket each time)


@njit(**JIT, inline="always")
def _sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(**JIT, inline="always")
def _softplus(x):
    return (x if x > 0 else 0.0) + math.log1p(math.exp(-abs(x)))


@intrinsic
def _as_float64(typingctx, bits):
    """The float64 whose bits are the int64 ``bits`` (a register move, vectorisable)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


# exp(x) for x <= 0 (the softmax's weights below their column's maximum): x = n ln 2 + r, |r| <= ln 2 / 2
# (Cody and Waite's two-part ln 2), e^r by its Taylor polynomial to r^13 (remainder below 2e-17
# relative), 2^n from its exponent bits. Branch-free, so the loop over a column vectorises.
_LN2_HI, _LN2_LO = 0.693147180369123816490, 1.90821492927058770002e-10
# 1 / k!, k = 13 ... 0
_T13 = 1.6059043836821613e-10
_T12 = 2.08767569878681e-09
_T11 = 2.505210838544172e-08
_T10 = 2.755731922398589e-07
_T9 = 2.7557319223985893e-06
_T8 = 2.48015873015873e-05
_T7 = 0.0001984126984126984
_T6 = 0.001388888888888889
_T5 = 0.008333333333333333
_T4 = 0.041666666666666664
_T3 = 0.16666666666666666
_T2 = 0.5
_T1 = 1.0
_T0 = 1.0
_EXP_LOW = -708.0  # below this the weight is under 3e-308: taken as that


@njit(**FMA, inline="always")
def exp_nonpositive(x):
    """e^x for x <= 0 to about 2 ulp (tests/unit/test_flow.py checks it against math.exp)."""
    x = x if x > _EXP_LOW else _EXP_LOW
    n = np.floor(x * 1.4426950408889634 + 0.5)
    r = (x - n * _LN2_HI) - n * _LN2_LO
    p = ((((((_T13 * r + _T12) * r + _T11) * r + _T10) * r + _T9) * r + _T8) * r + _T7) * r + _T6
    p = (((((p * r + _T5) * r + _T4) * r + _T3) * r + _T2) * r + _T1) * r + _T0
    return p * _as_float64((np.int64(n) + np.int64(1023)) << np.int64(52))


@njit(**FMA)
def _columns(w, Xp, coef, scale, Kp, col, base, A, E):
    """The t-independent part of one outer sample.

    w (D,) the groups' coordinate along v* (w[0], j*'s, unused: it is t), Xp (d - 1, D) the features
    across v*. Writes Kp (D, D) = Xp^T Xp, and per query j >= 1 over the keys i >= 1 (not j*) with
    E_ij = exp(A_ij - max_i A_ij): col[0, j] mu_j = sum E w_i / Z0, col[1] u_j = sum E w_i^2 / Z0,
    col[2] pK_j = sum E w_i Kp_ij / Z0, col[3] qK_j = sum E Kp_ij / Z0, col[4] E_jj / Z0, col[5]
    L_j = log Z0 + max_i A_ij; and base[0, j] = scale (sq + beta Kp_0j) (key j*'s score, query j, at
    t = 0), base[1, i] = scale (qs + beta Kp_i0) (key i, query j*), base[2, 0] = scale (ss + beta Kp_00).
    A, E (D,): scratch. Kp is symmetric: a query's column over keys is read as its row.
    """
    dm1, D = Xp.shape
    alpha, beta = coef[0], coef[1]
    ss, sq, qs, dd, oo = coef[3], coef[4], coef[5], coef[6], coef[7]
    for i in range(D):  # rows of Kp as multiply-adds of Xp's rows (vectorised over j)
        r = Kp[i]
        for j in range(D):
            r[j] = 0.0
        for k in range(dm1):
            x, row = Xp[k, i], Xp[k]
            for j in range(D):
                r[j] += x * row[j]
    for j in range(1, D):
        K, wj = Kp[j], w[j]
        top = -np.inf
        for i in range(1, D):
            a = scale * ((oo + beta * K[i]) + alpha * w[i] * wj)
            A[i] = a
            top = a if a > top else top
        A[j] += scale * (dd - oo)  # the query's own key
        top = A[j] if A[j] > top else top
        for i in range(1, D):
            E[i] = exp_nonpositive(A[i] - top)
        z, m1, m2, pk, qk = 0.0, 0.0, 0.0, 0.0, 0.0
        for i in range(1, D):
            e = E[i]
            ew = e * w[i]
            z += e
            m1 += ew
            m2 += ew * w[i]
            pk += ew * K[i]
            qk += e * K[i]
        col[0, j] = m1 / z
        col[1, j] = m2 / z
        col[2, j] = pk / z
        col[3, j] = qk / z
        col[4, j] = E[j] / z
        col[5, j] = math.log(z) + top
        base[0, j] = scale * (sq + beta * Kp[0, j])
        base[1, j] = scale * (qs + beta * Kp[j, 0])
    base[2, 0] = scale * (ss + beta * Kp[0, 0])


@njit(**JIT)
def _query_star(t, w, kappa, base, S):
    """Query j*'s attention at x_j* . v* = t into S (D,): every key's score moves with t (a softmax, its
    largest score subtracted)."""
    D = w.shape[0]
    top = base[2, 0] + kappa * t * t
    for i in range(1, D):
        a = base[1, i] + kappa * w[i] * t
        top = a if a > top else top
    S[0] = math.exp(base[2, 0] + kappa * t * t - top)
    z = S[0]
    for i in range(1, D):
        S[i] = math.exp(base[1, i] + kappa * w[i] * t - top)
        z += S[i]
    for i in range(D):
        S[i] /= z


@njit(**JIT)
def _margin(t, w, coef, scale, col, base, S, want_slope):
    """The margin f(t) = gamma sum_j m_j of the sample with x_j* . v* = t (label +1), and with
    ``want_slope`` its derivative df/dt (else 0). S (D,) scratch: query j*'s attention, left in it."""
    D = w.shape[0]
    kappa, gamma = scale * coef[0], coef[2]
    msum, slope = 0.0, 0.0
    for j in range(1, D):
        rho = _sigmoid(col[5, j] - base[0, j] - kappa * t * w[j])  # 1 - S[j*, j]
        mu = col[0, j]
        msum += rho * mu + (1.0 - rho) * t
        if want_slope:
            slope += rho * (1.0 - rho) * (-kappa * w[j]) * (mu - t) + (1.0 - rho)
    _query_star(t, w, kappa, base, S)
    m0, da = S[0] * t, S[0] * 2.0 * kappa * t
    for i in range(1, D):
        m0 += S[i] * w[i]
        da += S[i] * kappa * w[i]
    msum += m0
    if want_slope:
        s0 = S[0] + S[0] * (2.0 * kappa * t) * t
        for i in range(1, D):
            s0 += S[i] * kappa * w[i] * w[i]
        slope += s0 - da * m0
    return gamma * msum, gamma * slope


@njit(**JIT)
def _root(w, coef, scale, col, base, S, t_max):
    """Where the margin crosses 0 on [0, t_max] (0 where it is positive at 0, t_max where it stays
    negative) and the slope there: Newton's method from the crossing of the tangent at 0, kept inside a
    bracket [lo, hi] with f(lo) < 0 < f(hi) (a bisection where a step leaves it), to |step| < 1e-12."""
    f0, s0 = _margin(0.0, w, coef, scale, col, base, S, True)
    if f0 >= 0.0:
        return 0.0, s0
    fT, sT = _margin(t_max, w, coef, scale, col, base, S, True)
    if fT <= 0.0:
        return t_max, sT
    lo, hi = 0.0, t_max
    t = -f0 / s0 if s0 > 0.0 else 0.5 * t_max
    if not (lo < t < hi):
        t = 0.5 * (lo + hi)
    f, s = _margin(t, w, coef, scale, col, base, S, True)
    for _ in range(ROOT_ITERATIONS):
        if f < 0.0:
            lo = t
        else:
            hi = t
        nt = t - f / s if s > 0.0 else -1.0
        if not (lo < nt < hi):
            nt = 0.5 * (lo + hi)
        done = abs(nt - t) <= 1e-12 * (1.0 + t)
        t = nt
        f, s = _margin(t, w, coef, scale, col, base, S, True)
        if done or f == 0.0:
            break
    return t, s


@njit(**JIT)
def _node(t, weight, w, Kp, coef, scale, col, base, S, rho, m, out):
    """Adds ``weight`` x the per-sample gradient (8,) at x_j* . v* = t to out[:8] and weight x the loss
    to out[8]. S, rho, m (D,) scratch: query j*'s attention, and per query j >= 1 its 1 - S[j*, j] and
    m_j = sum_i S_ij w_i (w_j* = t)."""
    D = w.shape[0]
    kappa, gamma = scale * coef[0], coef[2]
    msum = 0.0
    for j in range(1, D):
        r = _sigmoid(col[5, j] - base[0, j] - kappa * t * w[j])
        rho[j] = r
        m[j] = r * col[0, j] + (1.0 - r) * t
        msum += m[j]
    _query_star(t, w, kappa, base, S)
    m0 = S[0] * t
    for i in range(1, D):
        m0 += S[i] * w[i]
    msum += m0
    f = gamma * msum
    g = _sigmoid(-f)  # -dl/df, label +1
    k = -g * gamma * scale * weight
    ga, gb, gsq, gdd, goo = 0.0, 0.0, 0.0, 0.0, 0.0
    for j in range(1, D):
        r, mj, mu = rho[j], m[j], col[0, j]
        dev = (1.0 - r) * (t - mj)
        ga += w[j] * (r * (col[1, j] - mj * mu) + dev * t)
        gb += r * (col[2, j] - mj * col[3, j]) + dev * Kp[0, j]
        gsq += dev
        dd = r * col[4, j] * (w[j] - mj)
        gdd += dd
        goo += r * (mu - mj) - dd
    dev0 = S[0] * (t - m0)
    ga0, gb0, gqs = dev0 * t * t, dev0 * Kp[0, 0], 0.0
    for i in range(1, D):
        di = S[i] * (w[i] - m0)
        ga0 += di * w[i] * t
        gb0 += di * Kp[i, 0]
        gqs += di
    out[0] += k * (ga + ga0)
    out[1] += k * (gb + gb0)
    out[2] += -g * weight * msum
    out[3] += k * dev0
    out[4] += k * gsq
    out[5] += k * gqs
    out[6] += k * gdd
    out[7] += k * goo
    out[8] += weight * _softplus(-f)


@njit(**JIT)
def _adapted(w, Kp, coef, scale, col, base, S, xq, wq, t_max, s_max, out):
    """The integral over t >= 0 (density 2 phi) of one sample's gradient and loss, added to out (9,), on
    nodes adapted to its margin: t = t0 + s sinh(x), x on Gauss-Legendre nodes (xq, wq on [-1, 1])
    mapped onto [-asinh(t0 / s), asinh((t_max - t0) / s)], t0 the margin's root, s = 1 / f'(t0) (at most
    s_max): fine nodes where the logistic weight changes, coarse ones where it is flat. Returns t0."""
    t0, slope = _root(w, coef, scale, col, base, S, t_max)
    s = 1.0 / slope if slope > 1.0 / s_max else s_max
    s = s if s > 1e-12 else 1e-12
    x1, x2 = math.asinh(t0 / s), math.asinh((t_max - t0) / s)
    half = 0.5 * (x1 + x2)
    rho, m = np.empty(w.shape[0]), np.empty(w.shape[0])
    for q in range(xq.shape[0]):
        x = -x1 + (xq[q] + 1.0) * half
        t = min(max(t0 + s * math.sinh(x), 0.0), t_max)
        weight = wq[q] * half * s * math.cosh(x) * 2.0 * math.exp(-0.5 * t * t) / _SQRT_2PI
        _node(t, weight, w, Kp, coef, scale, col, base, S, rho, m, out)
    return t0


@njit(**JIT)
def point_row(w, Xp, coef, scale, t, out):
    """One input's row (the gradient (8) and the loss, label +1) at x_j* . v* = t: what the quadrature
    integrates (for tests against the paper model's own gradient)."""
    D = w.shape[0]
    Kp, col, base, S = np.empty((D, D)), np.zeros((6, D)), np.zeros((3, D)), np.empty(D)
    out[:] = 0.0
    _columns(w, Xp, coef, scale, Kp, col, base, np.empty(D), np.empty(D))
    _node(t, 1.0, w, Kp, coef, scale, col, base, S, np.empty(D), np.empty(D), out)


@njit(**JIT, parallel=True)
def gradient_rows(w, Xp, coef, scale, xq, wq, t_max, s_max, rows):
    """Per outer sample n (w (N, D), Xp (N, d - 1, D)): rows[n, :8] the gradient of the loss integrated
    over t, rows[n, 8] the loss (``_adapted``)."""
    N, D = w.shape
    for n in prange(N):
        Kp, col, base, S = np.empty((D, D)), np.zeros((6, D)), np.zeros((3, D)), np.empty(D)
        out = np.zeros(9)
        _columns(w[n], Xp[n], coef, scale, Kp, col, base, np.empty(D), np.empty(D))
        _adapted(w[n], Kp, coef, scale, col, base, S, xq, wq, t_max, s_max, out)
        for k in range(9):
            rows[n, k] = out[k]


@njit(**JIT, parallel=True)
def evaluation_rows(w, Xp, coef, scale, tq, tw, xq, wq, t_max, s_max, rows):
    """Per evaluation sample n, integrated over t: rows[n, 0] = 1 - S[j*, j*], rows[n, 1] the mean over
    queries j != j* of 1 - S[j*, j] (smooth in t: fixed nodes tq with weights tw, density included),
    rows[n, 2] the loss (adapted nodes, as the gradient's), rows[n, 3] the probability that the
    margin is positive (past its root t0: P(|x_j* . v*| > t0)) and rows[n, 4] the mean over queries
    j != j* of S[j, j] (a query's attention on itself)."""
    N, D = w.shape
    kappa = scale * coef[0]
    for n in prange(N):
        Kp, col, base, S = np.empty((D, D)), np.zeros((6, D)), np.zeros((3, D)), np.empty(D)
        out = np.zeros(9)
        _columns(w[n], Xp[n], coef, scale, Kp, col, base, np.empty(D), np.empty(D))
        own, other, self_attention = 0.0, 0.0, 0.0
        for q in range(tq.shape[0]):
            t = tq[q]
            _margin(t, w[n], coef, scale, col, base, S, False)  # S: query j*'s attention
            r0 = 0.0
            for i in range(1, D):
                r0 += S[i]
            acc, diag = 0.0, 0.0
            for j in range(1, D):
                rho = _sigmoid(col[5, j] - base[0, j] - kappa * t * w[n, j])
                acc += rho
                diag += rho * col[4, j]  # S[j, j] = (1 - S[j*, j]) E_jj / Z0
            own += tw[q] * r0
            other += tw[q] * acc / (D - 1)
            self_attention += tw[q] * diag / (D - 1)
        t0 = _adapted(w[n], Kp, coef, scale, col, base, S, xq, wq, t_max, s_max, out)
        rows[n, 0] = own
        rows[n, 1] = other
        rows[n, 2] = out[8]
        rows[n, 3] = math.erfc(t0 / math.sqrt(2.0))
        rows[n, 4] = self_attention
