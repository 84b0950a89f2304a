"""The pretraining hot path: exact loss and gradients of the paper model, fast on a CPU.

Same numbers as ``model.loss_and_grads_closed_form`` (up to rounding), computed differently:

- Features, not tokens. z_j = [x_j; p_j] and the positions P are the same for every sample,
  so with W = [[Wff, Wfp], [Wpf, Wpp]] the scores split into four blocks
      A = X Wff X^T + X Wfp P^T + P Wpf X^T + P Wpp P^T.
  The two middle blocks, Wff's half of the first and the values u = X v1 + P v2 come out of
  ONE (d+2D+1) x d by d x (D*B) matrix product over the whole batch; the last block is a
  per-step constant. Only X Wff X^T needs a per-sample contraction (d multiply-adds per
  score), and the gradients split the same way.
- Batch innermost. A seed's features are stored (d, D, B), so the scores, the softmax over
  keys and the gradient algebra are plain elementwise loops over contiguous samples, where
  torch's own small batched matmuls and softmax over a length-D axis are slow on a CPU.
- Antithetic batches [X, -X] (labels [y, -y]): the terms even in X (the quadratic block, the
  constant) are computed once for both halves, and every reduction over the batch that
  multiplies by X once more folds the two halves before the matrix product.
- One seed at a time: each seed runs the same operations on the same shapes whether it
  trains alone or among others, so batched seeds give the bits of single-seed runs.
- float32 on a CPU: the elementwise steps between the two matrix products, some 40 torch
  passes over (D, D, B/2) tensors, run as three fused loops (``fused_loss_and_grads``, ``fused.py``),
  and subnormal numbers are flushed meanwhile; float64 (and a GPU) keep the torch path, bit for bit.
- Which of these a run takes (and when ``symmetric.py``'s kernel replaces them on the symmetric
  subspace at large D) is decided in one place, ``dispatch.plan``.

FLOP models (the dense formula's count and what this kernel executes): ``kernel_flops.dense_flops``
and ``kernel_flops.general_flops``, torch-free for the cost model.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from .cpu import denormals_flushed, numpy_blas_one_thread

LOG2E = 1.4426950408889634
_fused_workspace = threading.local()  # see _fused_buffers


def batch_inner(X: torch.Tensor) -> torch.Tensor:
    """(n, D, d) samples -> (d, D, n): X[b, j, k] becomes X[k, j, b] (a copy)."""
    return X.permute(2, 1, 0).contiguous()


def seed_forward(
    W: torch.Tensor,
    v: torch.Tensor,
    X: torch.Tensor,
    P: torch.Tensor,
    scale: float = 1.0,
    antithetic: bool = False,
    batched: bool | None = None,
):
    """Outputs f (M, H) and attention (M, D, D, H) [half, key i, query j, sample] of one seed.

    Arguments as in :func:`seed_loss_and_grads`; M = 2 halves [X, -X] with ``antithetic``, else 1.
    """
    attn, u = _attention_and_values(W, v, X, P, scale, antithetic, _batched(X, batched))
    return (u * attn.sum(2)).sum(1), attn


def seed_loss_and_grads(
    W: torch.Tensor,
    v: torch.Tensor,
    X: torch.Tensor,
    y: torch.Tensor,
    P: torch.Tensor,
    scale: float = 1.0,
    antithetic: bool = False,
    batched: bool | None = None,
):
    """Loss and exact gradients of the paper model for one seed, in torch operations.

    W (m, m), v (m,) with m = d + D; X (d, D, H): X[k, j, b] = coordinate k of group j of
    sample b; y (H,) labels in {-1, +1}; P (D, D) positions, row j = p_j. With
    ``antithetic`` the batch is [X, -X] with labels [y, -y] (B = 2H), else B = H.
    Returns the mean logistic loss (0-dim), dL/dW (m, m) and dL/dv (m,).
    ``batched``: the two per-sample contractions over d or D (the quadratic score block and its
    gradient) as one batched einsum, or as a loop of elementwise multiply-adds (fast on a CPU:
    contiguous, no copies; on a GPU it would be d + D kernel launches per seed and step). None:
    einsum off the CPU only. The same step for float32 on a CPU, faster: :func:`fused_loss_and_grads`.
    """
    batched = _batched(X, batched)
    d, D, H = X.shape
    attn, u = _attention_and_values(W, v, X, P, scale, antithetic, batched)
    r = attn.sum(2)  # mass each key receives
    f = (u * r).sum(1)  # (M, H) outputs
    loss, g = _loss_and_slope(f, y, antithetic)

    # G[i, j] = S[i, j] (u_i - sum_k S[k, j] u_k), scaled by g: dL/dA for each sample.
    ubar = (attn * u[:, :, None, :]).sum(1)
    gG = (u * g[:, None, :])[:, :, None, :] - (ubar * g[:, None, :])[:, None, :, :]
    gG.mul_(attn)
    gr = r * g[:, None, :]

    # K stacks what multiplies X once more in the gradient: [T; g r (odd part); gG (odd part)],
    # T[k, j, b] = sum_i x_{b,i,k} gG_even[i, j, b]. One product K X^T then gives the Wff block,
    # the v1 gradient and P^T-side of the Wpf block.
    # With antithetic batches K also holds odd_gG with its two key/query axes swapped, so the same
    # product gives V (the Wfp block's contraction), which would otherwise be a separate batched matmul.
    K = torch.empty(d + 1 + (2 * D if antithetic else D), D, H, dtype=X.dtype, device=X.device)
    odd_gG = K[d + 1 : d + 1 + D]
    if antithetic:
        even_gG = gG[0] + gG[1]
        torch.sub(gG[0], gG[1], out=odd_gG)
        torch.sub(gr[0], gr[1], out=K[d])
        even_gr = gr[0] + gr[1]
    else:
        even_gG = gG[0]
        odd_gG.copy_(gG[0])
        K[d].copy_(gr[0])
        even_gr = gr[0]
    T = K[:d]
    if batched:
        T.copy_(torch.einsum("kib,ijb->kjb", X, even_gG))
    else:
        xs, gs = X.unsqueeze(2).unbind(1), even_gG.unsqueeze(1).unbind(0)  # views made in C++, not Python
        torch.mul(xs[0], gs[0], out=T)
        for i in range(1, D):
            T.addcmul_(xs[i], gs[i])
    if antithetic:  # V[k, j] = sum_{i,b} x_{b,i,k} gG_odd[i, j, b]: rows [j, (i, b)] of K
        K[d + 1 + D :].copy_(odd_gG.transpose(0, 1))
    gW, gv = _assemble(K, X, P, even_gG.sum(-1), even_gr.sum(-1), scale, antithetic)
    return loss, gW, gv


def fused_loss_and_grads(W, v, X, y, P, scale: float, antithetic: bool):
    """seed_loss_and_grads for float32 on a CPU: the same steps, the elementwise ones fused (fused.py;
    5 seeds at the default size: 2.9 ms instead of 5.2).

    The two matrix products run in numpy's BLAS (OpenBLAS, one thread a call, as torch's): with an
    inner dimension of d it computes R in 75 us where torch's MKL takes 128 (d = D = 10, B = 2048).
    """
    step = FusedStep(W, v, X, P, scale, antithetic)
    with denormals_flushed(), np.errstate(all="ignore"):  # a diverged seed's inf and nan are recorded, not warned
        step.scores()
        step.softmax()
        return step.backward(y)


class FusedStep:
    """One seed's fused float32 step in its three phases, in this order (the benchmark times them apart):
    the scores, the softmax over keys, the backward pass to the loss and gradients."""

    def __init__(self, W, v, X, P, scale: float, antithetic: bool):
        from . import fused  # numba: imported (and compiled, then cached on disk) only where used

        self.fused, self.W, self.v, self.scale, self.antithetic = fused, W, v, scale, antithetic
        self.d, self.D, self.H = X.shape
        self.buf, self.arr = _fused_buffers(self.d, self.D, self.H, 2 if antithetic else 1)
        self.Xa, self.Pa = X.contiguous().numpy(), P.contiguous().numpy()
        self.Xf = self.Xa.reshape(self.d, self.D * self.H)
        self.dtype = X.dtype

    def scores(self) -> None:
        """The constant blocks, R = [Wcat] X (one product) and the scores (base 2)."""
        arr, d, D, H = self.arr, self.d, self.D, self.H
        W, v = self.W.contiguous().numpy(), self.v.contiguous().numpy()
        self.fused.prologue(W, v, self.Pa, self.scale * LOG2E, *_get(arr, "WcatT C pv"))
        np.matmul(arr["WcatT"], self.Xf, out=arr["R"])
        self.R = arr["R"].reshape(d + 2 * D + 1, D, H)
        self.fused.scores(self.R, self.Xa, arr["C"], arr["attn"])

    def softmax(self) -> None:
        """2^scores in place, normalised over keys, with the values and outputs f."""
        self.buf["attn"].exp2_()  # torch's vectorised exp2 (numba's calls libm value by value)
        self.fused.normalise(self.arr["attn"], self.R[-1], *_get(self.arr, "pv u r ubar f"))

    def backward(self, y):
        """The mean loss and dL/dW (m, m), dL/dv (m,) on labels y (H,)."""
        arr, buf, d, D, H = self.arr, self.buf, self.d, self.D, self.H
        loss, g = _loss_and_slope(buf["f"], y, self.antithetic)
        self.fused.gradient_rows(*_get(arr, "attn u ubar r"), g.numpy(), self.Xa, *_get(arr, "K even_gG even_gr"))
        np.matmul(arr["K"].reshape(-1, D * H), self.Xf.T, out=arr["KX"])
        torch.sum(buf["even_gG"], -1, out=buf["pp"])
        torch.sum(buf["even_gr"], -1, out=buf["pvsum"])
        if not self.antithetic:
            torch.sum(buf["K"][:d], -1, out=buf["Tsum"])
        m = d + D
        gW, gv = torch.empty(m, m, dtype=self.dtype), torch.empty(m, dtype=self.dtype)  # returned: fresh
        self.fused.epilogue(
            *_get(arr, "KX Tsum pp pvsum"), self.Pa, self.scale, self.antithetic, gW.numpy(), gv.numpy()
        )
        return loss, gW, gv


def _get(arrays: dict, names: str) -> list:
    return [arrays[k] for k in names.split()]


def _fused_buffers(d: int, D: int, H: int, M: int):
    """This thread's float32 intermediates for one shape, as tensors and their numpy views, made once.

    An allocation or a numpy view costs a microsecond or two, some 40 per seed and step otherwise.
    Per thread: seed workers run the kernel concurrently. Only the last shape is kept.
    """
    key = (d, D, H, M)
    held = getattr(_fused_workspace, "held", None)
    if held is None or held[0] != key:
        numpy_blas_one_thread()
        shapes = {
            "WcatT": (d + 2 * D + 1, d),
            "C": (D, D),
            "pv": (D,),
            "R": (d + 2 * D + 1, D * H),
            "attn": (M, D, D, H),
            **{k: (M, D, H) for k in ("u", "r", "ubar")},
            "f": (M, H),
            "K": (d + 1 + M * D, D, H),
            "even_gG": (D, D, H),
            "even_gr": (D, H),
            "KX": (d + 1 + M * D, d),
            "pp": (D, D),
            "pvsum": (D,),
            "Tsum": (d, D),
        }
        tensors = {k: torch.empty(shape, dtype=torch.float32) for k, shape in shapes.items()}
        held = _fused_workspace.held = (key, tensors, {k: x.numpy() for k, x in tensors.items()})
    return held[1], held[2]


def _loss_and_slope(f, y, antithetic: bool):
    """Mean logistic loss of outputs f (M, H) and dl/df per sample (M, H) (labels [y, -y] when antithetic)."""
    yy = torch.stack([y, -y]) if antithetic else y[None]
    neg_margin = -yy * f
    loss = torch.nn.functional.softplus(neg_margin).mean()
    return loss, torch.sigmoid(neg_margin).mul_(yy).mul_(-1.0 / f.numel())


def _assemble(K, X, P, pp, pv, scale: float, antithetic: bool):
    """dL/dW (m, m) and dL/dv (m,) from the gradient rows K (one matrix product with X), and the sums
    over samples of the even parts: pp = sum_b gG_even (D, D), pv = sum_b (g r)_even (D,)."""
    d, D, H = X.shape
    m = d + D
    Pt = P.T
    KX = K.view(K.shape[0], D * H) @ X.reshape(d, D * H).T
    V = KX[d + 1 + D :].T if antithetic else K[:d].sum(-1)
    gW = torch.empty(m, m, dtype=X.dtype, device=X.device)
    gW[:d, :d] = KX[:d]
    gW[:d, d:] = V @ P
    gW[d:, :d] = Pt @ KX[d + 1 : d + 1 + D]
    gW[d:, d:] = Pt @ pp @ P
    if scale != 1.0:
        gW *= scale
    gv = torch.cat([KX[d], pv @ P])
    return gW, gv


def _batched(X: torch.Tensor, batched: bool | None) -> bool:
    return X.device.type != "cpu" if batched is None else batched


def _score_rows(W, v, X, P, scale: float):
    """R (d + 2D + 1, D, H), the constant score block C (D, D) and P v2 (D,): what the scores are made of.

    Scores in base 2: softmax(A) = 2^(A log2(e) - max) / sum, and torch's exp2 is about four
    times faster than its exp on a CPU. The factor rides on W, so it costs no pass over A.
    One matrix product over the batch: rows 0..d-1 of R give Wff^T x_i (for the quadratic block),
    rows d.. the x_i^T Wfp p_j and x_j^T Wpf^T p_i blocks, the last row x_i . v1.
    """
    d, D, H = X.shape
    Pt = P.T
    Ws = W * (scale * LOG2E)
    Wcat = torch.cat([Ws[:d, :d], Ws[:d, d:] @ Pt, Ws[d:, :d].T @ Pt, v[:d, None]], dim=1)
    R = (Wcat.T @ X.reshape(d, D * H)).view(d + 2 * D + 1, D, H)
    return R, P @ Ws[d:, d:] @ Pt, P @ v[d:]


def _attention_and_values(W, v, X, P, scale: float, antithetic: bool, batched: bool):
    """Attention (M, D, D, H) [half, key i, query j, b] and values u = v . z_i (M, D, H)."""
    d, D, H = X.shape
    M = 2 if antithetic else 1  # mirror halves: +X (and -X)
    new = dict(dtype=X.dtype, device=X.device)
    R, C, pv = _score_rows(W, v, X, P, scale)
    odd = R[d + D : d + 2 * D] + R[d : d + D].transpose(0, 1)  # [i, j, b]: odd in X
    if batched:  # [i, j, b]: x_i^T Wff x_j, even in X
        even = torch.einsum("kib,kjb->ijb", R[:d], X)
    else:
        rs, xs = R[:d].unsqueeze(2).unbind(0), X.unsqueeze(1).unbind(0)
        even = xs[0] * rs[0]
        for k in range(1, d):
            even.addcmul_(rs[k], xs[k])
    even += C[:, :, None]

    attn = torch.empty(M, D, D, H, **new)  # scores, then softmax over keys i
    torch.add(even, odd, out=attn[0])
    if antithetic:
        torch.sub(even, odd, out=attn[1])
    attn -= attn.amax(dim=1, keepdim=True)
    attn.exp2_()
    attn /= attn.sum(dim=1, keepdim=True)

    pv = pv[:, None]
    u = torch.empty(M, D, H, **new)
    torch.add(pv, R[-1], out=u[0])
    if antithetic:
        torch.sub(pv, R[-1], out=u[1])
    return attn, u
