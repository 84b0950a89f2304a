"""Pretrained W frozen; L2 logistic regression on the m features u(X) = Z S 1."""

from __future__ import annotations

from ._shared import C_DEFAULTS, C_GRID

FAMILY = "pretrained"
DESCRIPTION = "pretrained W frozen; L2 logistic regression on u(X) = Z S 1"
# scikit-learn LogisticRegression (L2, lbfgs, intercept) on u(X) = Z S 1 at the pretrained W
DEFAULTS = dict(C_DEFAULTS)
GRID = {"C": C_GRID}
LIBRARY = "torch"  # the paper's model in torch (cost model: runs on the job's device)
COSTS_LIKE = "logreg"  # a logistic regression on m features plus the model's forward pass


def work(n, n_eval, seeds, d, D, m, hp) -> tuple:
    forward = D * m * (m + D)  # u(X) = Z S 1 by the forward pass
    return seeds, seeds * n * (m + forward), seeds * n_eval * (m + forward)


def fit(*args, **kwargs):
    from ..paper_model import fit_pretrained_probe

    return fit_pretrained_probe(*args, **kwargs)
