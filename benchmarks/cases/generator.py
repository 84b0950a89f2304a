"""torch's generator (mt19937, Box-Muller) against numpy's PCG64 (ziggurat), float32 and float64: ns a value on
the default batch's shape, and on 2^22 values (2^20 quick) the first four moments (PASS within 5 standard
errors) and a Kolmogorov-Smirnov test (PASS at p > 0.001)."""

from __future__ import annotations

import statistics

NAME = "generator"
SHAPE, SEEDS = (10, 10, 1024), 5


def run(ctx) -> list:
    """torch's CPU generator (mt19937 + Box-Muller) against numpy's PCG64 (+ ziggurat), float32 and
    float64: speed on the default batch (5 seeds x 1024 x 10 x 10 values) and a statistical sanity
    check on one large sample each: the first four moments and a Kolmogorov-Smirnov test against N(0, 1)."""
    import numpy as np
    from scipy import stats

    from groupsparse.data.synthetic import standard_normal

    torch, table, args, timed_blocks = ctx.torch, ctx.table, ctx.args, ctx.timed
    shape, S = SHAPE, SEEDS
    tg = torch.Generator().manual_seed(12345)
    ng = np.random.default_rng(12345)
    fns = {
        "torch float32 (torch.randn: mt19937, vectorised Box-Muller)": lambda: [
            standard_normal(shape, tg, torch.float32) for _ in range(S)
        ],
        "numpy float32 (PCG64, ziggurat)": lambda: [
            torch.from_numpy(ng.standard_normal(shape, dtype=np.float32)) for _ in range(S)
        ],
        "torch float64 (data.standard_normal: mt19937, Box-Muller)": lambda: [
            standard_normal(shape, tg, torch.float64) for _ in range(S)
        ],
        "numpy float64 (PCG64, ziggurat)": lambda: [torch.from_numpy(ng.standard_normal(shape)) for _ in range(S)],
    }
    for fn in fns.values():
        fn()
    ts = timed_blocks(fns, max(args.repeats * 4, 8))
    n_values = S * 10 * 10 * 1024
    N = 1 << (20 if args.quick else 22)
    samples = {
        "torch float32 (torch.randn: mt19937, vectorised Box-Muller)": standard_normal((N,), tg, torch.float32).numpy(),
        "numpy float32 (PCG64, ziggurat)": ng.standard_normal(N, dtype=np.float32),
        "torch float64 (data.standard_normal: mt19937, Box-Muller)": standard_normal((N,), tg, torch.float64).numpy(),
        "numpy float64 (PCG64, ziggurat)": ng.standard_normal(N),
    }
    fastest = min(ts, key=lambda k: min(ts[k]))
    for name in fns:
        best, med = min(ts[name]), statistics.median(ts[name])
        x = samples[name].astype(np.float64)
        m, v = x.mean(), x.var()
        sk, ku = stats.skew(x), stats.kurtosis(x)
        ks = stats.kstest(x, "norm")
        # 5 standard errors for the moments of N(0, 1); KS at the 0.001 level
        ok = (
            abs(m) < 5 / N**0.5
            and abs(v - 1) < 5 * (2 / N) ** 0.5
            and abs(sk) < 5 * (6 / N) ** 0.5
            and abs(ku) < 5 * (24 / N) ** 0.5
            and ks.pvalue > 1e-3
        )
        table.add(
            "generator",
            name,
            best / n_values * 1e9,
            "ns/value",
            ratio="PASS" if ok else "FAIL",
            note=f"median {med / n_values * 1e9:.2f}; N={N}: mean {m:+.1e}, var-1 {v - 1:+.1e}, "
            f"skew {sk:+.1e}, ex.kurt {ku:+.1e}, KS D {ks.statistic:.1e} p {ks.pvalue:.2f}, "
            f"max|z| {abs(x).max():.2f}" + ("; fastest" if name == fastest else ""),
        )
    return []
