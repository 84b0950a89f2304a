"""A torch ReLU MLP on vec(X), trained by AdamW."""

from __future__ import annotations

from ._shared import NET, log_grid, net_problem, net_recorded, net_steps

FAMILY = "baseline"
DESCRIPTION = "torch ReLU MLP on vec(X), AdamW"
DEFAULTS = {"width": 128, "depth": 2, **NET}
# AdamW learning rate, whole decades (the nets are the costly fits). With a first grid 1e-4 .. 1e-2
# on the base task the MLP chose the lower edge 1e-4 at n <= 256: its grid starts at 1e-5.
GRID = {"lr": log_grid(-5, -2, 1)}
MAY_BE_ZERO = {"weight_decay"}
LIBRARY = "torch_net"  # a torch net trained by AdamW (its autograd state counts in memory)
COSTS_LIKE = "mlp"
recorded = net_recorded
problem = net_problem


def work(n, n_eval, seeds, d, D, m, hp) -> tuple:
    batch, steps = net_steps(n, hp)
    w, depth = hp["width"], hp["depth"]
    per = D * d * w + (depth - 1) * w * w + w
    return steps, seeds * steps * batch * per, seeds * n_eval * per


def fit(*args, **kwargs):
    from ..baselines import fit_mlp

    return fit_mlp(*args, **kwargs)
