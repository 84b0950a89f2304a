"""skglm group-lasso logistic regression on vec(X), the D groups of d features."""

from __future__ import annotations

from ._shared import linear_work, log_grid

FAMILY = "baseline"
DESCRIPTION = "skglm group-lasso logistic regression on vec(X), D groups"
# alpha = alpha_scale * universal threshold sigma (sqrt(d) + sqrt(2 log D)) / (2 sqrt(n)): the size
# of the largest pure-noise group gradient at w = 0 (baselines.group_lasso_alpha explains)
DEFAULTS = {"alpha_scale": 1.0, "solver": "GroupProxNewton", "tol": 1e-6, "max_iter": 1000}
GRID = {"alpha_scale": log_grid(-2, 0.5)}  # 0.01 .. 3 x the universal threshold
CHOICES = {"solver": ("GroupBCD", "GroupProxNewton")}
LIBRARY = "skglm"  # skglm (numba, compiled once per job), with scikit-learn: on the CPU
COSTS_LIKE = "group_lasso"
work = linear_work


def fit(*args, **kwargs):
    from ..baselines import fit_group_lasso

    return fit_group_lasso(*args, **kwargs)


def warm_up(settings: list[dict]) -> None:
    """Compile skglm's numba kernels once per job (for each solver the job may use), so that
    fit_seconds exclude compilation."""
    from ..baselines import warm_up_group_lasso

    warm_up_group_lasso(tuple(sorted({hp["solver"] for hp in settings})))
