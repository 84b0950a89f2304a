"""A second ceiling for the float32 loops: what numba reaches on their access pattern.

The GEMM ceiling (``torch.mm``) is what the machine's BLAS reaches on long, blocked products. The
symmetric and population loops (``model/symmetric_loops.py``, ``model/population_loops.py``) work on
rows of D floats (D = 32 or 64) that stay in L1, as multiply-adds of four rows by scalars into an output
row; that pattern loads five rows and stores one for eight FLOPs an element, so it is bound by loads and
stores and by the loop's set-up per row, not by the FMA units. :func:`rates` times the simplest loop of
that shape, compiled with the loops' own numba flags, so a kernel's share of the GEMM ceiling can be read
beside what such a loop can reach on the same CPU (it differs more between CPUs than the GEMM does).
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from groupsparse.model import symmetric_loops

ROWS = 64  # input rows: 64 x 64 floats = 16 KB, in L1 with the output rows
OUT_ROWS = 16


@njit(**dict(symmetric_loops.FMA, cache=False))
def _rows4(out, X, coef, reps):
    n, D = X.shape
    for r in range(reps):
        o = out[r & (OUT_ROWS - 1)]
        for i in range(0, n, 4):
            a, b, c, e = coef[i], coef[i + 1], coef[i + 2], coef[i + 3]
            x0, x1, x2, x3 = X[i], X[i + 1], X[i + 2], X[i + 3]
            for j in range(D):
                o[j] += ((a * x0[j] + b * x1[j]) + c * x2[j]) + e * x3[j]
    return out


def rates(Ds=(32, 64), repeats: int = 5, flops_per_block: float = 2e8) -> dict[int, float]:
    """GFLOP/s of the four-row multiply-add over rows of D float32 values, best of ``repeats`` blocks."""
    rng = np.random.default_rng(0)
    out = {}
    for D in Ds:
        X = rng.random((ROWS, D), dtype=np.float32)
        coef = rng.random(ROWS, dtype=np.float32)
        acc = np.zeros((OUT_ROWS, D), np.float32)
        _rows4(acc, X, coef, 1)  # compile
        per_rep = ROWS // 4 * D * 8
        reps = max(1, int(flops_per_block // per_rep))
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            _rows4(acc, X, coef, reps)
            best = min(best, time.perf_counter() - t0)
        out[D] = reps * per_rep / best / 1e9
    return out


if __name__ == "__main__":
    for D, r in rates().items():
        print(f"D = {D}: {r:.1f} GFLOP/s")
