"""A standard multi-head softmax transformer on the D tokens, trained by AdamW."""

from __future__ import annotations

from ._shared import NET, log_grid, net_problem, net_recorded, net_steps

FAMILY = "baseline"
DESCRIPTION = "standard multi-head softmax transformer, AdamW"
DEFAULTS = {"width": 32, "heads": 4, "layers": 2, "ff_width": 64, "positions": "learned", **NET}
# AdamW learning rate: with a first grid 1e-4 .. 1e-2 on the base task it chose the upper edge
# 1e-2 at every n >= 512 (below n = 512 it is at chance whatever the rate): 1e-3 .. 1e-1, three
# points (its fits dominate the cost).
GRID = {"lr": log_grid(-3, -1, 1)}
CHOICES = {"positions": ("learned", "sine")}
MAY_BE_ZERO = {"weight_decay"}
LIBRARY = "torch_net"  # a torch net trained by AdamW (its autograd state counts in memory)
COSTS_LIKE = "std_transformer"
recorded = net_recorded


def problem(hp: dict) -> str | None:
    if hp["width"] % hp["heads"]:
        return f"heads: must divide width, got width {hp['width']}, heads {hp['heads']}"
    return net_problem(hp)


def work(n, n_eval, seeds, d, D, m, hp) -> tuple:
    batch, steps = net_steps(n, hp)
    h, ff, layers = hp["width"], hp["ff_width"], hp["layers"]  # per token: embedding, projections, FF, scores
    per = D * (d * h + layers * (4 * h * h + 2 * h * ff + 2 * D * h))
    return steps, seeds * steps * batch * per, seeds * n_eval * per


def fit(*args, **kwargs):
    from ..baselines import fit_std_transformer

    return fit_std_transformer(*args, **kwargs)
