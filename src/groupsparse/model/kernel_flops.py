"""FLOP models of the kernels, torch-free: ``dispatch.step_flops`` gives a plan's, which the cost model
(``costs``) and the benchmarks count with."""

from __future__ import annotations


def dense_flops(B: int, D: int, d: int, m: int | None = None, layers: int = 1) -> int:
    """GEMM FLOPs of one seed's step by the dense formula, counting a multiply-add as 2: scores Z W
    (2 B D m^2) and (Z W) Z^T (2 B D^2 m), W-gradient G Z (2 B D^2 m) and Z^T (G Z) (2 B D m^2):
    4 B D m (m + D) a layer, m = d + D with concatenated positions (``m``: the token width)."""
    m = d + D if m is None else m
    return 4 * B * layers * D * m * (m + D)


def general_flops(B: int, D: int, d: int, antithetic: bool = True) -> int:
    """What ``fastpath.seed_loss_and_grads`` (and its fused form) executes for one seed and step,
    elementwise operations counted.

    Per sample of the H = B/2 (antithetic) or B it is given: the two GEMMs with X,
    2 d D (d + 2D + 1) and 2 d D (d + D + 1); the quadratic block, its gradient T and V,
    2 d D^2 each; about 16 elementwise passes over the (M, D, D) scores, M = 2 mirror halves
    with ``antithetic`` (softmax, values, dL/dA).
    """
    H, M = (B // 2, 2) if antithetic else (B, 1)
    return H * (2 * d * D * (2 * d + 3 * D + 2) + 6 * d * D * D + 16 * M * D * D)


def symmetric_flops(B: int, D: int, d: int, loops: bool = False) -> int:
    """FLOPs this kernel executes for one seed and step with an antithetic batch of B samples
    (``loops``: the per-sample loops of float32 on a CPU, ``symmetric_loops_phases``)."""
    parts = symmetric_loops_phases(B, D, d) if loops else symmetric_torch_phases(B, D, d, 4)
    return sum(f for f, _ in parts.values())


def symmetric_loops_phases(B: int, D: int, d: int) -> dict[str, tuple[int, int]]:
    """(FLOPs, bytes moved) of the per-sample loops' step (``symmetric_loops``) for one seed and step.

    ``loops``, per sample: [Ws; v1] x (Wff x_j and the values u) 2 d (d + 1) D, scores 2 d D^2 (the
    constant block is the sums' start), their maximum D^2, exponentials with their column sums and
    the sums of E u 5 D^2 (subtract, exp2 counted as 1, sum, multiply-add), the mass r 2 D^2, dL/dA
    3 D^2 and its sum D^2, T^T 2 d D^2, the v1 gradient 2 d D, the Wff gradient T^T X 2 d^2 D.
    ``products``, outside the loops: the position blocks' two D x D products on each side 8 D^3
    per step. Bytes: the samples cross memory once (a block's rows and a sample's (D, D) block stay
    in the caches); the position blocks' products read and write six D x D matrices."""
    H, s = B // 2, 4
    per_sample = 2 * d * (d + 1) * D + 4 * d * D * D + 12 * D * D + 2 * d * D + 2 * d * d * D
    return {"loops": (H * per_sample, s * H * d * D), "products": (8 * D**3, s * 6 * D * D)}


def symmetric_torch_phases(B: int, D: int, d: int, itemsize: int) -> dict[str, tuple[int, int]]:
    """(FLOPs, bytes moved) of each phase for one seed and step of ``symmetric.py``'s torch form (see its docstring).

    Bytes: what each pass over a tensor reads and writes once (the compulsory traffic, as if no
    intermediate stayed in a cache), the (H, D, D) passes dominating: scores 1 write and 2 (the
    constant block), softmax 2, backward 2 (the product with S, the sum of dL/dA)."""
    H, s = B // 2, itemsize
    return {
        "scores": (H * (2 * D * d * (d + 1) + 2 * d * D * D + D * D), s * H * (6 * d * D + 3 * D * D)),
        "softmax": (H * 5 * D * D, s * H * 2 * D * D),
        "backward": (
            H * (2 * (2 * d + 1) * D * D + 3 * D * D + 2 * D * d * d + 6 * d * D),
            s * H * (2 * D * D + 12 * d * D),
        ),
    }


def population_loops_flops(B: int, D: int, d: int) -> int:
    """FLOPs of population mode's step from the coefficients (``population_loops.loss_and_sums``) for one
    seed and step. Per sample of the H = B/2: w = X^T v* 2 d D, the Gram matrix K 2 d D^2, the scores
    CT + a K + b w w^T and their maximum 5 D^2, the exponentials with their sums z and sum_i w_i E 5 D^2,
    dL/dA 3 D^2, its sum D^2 and its products with K and w (by query) 4 D^2, a few passes over D."""
    return B // 2 * (2 * d * D + 2 * d * D * D + 18 * D * D + 8 * D)


def flow_sample_flops(D: int, d: int, nodes: int = 32) -> int:
    """Work units of one outer sample of the flow's field (``flow_loops``), in the shape of its measured CPU
    time (d = 10, 32 nodes, 2026-12-07: 0.019, 0.073 and 0.55 ms at D = 16, 64 and 256, side by side in one
    process): the Gram matrix of the features across v* (2 (d - 1) D^2) and the scores, exponentials and
    five weighted sums over the D x D block (32 D^2); per node of t (``nodes``, and about 12 of the
    margin's root) O(D) work, its exponentials and sigmoids unvectorised (135 D); and a fixed part per
    sample (its scratch arrays, the quadrature's set-up: 60,000)."""
    return 2 * (d - 1) * D * D + 32 * D * D + (nodes + 12) * 135 * D + 60_000
