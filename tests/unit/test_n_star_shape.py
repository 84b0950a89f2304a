"""The shape of n* over the (d, D) grid (analysis/n_star_shape.py): the regions d + D and d D give on the
grid, the verdict and its wording from the fitted exponents' intervals, each able to fail."""

from __future__ import annotations

import pytest

from groupsparse.analysis.n_star_shape import SHAPES, shape_region, wording
from groupsparse.analysis.stats import region_verdict

GRID = [(d, D) for d in (5, 10, 20) for D in (4, 6, 8, 12, 16)]  # the default study's grid


def test_regions_on_the_grid():
    alo, ahi, blo, bhi = shape_region(GRID, SHAPES["d + D"])
    # d + D is d / (d + D), D / (d + D) locally: between the grid's extremes, and a + b near 1
    assert 5 / 21 < alo < 0.5 < ahi < 20 / 24 and 4 / 24 < blo < 0.5 < bhi < 16 / 21
    assert shape_region(GRID, SHAPES["d D"]) == pytest.approx((1.0, 1.0, 1.0, 1.0))


REGIONS = {name: shape_region(GRID, f) for name, f in SHAPES.items()}


@pytest.mark.parametrize(
    "a, b, expected, verdict, words",
    [
        # the probe: a = 1.05 [0.85, 1.25], b = -0.11 [-0.32, 0.10]
        ((0.85, 1.25), (-0.32, 0.10), "d + D", "does not hold", "n* grows like d and not with D"),
        ((0.40, 0.60), (0.35, 0.55), "d + D", "holds", "n* grows like d + D, not like d D"),
        ((0.40, 1.10), (0.35, 1.05), "d + D", "inconclusive", "cannot tell"),
        ((0.80, 1.20), (0.85, 1.10), "d D", "holds", "n* grows like d D, not like d + D"),
        ((0.80, 1.20), (0.85, 1.10), "d + D", "does not hold", "n* grows like d D"),
    ],
)
def test_verdict_and_wording(a, b, expected, verdict, words):
    v, meets = region_verdict(a, b, REGIONS, expected)
    assert v == verdict
    assert words in wording(a, b, meets)


def test_a_blocked_fit_is_inconclusive():
    assert region_verdict((0.4, 0.6), (0.4, 0.5), REGIONS, "d + D", blocker="1 level(s) censored")[0] == (
        "inconclusive"
    )
