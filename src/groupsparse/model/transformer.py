"""The paper's one-layer transformer (docs/STUDY.md section 2) and its section 6 variants.

Shapes carry a leading seed axis S so several seeds train as one batched computation:
  X (S, B, D, d) data, Z (S, B, D, m) tokens z_j as rows, W (S, m, m), v (S, m).
Scores A[i, j] = z_i^T W z_j (key i, query j); S = softmax over keys i (the paper's
column-wise softmax); output f = sum_j v^T Z S[:, j] = sum_i (v . z_i) * (sum_j S[i, j]).
"""

from __future__ import annotations

import math

import torch

from ..config.specs import ModelSpec


def sine_positions(D: int, dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """P[k, j] = sqrt(2/(D+1)) sin(pi (k+1)(j+1)/(D+1)): the orthonormal, symmetric DST-I matrix."""
    k = torch.arange(1, D + 1, dtype=torch.float64)
    # integer product (k+1)(j+1) first: (pi*k)*j and (pi*j)*k round differently, breaking symmetry
    P = math.sqrt(2.0 / (D + 1)) * torch.sin(math.pi * (k[:, None] * k[None, :]) / (D + 1))
    return P.to(dtype=dtype, device=device)


def token_width(spec: ModelSpec, d: int, D: int) -> int:
    return d + D if spec.positions == "concat" else d


def embed(X: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """Tokens z_j from groups x_j: [x_j; p_j] (concat) or x_j + q_j (add).

    Our choice for "add": q_j is the first d coordinates of p_j (zero-padded when d > D).
    """
    *lead, D, d = X.shape
    P = sine_positions(D, X.dtype, X.device)  # row j = p_j (P is symmetric)
    if spec.positions == "concat":
        return torch.cat([X, P.expand(*lead, D, D)], dim=-1)
    Q = torch.zeros(D, d, dtype=X.dtype, device=X.device)
    Q[:, : min(d, D)] = P[:, : min(d, D)]
    return X + Q


def init_params(
    spec: ModelSpec, n_seeds: int, m: int, gens: list[torch.Generator] | None, dtype=torch.float32, device="cpu"
) -> dict[str, torch.Tensor]:
    """Parameters with a leading seed axis; zero (paper) or N(0, init_scale^2) per seed."""
    names = (
        [f"layer{l}.W" for l in range(spec.layers)]
        if spec.attention == "merged"
        else [f"layer{l}.{w}" for l in range(spec.layers) for w in ("WK", "WQ")]
    )
    shapes = {name: (m, m) for name in names} | {"v": (m,)}
    params = {}
    for name, shape in shapes.items():
        if spec.init == "zero":
            params[name] = torch.zeros(n_seeds, *shape, dtype=dtype, device=device)
        else:
            assert gens is not None and len(gens) == n_seeds
            draws = [spec.init_scale * torch.randn(shape, generator=g, dtype=torch.float64) for g in gens]
            params[name] = torch.stack(draws).to(dtype=dtype, device=device)
    return params


def seedwise_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(S, n, k) @ (S, k, p), one 2-D matmul per seed.

    torch.bmm is not batch-invariant: with one seed it calls plain gemm/gemv, with several
    MKL's batched gemm, and the bits differ. A per-seed matmul gives a seed the same numbers
    whether it trains alone or among others (tests/unit/test_pretrain.py checks this).
    """
    return torch.stack([a[s] @ b[s] for s in range(a.shape[0])])


def attention_scores(params, layer: int, Z: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    S_, B, D, m = Z.shape
    flat = Z.reshape(S_, B * D, m)
    if spec.attention == "merged":
        ZW = seedwise_mm(flat, params[f"layer{layer}.W"]).reshape(S_, B, D, m)
        A = ZW @ Z.transpose(-1, -2)
    else:
        K = seedwise_mm(flat, params[f"layer{layer}.WK"].transpose(1, 2)).reshape(S_, B, D, m)
        Q = seedwise_mm(flat, params[f"layer{layer}.WQ"].transpose(1, 2)).reshape(S_, B, D, m)
        A = K @ Q.transpose(-1, -2)
    if spec.score_scale == "sqrt":
        A = A / math.sqrt(m)
    return A


def forward(params: dict[str, torch.Tensor], Z: torch.Tensor, spec: ModelSpec):
    """Output f (S, B) and the read-out layer's attention (S, B, D, D), [key i, query j]."""
    for layer in range(spec.layers - 1):
        attn = torch.softmax(attention_scores(params, layer, Z, spec), dim=-2)
        Z = Z + attn.transpose(-1, -2) @ Z  # residual: z_j <- z_j + sum_i S[i, j] z_i
    attn = torch.softmax(attention_scores(params, spec.layers - 1, Z, spec), dim=-2)
    u = (Z * params["v"][:, None, None, :]).sum(-1)  # u_i = v . z_i
    f = (u * attn.sum(-1)).sum(-1)
    return f, attn


def logistic_loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean over the batch (last axis) of log(1 + exp(-y f)), per seed (leading axis)."""
    margins = y * f
    if margins.dim() == 1:
        return torch.nn.functional.softplus(-margins).mean(-1)
    return seedwise(lambda m: torch.nn.functional.softplus(-m).mean(-1), margins)


def seedwise(fn, x: torch.Tensor) -> torch.Tensor:
    """fn applied to each seed's slice x[s], stacked.

    For transcendental elementwise ops (softplus, sigmoid, exp): torch's vectorised CPU
    kernels compute a tensor's last few elements (the remainder of its length modulo the
    SIMD width) with scalar code that rounds differently, so on the stacked (S, B) tensor a
    seed's bits would depend on its place among the seeds.
    """
    return torch.stack([fn(part) for part in x.unbind(0)])


def loss_and_grads_closed_form(W: torch.Tensor, v: torch.Tensor, Z: torch.Tensor, y: torch.Tensor, scale: float = 1.0):
    """Loss and exact gradients for the paper model without autograd.

    With g_b = dl/df_b (already divided by B), G[i, j] = S[i, j](u_i - sum_k S[k, j] u_k):
      dL/dv = sum_b g_b Z_b^T r_b (r = row sums of S),  dL/dW = scale * sum_b g_b Z_b^T G_b Z_b.
    The W-gradient is one (m x B*D) @ (B*D x m) GEMM per seed.
    """
    S_, B, D, m = Z.shape
    flat = Z.reshape(S_, B * D, m)
    A = seedwise_mm(flat, W).reshape(S_, B, D, m) @ Z.transpose(-1, -2)
    if scale != 1.0:
        A = A * scale
    attn = torch.softmax(A, dim=-2)
    u = (Z * v[:, None, None, :]).sum(-1)  # elementwise: batch-invariant, unlike bmm
    r = attn.sum(-1)
    f = (u * r).sum(-1)
    yf = y * f
    loss = logistic_loss(f, y)
    g = -y * seedwise(torch.sigmoid, -yf) / B  # (S, B)
    gv = ((g[..., None] * r)[..., None] * Z).sum((1, 2))  # elementwise: no gemv, batch-invariant
    ubar = (attn * u[..., :, None]).sum(-2)  # (S, B, D): mean value seen by query j
    G = attn * (u[..., :, None] - ubar[..., None, :])  # (S, B, D, D)
    H = (G @ Z).reshape(S_, B * D, m)
    gW = seedwise_mm((g[..., None, None] * Z).reshape(S_, B * D, m).transpose(1, 2), H)
    if scale != 1.0:
        gW = gW * scale
    return loss, gW, gv, f, attn
