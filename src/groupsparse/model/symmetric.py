"""The step on the symmetric subspace, as batched matrix products: the fast kernel at large D.

From the zero start with antithetic batches [X, -X] (labels [y, -y]) the closed form keeps v2 and
W's feature/position cross blocks Wfp, Wpf exactly 0 (their gradients cancel between the two
halves to the last bit). On that subspace the scores are

    A[b, j, i] = x_i^T Wff x_j + p_i^T Wpp p_j        (query j, key i)

(even in X: the mirror half has the same attention, so it is computed once) and the values
are u_i = x_i . v1 (odd: the mirror half's outputs are -f). The constant block P Wpp P^T is one
D x D matrix shared by every sample, so per sample the work is two (D x d) by (d x D) products
(the scores and the gradient rows), a softmax over D keys and a few elementwise passes over
(D, D): batched matmuls over samples, laid out so that BLAS sees long rows (the batch is
outermost, keys innermost, the softmax runs over contiguous memory).

The gradients of Wfp, Wpf and v2 are returned as exact zeros, which is what the general kernel
(``fastpath``) computes on this subspace, so a run stays on it. Pure torch: the same code runs
in float32 and float64, on a CPU or a GPU. Each seed runs the same operations on the same shapes
alone or among others, so batched seeds give the bits of single-seed runs.

float32 on a CPU takes another form of the same step (``loops=True``, ``symmetric_loops.py``): one
numba loop per sample whose (D, D) block never leaves the L1 cache, the products with X inside it a
block of samples at a time (its FLOPs: ``kernel_flops.symmetric_loops_phases``); benchmarks/README.md gives its speed
beside this module's torch form (``python benchmarks/bench.py``, the ``large D kernel`` rows). Which
form a run takes: ``dispatch.plan``.

FLOP count per sample (H = B/2 of them), counting a multiply-add as 2 and an exponential as 1,
what the kernel executes: Q = X Wff and u = X v1 2 D d (d + 1), scores 2 d D^2, constant block
D^2, softmax 5 D^2 (max, subtract, exp, sum, divide); backward: u X d D, the one product with S
2 (2d + 1) D^2 (twice the gradient rows' 2 d D^2: it trades FLOPs for the passes over dL/dA that
it saves), the gradient rows 3 d D, the Wff gradient 2 D d^2, the v1 gradient 2 d D, the sum
of dL/dA 3 D^2: ``kernel_flops.symmetric_flops``, by phase ``kernel_flops.symmetric_torch_phases``.
"""

from __future__ import annotations

import math
import threading

import torch

_LOG2E = 1.0 / math.log(2.0)


def scores(W, v, Xi, P, scale: float):
    """X (H, D, d), the scores A (H, D, D) [sample, query j, key i] in natural units, and the
    values u = X v1 (H, D), for samples Xi (d, D, H) (the draw's layout)."""
    return scores_of(W, v, Xi.permute(2, 1, 0).contiguous(), P, scale)


def scores_of(W, v, X, P, scale: float):
    """``scores`` for samples X (H, D, d), contiguous."""
    H, D, d = X.shape
    # Q = X (scale Wff) and u = X v1 computed as one transposed product: a (d + 1 x d) by (d x H D)
    # product is wide enough for BLAS (the other way round, with N = d, it runs at a quarter of the
    # speed); the batched product reads Q^T through its strides.
    QT = torch.cat([W[:d, :d] * scale, v[:d, None]], dim=1).T @ X.view(H * D, d).T
    A = torch.bmm(X, QT[:d].T.unflatten(0, (H, D)).transpose(1, 2))
    A.add_(((P @ W[d:, d:] @ P.T) * scale).T.contiguous())  # [query j, key i]: the constant block
    return X, A, QT[d].view(H, D)


