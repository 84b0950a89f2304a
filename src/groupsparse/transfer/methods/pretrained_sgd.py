"""The paper's model fine-tuned from the pretraining checkpoint by online SGD: one method whose two
parameters form a grid, each named point a variant (a method name in configs and tables).

- ``train``: what SGD updates, "W_and_v" (every parameter) or "v" (W frozen at its pretrained value);
- ``v_start``: where v starts, "pretrained" (the checkpoint's v, along the old direction v*) or "zero"
  (a fresh read-out, as in head re-initialisation).

Our reading of the paper's protocol is (W_and_v, pretrained): the paper fine-tunes "the pretrained
transformer" and does not say that v is reset (docs/STUDY.md section 4.6).
"""

from __future__ import annotations

from ._shared import ETA_REL, SGD, sgd_work

FAMILY = "pretrained"
DESCRIPTION = "pretrained W, v; online SGD"
ONLINE = True
DEFAULTS = dict(SGD, train="W_and_v", v_start="pretrained")
GRID = {"eta_rel": ETA_REL}
CHOICES = {"train": ("W_and_v", "v"), "v_start": ("pretrained", "zero")}
MAY_BE_NULL = {"eta_rel"}
LIBRARY = "torch"  # the paper's model in torch (cost model: runs on the job's device)
COSTS_LIKE = "pretrained_finetune"
# The grid's four points by name. theory: held to the theory's d + D sample complexity
# (analysis.claims); the reset starts are the mechanism's controls, not the theory's protocol.
VARIANTS = {
    "pretrained_finetune": {
        "settings": {"train": "W_and_v", "v_start": "pretrained"},
        "description": "pretrained W, v; all fine-tuned by online SGD",
        "theory": True,
    },
    "pretrained_finetune_v0": {
        "settings": {"train": "W_and_v", "v_start": "zero"},
        "description": "pretrained W, v reset to 0; all fine-tuned by online SGD",
    },
    "pretrained_frozen_W": {
        "settings": {"train": "v", "v_start": "pretrained"},
        "description": "pretrained W frozen; v fine-tuned by online SGD",
        "theory": True,
        "costs_like": "pretrained_frozen_W",
    },
    "pretrained_frozen_W_v0": {
        "settings": {"train": "v", "v_start": "zero"},
        "description": "pretrained W frozen; v from 0 by online SGD",
        "costs_like": "pretrained_frozen_W",
    },
}
work = sgd_work


def fit(*args, **kwargs):
    from ..paper_model import fit_pretrained_sgd

    return fit_pretrained_sgd(*args, **kwargs)
