"""The paper's model from its initialisation, fitted by online SGD."""

from __future__ import annotations

from ._shared import ETA_REL, SGD, sgd_work

FAMILY = "baseline"
DESCRIPTION = "the paper's model from its init, online SGD"
ONLINE = True
DEFAULTS = dict(SGD)
GRID = {"eta_rel": ETA_REL}
MAY_BE_NULL = {"eta_rel"}
LIBRARY = "torch"  # the paper's model in torch (cost model: runs on the job's device)
COSTS_LIKE = "scratch_transformer"
work = sgd_work


def fit(*args, **kwargs):
    from ..paper_model import fit_scratch_transformer

    return fit_scratch_transformer(*args, **kwargs)
