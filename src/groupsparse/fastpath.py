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

FLOP count of the dense formula (what the benchmark reports, per seed and step, counting
a multiply-add as 2): scores Z W (2 B D m^2) and (Z W) Z^T (2 B D^2 m), W-gradient
G Z (2 B D^2 m) and Z^T (G Z) (2 B D m^2): 4 B D m (m + D), m = d + D.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from concurrent.futures import ThreadPoolExecutor

import torch

LOG2E = 1.4426950408889634
# The two per-sample contractions over d or D (the quadratic score block and its gradient) as a loop of
# elementwise multiply-adds (fast on a CPU: contiguous, no copies) or as one batched matmul (einsum: on a
# GPU the loop would be d + D kernel launches per seed and step). None: einsum off the CPU only.
BATCHED_CONTRACTIONS: bool | None = None
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_allocator_tuned = False


def dense_flops(B: int, D: int, d: int) -> int:
    """GEMM FLOPs of one seed's step by the dense formula (see the module docstring)."""
    m = d + D
    return 4 * B * D * m * (m + D)


def kernel_flops(B: int, D: int, d: int, antithetic: bool = True) -> int:
    """A FLOP model of what ``seed_loss_and_grads`` executes for one seed and step (elementwise ops counted).

    Per sample of the H = B/2 (antithetic) or B it is given: the two GEMMs with X,
    2 d D (d + 2D + 1) and 2 d D (d + D + 1); the quadratic block, its gradient T and V,
    2 d D^2 each; about 16 elementwise passes over the (M, D, D) scores, M = 2 mirror halves
    with ``antithetic`` (softmax, values, dL/dA). The dense formula's count is ``dense_flops``.
    """
    H, M = (B // 2, 2) if antithetic else (B, 1)
    return H * (2 * d * D * (2 * d + 3 * D + 2) + 6 * d * D * D + 16 * M * D * D)


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse instead of returning them to the system.

    A training step allocates a few MB of temporaries. By default glibc serves blocks above
    128 KiB with mmap and unmaps them on free, so every step pays thousands of page faults
    (measured here: ~3,000 per step in float32, ~13,000 in float64, about half the step's
    time). Raising the mmap and trim thresholds keeps those pages mapped. Process-wide,
    idempotent; returns False where the C library is not glibc (nothing changes then).
    """
    global _allocator_tuned
    if _allocator_tuned:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1
        ok = ok and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30) == 1
    except (OSError, AttributeError):
        return False
    _allocator_tuned = ok
    return ok


class SeedWorkers:
    """Runs per-seed work on up to ``threads`` worker threads, each doing single-threaded torch ops.

    A step is a few hundred small operations per seed. Split across cores op by op (torch's
    intra-op threads) each one pays a fork/join, and when another process holds a core every
    join waits for it: measured here, 2 threads on a shared 2-core machine made a step 5 to 10
    times slower than 1. Whole seeds on separate threads need no joins within a step, and
    every seed's numbers are then those of a one-thread run whatever ``threads`` is.
    On a GPU, or with one thread, the work runs inline.
    """

    def __init__(self, threads: int, n_seeds: int, device: torch.device):
        self.inline = device.type != "cpu" or threads <= 1
        self.workers = max(1, min(threads, n_seeds))
        self._restore_threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def map(self, fn, n: int) -> list:
        """[fn(0), ..., fn(n - 1)], in order."""
        if self.inline:
            return [fn(s) for s in range(n)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.workers, thread_name_prefix="seed", initializer=torch.set_num_threads, initargs=(1,)
            )
        out = list(self._pool.map(fn, range(n)))
        # torch.set_num_threads acts per OS thread on the op kernels, but also sets a process-wide
        # default that a worker's start just lowered to 1: put the job's value back (microseconds)
        torch.set_num_threads(self._restore_threads)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def batch_inner(X: torch.Tensor) -> torch.Tensor:
    """(n, D, d) samples -> (d, D, n): X[b, j, k] becomes X[k, j, b] (a copy)."""
    return X.permute(2, 1, 0).contiguous()


def seed_forward(
    W: torch.Tensor, v: torch.Tensor, X: torch.Tensor, P: torch.Tensor, scale: float = 1.0, antithetic: bool = False
):
    """Outputs f (M, H) and attention (M, D, D, H) [half, key i, query j, sample] of one seed.

    Arguments as in :func:`seed_loss_and_grads`; M = 2 halves [X, -X] with ``antithetic``, else 1.
    """
    attn, u = _attention_and_values(W, v, X, P, scale, antithetic)
    return (u * attn.sum(2)).sum(1), attn


def seed_loss_and_grads(
    W: torch.Tensor,
    v: torch.Tensor,
    X: torch.Tensor,
    y: torch.Tensor,
    P: torch.Tensor,
    scale: float = 1.0,
    antithetic: bool = False,
):
    """Loss and exact gradients of the paper model for one seed.

    W (m, m), v (m,) with m = d + D; X (d, D, H): X[k, j, b] = coordinate k of group j of
    sample b; y (H,) labels in {-1, +1}; P (D, D) positions, row j = p_j. With
    ``antithetic`` the batch is [X, -X] with labels [y, -y] (B = 2H), else B = H.
    Returns the mean logistic loss (0-dim), dL/dW (m, m) and dL/dv (m,).
    """
    d, D, H = X.shape
    m = d + D
    M = 2 if antithetic else 1
    B = M * H
    new = dict(dtype=X.dtype, device=X.device)
    Xf = X.reshape(d, D * H)
    Pt = P.T
    attn, u = _attention_and_values(W, v, X, P, scale, antithetic)
    yy = torch.stack([y, -y]) if antithetic else y[None]
    r = attn.sum(2)  # mass each key receives
    f = (u * r).sum(1)  # (M, H) outputs
    neg_margin = -yy * f
    loss = torch.nn.functional.softplus(neg_margin).mean()
    g = torch.sigmoid(neg_margin).mul_(yy).mul_(-1.0 / B)  # dl/df per sample

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
    K = torch.empty(d + 1 + (2 * D if antithetic else D), D, H, **new)
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
    if _batched(X):
        T.copy_(torch.einsum("kib,ijb->kjb", X, even_gG))
    else:
        xs, gs = X.unsqueeze(2).unbind(1), even_gG.unsqueeze(1).unbind(0)  # views made in C++, not Python
        torch.mul(xs[0], gs[0], out=T)
        for i in range(1, D):
            T.addcmul_(xs[i], gs[i])
    if antithetic:  # V[k, j] = sum_{i,b} x_{b,i,k} gG_odd[i, j, b]: rows [j, (i, b)] of K
        K[d + 1 + D :].copy_(odd_gG.transpose(0, 1))
    KX = K.view(K.shape[0], D * H) @ Xf.T
    V = KX[d + 1 + D :].T if antithetic else T.sum(-1)
    KX = KX[: d + 1 + D]

    gW = torch.empty(m, m, **new)
    gW[:d, :d] = KX[:d]
    gW[:d, d:] = V @ P
    gW[d:, :d] = Pt @ KX[d + 1 :]
    gW[d:, d:] = Pt @ even_gG.sum(-1) @ P
    if scale != 1.0:
        gW *= scale
    gv = torch.cat([KX[d], even_gr.sum(-1) @ P])
    return loss, gW, gv


def _batched(X: torch.Tensor) -> bool:
    return X.device.type != "cpu" if BATCHED_CONTRACTIONS is None else BATCHED_CONTRACTIONS


def _attention_and_values(W, v, X, P, scale: float, antithetic: bool):
    """Attention (M, D, D, H) [half, key i, query j, b] and values u = v . z_i (M, D, H)."""
    d, D, H = X.shape
    M = 2 if antithetic else 1  # mirror halves: +X (and -X)
    new = dict(dtype=X.dtype, device=X.device)
    Pt = P.T
    # Scores in base 2: softmax(A) = 2^(A log2(e) - max) / sum, and torch's exp2 is about four
    # times faster than its exp on a CPU. The factor rides on W, so it costs no pass over A.
    Ws = W * (scale * LOG2E)
    # One matrix product over the batch: rows 0..d-1 give Wff^T x_i (for the quadratic block),
    # rows d.. the x_i^T Wfp p_j and x_j^T Wpf^T p_i blocks, the last row x_i . v1.
    Wcat = torch.cat([Ws[:d, :d], Ws[:d, d:] @ Pt, Ws[d:, :d].T @ Pt, v[:d, None]], dim=1)
    R = (Wcat.T @ X.reshape(d, D * H)).view(d + 2 * D + 1, D, H)
    odd = R[d + D : d + 2 * D] + R[d : d + D].transpose(0, 1)  # [i, j, b]: odd in X
    if _batched(X):  # [i, j, b]: x_i^T Wff x_j, even in X
        even = torch.einsum("kib,kjb->ijb", R[:d], X)
    else:
        rs, xs = R[:d].unsqueeze(2).unbind(0), X.unsqueeze(1).unbind(0)
        even = xs[0] * rs[0]
        for k in range(1, d):
            even.addcmul_(rs[k], xs[k])
    even += (P @ Ws[d:, d:] @ Pt)[:, :, None]

    attn = torch.empty(M, D, D, H, **new)  # scores, then softmax over keys i
    torch.add(even, odd, out=attn[0])
    if antithetic:
        torch.sub(even, odd, out=attn[1])
    attn -= attn.amax(dim=1, keepdim=True)
    attn.exp2_()
    attn /= attn.sum(dim=1, keepdim=True)

    pv = (P @ v[d:])[:, None]
    u = torch.empty(M, D, H, **new)
    torch.add(pv, R[-1], out=u[0])
    if antithetic:
        torch.sub(pv, R[-1], out=u[1])
    return attn, u
