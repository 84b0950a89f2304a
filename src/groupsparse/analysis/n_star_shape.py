"""The shape of n* over the (d, D) grid, worded from the fitted exponents (docs/STUDY.md section 4.7).

The joint fit log n* = c + a log d + b log D gives (a, b) with intervals. What d + D or d D would give
on *this* grid is computed, not assumed: the same log-linear model is fitted to n* = C (d + D) and to
n* = C d D over the grid's points, globally and on every 2 x 2 block of neighbouring levels (the
local exponents; d + D has a = d / (d + D) locally, so its fits spread over a range); a shape's
region is the box spanned by those fits (C moves only the intercept). d D gives exactly (1, 1).

A fit's (a, b) meets a region when both coordinates' two-sided 95% intervals overlap the region's
ranges. The verdict on "n* grows like <shape>" (:func:`.stats.region_verdict`): holds when the
intervals meet that shape's region and exclude the other's, does not hold when they exclude it,
inconclusive when they meet both (or the fit is blocked). The wording names what the intervals do
show, e.g. "n* grows like d and not with D" when a's interval holds 1, b's holds 0 and the d + D
region is excluded.
"""

from __future__ import annotations

import math

import numpy as np

from .rows import claim_row
from .sample_complexity import uses_pretraining
from .settings import Settings
from .statements import About, grid_text
from .stats import CONFIDENCE, region_verdict

SHAPES = {"d + D": lambda d, D: d + D, "d D": lambda d, D: d * D}


def _exponents(points: list[tuple[int, int]], shape) -> tuple[float, float]:
    X = np.array([[1.0, math.log(d), math.log(D)] for d, D in points])
    y = np.log([shape(d, D) for d, D in points])
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    return float(beta[1]), float(beta[2])


def shape_region(points: list[tuple[int, int]], shape) -> tuple[float, float, float, float]:
    """(a_low, a_high, b_low, b_high): the box of (a, b) the log-linear fit gives for n* = C shape(d, D)
    over the grid's points and over each 2 x 2 block of neighbouring levels."""
    ds, Ds = sorted({d for d, _ in points}), sorted({D for _, D in points})
    have = set(points)
    fits = [_exponents(points, shape)]
    for i in range(len(ds) - 1):
        for j in range(len(Ds) - 1):
            block = [(d, D) for d in ds[i : i + 2] for D in Ds[j : j + 2]]
            if all(p in have for p in block):
                fits.append(_exponents(block, shape))
    a, b = np.array(fits).T
    return float(a.min()), float(a.max()), float(b.min()), float(b.max())


def _contains(lo: float, hi: float, v: float) -> bool:
    return lo <= v <= hi


def wording(a: tuple[float, float], b: tuple[float, float], meets: dict[str, bool]) -> str:
    """What the intervals of a and b show against the shapes' regions."""
    plus, times = meets["d + D"], meets["d D"]
    if plus and times:
        return "the intervals cannot tell d + D from d D"
    if plus:
        return "n* grows like d + D, not like d D"
    if times:
        return "n* grows like d D, not like d + D"
    if _contains(*a, 1.0) and _contains(*b, 0.0):
        return "n* grows like d and not with D (neither d + D nor d D)"
    if _contains(*a, 0.0) and _contains(*b, 1.0):
        return "n* grows like D and not with d (neither d + D nor d D)"
    return "n* grows like neither d + D nor d D"


def shape_claims(records, s: Settings) -> list[dict]:
    """One row per n* fit with a theory (pretrained methods: d + D; logistic regression: d D), on the
    verdict form ``s.n_star_form``."""
    rows = []
    for r in records:
        if r.analysis != "sample_complexity" or r.group["form"] != s.n_star_form:
            continue
        g, f = r.group, r.fit
        pts = [(int(d), int(D)) for d, D in zip(r.points["d"], r.points["D"])]
        regions = {name: shape_region(pts, shape) for name, shape in SHAPES.items()}
        ca, cb = f.coefficient("log d"), f.coefficient("log D")
        a, b = (ca.low, ca.high), (cb.low, cb.high)
        expected = "d + D" if uses_pretraining(g["method"]) else "d D" if g["method"] == "logreg" else None
        if expected is None:
            continue  # no theory for the method: its (a, b) are in the fits table, no claim
        v, meets = region_verdict(a, b, regions, expected, blocker=f.blocker())
        text = wording(a, b, meets) if all(map(np.isfinite, (*a, *b))) else "no interval"
        box = "; ".join(
            f"{name} region a in [{lo:.2f}, {hi:.2f}], b in [{blo:.2f}, {bhi:.2f}]"
            for name, (lo, hi, blo, bhi) in regions.items()
        )
        about = About(
            subject=str(g["method"]),
            law=expected,
            downstream=str(g["downstream"]),
            target=float(g["threshold"]),
            form=str(g["form"]),
            D_grid=grid_text(sorted({D for _, D in pts})),
            replicates=float(f.seeds.min()) if f.seeds.size else math.nan,
            exponent_b=cb.value,
            exponent_b_low=cb.low,
            exponent_b_high=cb.high,
            regions=box,
        )
        row = claim_row(
            "n_star_shape",
            about,
            None,
            ca.value,
            ca.low,
            ca.high,
            "",
            f"a = {ca.value:.3g} [{ca.low:.3g}, {ca.high:.3g}], b = {cb.value:.3g} [{cb.low:.3g}, {cb.high:.3g}] "
            f"(two-sided {CONFIDENCE:.0%}); {box}; levels {'; '.join(f.names)}",
            int(f.seeds[f.used].sum()) if f.used.any() else 0,
            "pretrained: n* ~ d + D (the downstream bound); logistic regression on vec(X): n* ~ d D",
        )
        row["prediction"], row["prediction_kind"] = f"(a, b) in the {expected} region", "region"
        row["verdict"] = v
        row["why"] = (f.blocker() + "; " if f.blocker() else "") + text
        rows.append(row)
    return rows
