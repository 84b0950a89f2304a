"""pretrained W, v reset to 0; all fine-tuned by online SGD."""

from __future__ import annotations

from ._shared import ETA_REL, SGD, sgd_work

FAMILY = "pretrained"
DESCRIPTION = "pretrained W, v reset to 0; all fine-tuned by online SGD"
ONLINE = True
THEORY = False
# v_start: "pretrained" (the paper's protocol) | "zero" (a fresh read-out, as in head re-initialisation)
DEFAULTS = dict(SGD, v_start="zero")
GRID = {"eta_rel": ETA_REL}
CHOICES = {"v_start": ("pretrained", "zero")}
MAY_BE_NULL = {"eta_rel"}
LIBRARY = "torch"  # the paper's model in torch (cost model: runs on the job's device)
COSTS_LIKE = "pretrained_finetune"
work = sgd_work


def fit(*args, **kwargs):
    from ..paper_model import fit_pretrained_finetune

    return fit_pretrained_finetune(*args, **kwargs)