def forward(W, v, X, P, scale: float = 1.0, chunk: int = 256):
    """Outputs f (N,) and the attention averaged over samples (D, D) [key i, query j] of one seed
    on the subspace, for samples X (N, D, d) (not mirrored; the layout of a batch, contiguous).
    ``chunk`` samples at a time: an evaluation set's (N, D, D) attention would be tens of MB,
    paid for in page faults."""
    N, D, _ = X.shape
    fs, total = [], torch.zeros(D, D, dtype=W.dtype, device=W.device)
    for b0 in range(0, N, chunk):
        _, A, u = scores_of(W, v, X[b0 : b0 + chunk], P, scale)
        S = softmax(A)
        fs.append((u * S.sum(1)).sum(-1))  # f = sum_i u_i r_i, r_i the mass key i receives
        total += S.sum(0)
    return torch.cat(fs), (total / N).T


def loss_and_grads(W, v, Xi, y, P, scale: float = 1.0, loops: bool = False):
    """Mean logistic loss and exact gradients dL/dW (m, m), dL/dv (m,) of one seed on the subspace.

    Arguments as ``fastpath.seed_loss_and_grads`` with ``antithetic``: Xi (d, D, H) is the first
    half of the batch [X, -X], y (H,) its labels. The caller keeps the run on the subspace
    (``dispatch.plan``). ``loops``: the per-sample numba loops (float32 on a CPU only).
    """
    if loops:
        if not (Xi.dtype == torch.float32 and Xi.device.type == "cpu"):
            raise ValueError(f"the symmetric loops run float32 on a CPU, got {Xi.dtype} on {Xi.device}")
        return _loss_and_grads_loops(W, v, Xi, y, P, scale)
    X, A, u = scores(W, v, Xi, P, scale)
    return backward(W, v, X, softmax(A), u, y, P, scale)


def _loss_and_grads_loops(W, v, Xi, y, P, scale: float):
    """``loss_and_grads`` through ``symmetric_loops`` (float32 on a CPU): one numba loop per sample
    (the products with X inside it, a block of samples at a time), then the position block's
    P^T (.) P. Buffers are kept per thread and shape (seed workers run in parallel)."""
    from . import symmetric_loops

    d, D, _ = Xi.shape
    m = d + D
    buf = _loop_buffers(d, D)
    loss = symmetric_loops.loss_and_rows(*loop_arguments(W, v, Xi.contiguous(), y, P, scale))
    gW = torch.zeros(m, m, dtype=W.dtype)
    torch.mul(buf["gff"], scale, out=gW[:d, :d])
    torch.mm(P.T, buf["ppT"], out=buf["tmp"])
    torch.mm(buf["tmp"], P, out=buf["gpp"])
    torch.mul(buf["gpp"], scale, out=gW[d:, d:])
    gv = torch.zeros(m, dtype=v.dtype)
    gv[:d] = buf["gv1"]
    return torch.tensor(loss, dtype=W.dtype), gW, gv


def loop_arguments(W, v, Xi, y, P, scale: float) -> tuple:
    """The arguments of ``symmetric_loops.loss_and_rows`` for one seed (numpy views of this thread's
    buffers): X, [Ws; v1], the constant block CT (both in base 2), y, and the outputs gff, gv1, ppT."""
    d, D, _ = Xi.shape
    c = scale * _LOG2E  # the loops' scores are in base 2
    buf = _loop_buffers(d, D)
    Wv, CT, tmp = buf["Wv"], buf["CT"], buf["tmp"]
    torch.mul(W[:d, :d], c, out=Wv[:d])
    Wv[d] = v[:d]
    torch.mm(P, W[d:, d:], out=tmp)
    torch.mm(tmp, P.T, out=CT)  # [key i, query j], times c below
    CT.mul_(c)
    outputs = (buf[k].numpy() for k in ("gff", "gv1", "ppT"))
    return (Xi.numpy(), Wv.numpy(), CT.numpy(), y.contiguous().numpy(), *outputs)


_loop_workspace = threading.local()


