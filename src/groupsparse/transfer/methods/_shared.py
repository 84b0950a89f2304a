"""What several method modules share: log grids, the online-SGD and AdamW defaults, their work."""

from __future__ import annotations

import math


def log_grid(low_exp: float, high_exp: float, per_decade: int = 2) -> list[float]:
    """10^low .. 10^high, `per_decade` points a decade (1, 3.16, 10, ... rounded to 1, 3, 10)."""
    k = round((high_exp - low_exp) * per_decade)
    out = []
    for i in range(k + 1):
        e = low_exp + i / per_decade
        base = 10.0 ** math.floor(e + 1e-9)
        frac = e - math.floor(e + 1e-9)
        out.append(float(f"{base * (3.0 if abs(frac - 0.5) < 1e-9 else 10.0**frac):.10g}"))
    return out


# The paper's fine-tuning protocol (online SGD, one sample per step, `passes` passes over the n
# samples), shared by the paper-model methods so that only the start differs. Step:
# eta_rel / mean_i |u(X_i)|^2 when eta_rel is set (scale-free: u(X) = Z S 1 = df/dv at the starting
# parameters, averaged over the samples being fitted; 1 / mean |u|^2 is the per-sample stability
# scale of the step in v), else the absolute eta. Rule "fixed" keeps the old protocol: absolute
# eta = 0.01 at every d, D and n (about the per-sample stability limit 2/L in v at d = D = 10 with
# attention on j*).
SGD = {"eta": 0.01, "eta_rel": None, "passes": 1}
# SGD step: 1e-3 .. 1e4 x the stability scale 1/mean|u|^2. Large relative steps are not unstable
# for the logistic loss (its gradient is bounded; sign(f) is scale-free): on the base task CV picked
# 3 .. 1e4 from the pretrained v (which must be overridden), 0.03 .. 300 from v = 0, and 0.01 at
# the lower edge for the scratch model at large n (a first grid from 0.01). Whole decades: 8 points
# (a 15-point half-decade grid cost about 2x more and moved n* little).
ETA_REL = log_grid(-3, 4, 1)
C_GRID = log_grid(-4, 4, 1)  # 1e-4 .. 1e4: 8 decades, 9 points
# scikit-learn's defaults (C = 1: L2 penalty |w|^2 / 2 against the summed loss), lbfgs given room to converge
C_DEFAULTS = {"C": 1.0, "max_iter": 1000}
# Torch nets: AdamW; minibatches of `batch`, steps = clamp(ceil(epochs * n / batch), min_steps, max_steps).
NET = {"lr": 1e-3, "weight_decay": 1e-2, "batch": 64, "epochs": 20, "min_steps": 200, "max_steps": 1000}


def sgd_work(n, n_eval, seeds, d, D, m, hp) -> tuple:
    """Online SGD on the paper's model: n * passes steps of one sample."""
    per = D * m * (m + D)
    steps = n * hp.get("passes", 1)
    return steps, seeds * steps * per, seeds * n_eval * per


def linear_work(n, n_eval, seeds, d, D, m, hp) -> tuple:
    """A convex fit on vec(X) (D d features), one solve per seed."""
    p = D * d
    return seeds, seeds * n * p, seeds * n_eval * p


def net_steps(n: int, hp: dict) -> tuple[int, int]:
    """(batch used, AdamW steps) of a net fit on n samples."""
    batch = min(hp["batch"], n)
    steps = math.ceil(hp["epochs"] * n / batch)
    return batch, max(hp["min_steps"], min(hp["max_steps"], steps))


def net_recorded(n: int, hp: dict) -> dict:
    """The settings a net's fit derives from n, recorded beside its hyperparameters."""
    batch, steps = net_steps(n, hp)
    return {"batch_used": batch, "steps": steps}


def net_problem(hp: dict) -> str | None:
    if hp["min_steps"] > hp["max_steps"]:
        return f"min_steps: must be <= max_steps ({hp['max_steps']}), got {hp['min_steps']}"
    return None
