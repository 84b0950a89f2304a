"""scikit-learn L2 logistic regression on vec(X)."""

from __future__ import annotations

from ._shared import C_DEFAULTS, C_GRID, linear_work

FAMILY = "baseline"
DESCRIPTION = "scikit-learn L2 logistic regression on vec(X)"
DEFAULTS = dict(C_DEFAULTS)
GRID = {"C": C_GRID}
LIBRARY = "sklearn"  # scikit-learn: on the CPU whatever the device
COSTS_LIKE = "logreg"
work = linear_work


def fit(*args, **kwargs):
    from ..baselines import fit_logreg

    return fit_logreg(*args, **kwargs)