def _loop_buffers(d: int, D: int) -> dict[str, torch.Tensor]:
    """float32 buffers of ``_loss_and_grads_loops`` for this thread (only the last shape is kept)."""
    key = (d, D)
    if getattr(_loop_workspace, "key", None) != key:
        shapes = {
            "Wv": (d + 1, d), "CT": (D, D), "tmp": (D, D), "gv1": (d,), "ppT": (D, D), "gff": (d, d), "gpp": (D, D),
        }  # fmt: skip
        _loop_workspace.buffers = {k: torch.empty(s, dtype=torch.float32) for k, s in shapes.items()}
        _loop_workspace.key = key
    return _loop_workspace.buffers


def softmax(A: torch.Tensor) -> torch.Tensor:
    """Attention S (H, D, D) [sample, query j, key i]: softmax of the scores over keys i, in place on
    a CPU (a row is read whole before it is written; no fresh (H, D, D) block to fault in)."""
    if A.device.type != "cpu":
        return torch.softmax(A, -1)
    return torch.ops.aten._softmax.out(A, -1, False, out=A)


def backward(W, v, X, S, u, y, P, scale: float):
    """Outputs, loss and the gradients from the attention S (H, D, D), the samples X (H, D, d) and
    their values u (H, D)."""
    H, D, d = X.shape
    m = d + D
    Xt = X.transpose(1, 2)  # (H, d, D)
    # One batched product gives all that the gradient needs from S besides its sum over samples:
    # [X^T; (u X)^T; u^T] S^T = [(S X)^T; (S diag(u) X)^T; (S u)^T], (2d + 1) x D per sample, the
    # wide orientation for BLAS. With dL/dA = g S o (1 u^T - ubar 1^T) (ubar = S u), the gradient
    # rows T^T = X^T (dL/dA)^T = g ((S diag(u) X)^T - (S X)^T diag(ubar)), without dL/dA itself.
    R = torch.cat([Xt, Xt * u[:, None, :], u[:, None, :]], dim=1)
    B = torch.bmm(R, S.transpose(1, 2))
    SXt, SuXt, ubar = B[:, :d], B[:, d : 2 * d], B[:, 2 * d]
    f = ubar.sum(-1)
    # the mirror half has outputs -f and labels -y: the same margins, so the mean over the 2H samples
    # is the mean over H, and its slope, -g, doubles every gradient term below (1/H, not 1/2H)
    neg_margin = -y * f
    loss = torch.nn.functional.softplus(neg_margin).mean()
    g = torch.sigmoid(neg_margin).mul_(y).mul_(-1.0 / H)
    gs = g[:, None, None]
    TT = (SuXt - SXt * ubar[:, None, :]).mul_(gs)  # (H, d, D)
    # sum over samples and queries of T^T X: the Wff gradient
    gff = TT.permute(1, 0, 2).reshape(d, H * D) @ Xt.permute(1, 0, 2).reshape(d, H * D).T
    # the v1 gradient sum_b g sum_i r_i x_i, with r = S^T 1: sum_j of g (S X)^T
    gv1 = (SXt * gs).sum((0, 2))
    pp = _dA_sum(S, u * g[:, None], ubar * g[:, None])  # [query j, key i]
    gW = torch.zeros(m, m, dtype=W.dtype, device=W.device)
    gW[:d, :d] = gff * scale
    gW[d:, d:] = (P.T @ pp.T @ P) * scale
    gv = torch.zeros(m, dtype=v.dtype, device=v.device)
    gv[:d] = gv1
    return loss, gW, gv


def _dA_sum(S, gu, gubar):
    """sum_b dL/dA_b = sum_b S_b o (gu_b 1^T - 1 gubar_b^T)^T, [query j, key i]: one pass over S on a
    CPU (a numba loop, vectorised over keys), torch's three elsewhere."""
    if S.device.type == "cpu" and S.dtype in (torch.float32, torch.float64):
        from . import fused

        out = torch.zeros(S.shape[1:], dtype=S.dtype)
        fused.weighted_attention_sum(S.numpy(), gu.numpy(), gubar.numpy(), out.numpy())
        return out
    return torch.sub(gu[:, None, :], gubar[:, :, None]).mul_(S).sum(0)
