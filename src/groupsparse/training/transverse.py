"""Transverse stability of population gradient descent, and the zero start's top Hessian eigenvalue
(docs/STUDY.md section 3.6), measured on fixed Monte Carlo samples with the closed-form gradient's
Hessian-vector products (``model.sectors``).

Gradient descent's linearised map is I - eta H. Along the projected trajectory the population Hessian
maps each symmetry sector into itself, so a transverse perturbation in sector k grows per step by
rho_k = max |1 - eta lambda| over H's eigenvalues lambda on the sector: a negative eigenvalue (a
direction in which the loss curves down) grows at -lambda per unit flow time; an eigenvalue above
2 / eta grows by oscillation. Each extreme eigenvalue is found by Lanczos on sample A and checked on
an independent sample B: the Ritz vector's Rayleigh quotient there (mean and standard error over
``CHUNKS`` equal parts) bounds the extreme from inside (x^T H x >= lambda_min for a unit x), while A's
Ritz value is pushed outward by A's noise. Growth is reported only where the bound from inside shows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..config.seeding import torch_generator
from ..config.specs import RunSpec, TaskSpec
from ..data.kinds import make_task
from ..model import population, sectors

KAPPA = math.sqrt(2.0 / math.pi)  # E|g| for a standard normal g: E[y x_j*] = KAPPA v*
CHUNKS = 8  # parts of sample B, for the standard error of a Rayleigh quotient
Z_BOUND = 2.0  # a growth is reported where the inside bound clears it by this many standard errors


def zero_start_eigenvalues(D: int) -> tuple[float, float]:
    """The population Hessian's top eigenvalue at W = 0, v = 0: of its v-block (D / 4) and of the whole.

    At the zero start the W-block is 0 and the v-block is E[u u^T] / 4 (u = Z^T 1), but the W-v block
    is not: dL/dv_c dW_ab = -E[y sum_i z_i[c] dr_i/dW_ab] / 2 with dr_i/dW = (z_i - zbar) u^T / D, which
    couples v's features across v* to W's feature block with strength s = KAPPA (1 - 1/D) / 2 (the term
    E[y x_j*] summed over the D - 1 other groups). The whole Hessian's top eigenvalue is then the larger
    root of lambda^2 - (D / 4) lambda - s^2 = 0, multiplicity d - 1 (docs/STUDY.md section 3.6)."""
    s = KAPPA * (1.0 - 1.0 / D) / 2.0
    return D / 4.0, D / 8.0 + math.sqrt(D * D / 64.0 + s * s)


@dataclass(frozen=True)
class Extreme:
    """One extreme eigenvalue: A's Ritz value, the Ritz vector's Rayleigh quotient on B and its standard error."""

    ritz: float
    inside: float
    se: float


def samples(task, n_pairs: int, *identity) -> tuple[sectors.SampleLoss, list[sectors.SampleLoss]]:
    """Samples A and B (``n_pairs`` antithetic pairs each, float64) and B's chunks, from hashed generators."""
    if n_pairs % CHUNKS or n_pairs <= 0:
        raise ValueError(f"--samples must be a positive multiple of {CHUNKS} (sample B's chunks), got {n_pairs}")
    drawn = []
    for part in ("A", "B"):
        gen = torch_generator(*identity, "transverse sample", part)
        X, y = task.sample_inner(2 * n_pairs, gen, antithetic=True, dtype=torch.float64)
        drawn.append(sectors.SampleLoss(X, y))
    return drawn[0], drawn[1].chunks(CHUNKS)


def extremes(loss_a, chunks_b, theta, project, start: torch.Tensor, iters: int) -> tuple[Extreme, Extreme]:
    """The smallest and largest eigenvalue of the Hessian at ``theta`` restricted to ``project``'s range."""
    values, vectors = sectors.lanczos(lambda x: project(loss_a.hvp(theta, project(x))), project(start), iters)
    found = []
    for idx in (0, -1):
        q = project(vectors[:, idx])
        q = q / q.norm()
        r = torch.tensor([c.quadratic(theta, q) for c in chunks_b], dtype=torch.float64)
        found.append(Extreme(float(values[idx]), float(r.mean()), float(r.std() / math.sqrt(len(r)))))
    return found[0], found[1]


def zero_start_row(d: int, D: int, n_pairs: int, iters: int, *identity) -> dict:
    """The measured top eigenvalue of the whole Hessian and of its v-block at the zero start, against theory."""
    task = make_task(TaskSpec(d=d, D=D), *identity)
    loss_a, chunks_b = samples(task, n_pairs, *identity, "zero start")
    m = d + D
    n_par = m * m + m
    theta = torch.zeros(n_par, dtype=torch.float64)
    gen = torch_generator(*identity, "zero start lanczos")

    def v_only(x):
        out = torch.zeros_like(x)
        out[m * m :] = x[m * m :]
        return out

    start = torch.randn(n_par, generator=gen, dtype=torch.float64)
    _, full = extremes(loss_a, chunks_b, theta, lambda x: x, start, iters)
    start = torch.randn(n_par, generator=gen, dtype=torch.float64)
    _, vblock = extremes(loss_a, chunks_b, theta, v_only, start, min(m, iters))
    quarter, whole = zero_start_eigenvalues(D)
    return {
        "d": d,
        "D": D,
        "sample_pairs": n_pairs,
        "D_over_4": quarter,
        "predicted_top": whole,
        "vblock_ritz": vblock.ritz,
        "vblock_top": vblock.inside,
        "vblock_se": vblock.se,
        "top_ritz": full.ritz,
        "top": full.inside,
        "top_se": full.se,
        "eta_edge": 2.0 / whole,  # gradient descent is linearly stable at the zero start only below this
    }


def trajectory_states(spec: RunSpec, seed: int, flow_times: list[float]):
    """The projected trajectory's coefficients (float64) nearest below each flow time, the task and the eta:
    one run of the study's population mode (``pretrain.gradient: population``)."""
    from .pretrain import Trainer

    trainer = Trainer(spec, [seed])
    traj = trainer.run().trajectory
    coef_cols = [f"pop_{c}" for c in population.COEFFICIENTS]
    states = []
    for tau in flow_times:
        before = traj[traj["flow_time"] <= tau + 1e-9]
        row = before.iloc[-1]
        coef = torch.tensor(row[coef_cols].to_numpy(dtype=float), dtype=torch.float64)
        states.append((int(row["step"]), float(row["flow_time"]), coef))
    return states, trainer.tasks[0], trainer.eta


def sector_rows(task, coef: torch.Tensor, eta: float, loss_a, chunks_b, iters: int, gen) -> list[dict]:
    """Per sector (the subspace's own and the transverse ones): its extreme eigenvalues at the subspace point
    ``coef``, the per-step growth factor they give at ``eta`` and whether the inside bounds show growth."""
    D = task.spec.D
    secs = sectors.Sectors(task.v_star, task.j_star, D)
    W, v = population.build(coef, task.v_star, task.j_star, secs.R[secs.d :, secs.d :], torch.float64)
    theta = sectors.flatten(W, v)
    rows = []
    for name in ("subspace", *sectors.TRANSVERSE):
        lo, hi = extremes(loss_a, chunks_b, theta, lambda x, k=name: secs.project(k, x), secs.random(name, gen), iters)
        rho = max(abs(1 - eta * lo.inside), abs(1 - eta * hi.inside))
        curves_down = lo.inside + Z_BOUND * lo.se < 0  # an x with x^T H x < 0 beyond its noise
        oscillates = eta * (hi.inside - Z_BOUND * hi.se) > 2
        rows.append(
            {
                "sector": name,
                "dim": secs.dimension(name),
                "lam_min_ritz": lo.ritz,
                "lam_min": lo.inside,
                "lam_min_se": lo.se,
                "lam_max_ritz": hi.ritz,
                "lam_max": hi.inside,
                "lam_max_se": hi.se,
                "eta_lam_max": eta * hi.inside,
                "rho_step": rho,
                "growth_per_flow_time": math.log(rho) / eta,
                "grows": bool(curves_down or oscillates),
                "how": "curves down" if curves_down else ("oscillates" if oscillates else ""),
            }
        )
    return rows


def checkpoint_flow_times(D: int, horizon: float) -> list[float]:
    """0 and D^3 x {1/64, 1/16, 1/4, 1, 2} up to ``horizon``, and the horizon itself."""
    times = [0.0] + [f * D**3 for f in (1 / 64, 1 / 16, 1 / 4, 1, 2) if f * D**3 < horizon]
    return times + [horizon]


def transverse_rows(spec: RunSpec, seed: int, n_pairs: int, iters: int, *identity) -> list[dict]:
    """The transverse table's rows for one D: every sector at every checkpoint of the projected trajectory."""
    D = spec.task.D
    eta = spec.pretrain.step_size(D)
    horizon = eta * spec.pretrain.steps
    states, task, eta = trajectory_states(spec, seed, checkpoint_flow_times(D, horizon))
    loss_a, chunks_b = samples(task, n_pairs, *identity, "trajectory")
    gen = torch_generator(*identity, "sector lanczos")
    rows = []
    for step, tau, coef in states:
        head = {"d": spec.task.d, "D": D, "eta": eta, "step": step, "flow_time": tau, "flow_time_per_D3": tau / D**3}
        head |= {f"pop_{c}": float(x) for c, x in zip(population.COEFFICIENTS, coef)}
        rows += [head | r for r in sector_rows(task, coef, eta, loss_a, chunks_b, iters, gen)]
    return rows


def propagated_rows(spec: RunSpec, seed: int, n_pairs: int, *identity) -> list[dict]:
    """A tiny perturbation per transverse sector carried along the projected trajectory by the linearised GD
    map of sample A, x <- Proj_k (x - eta H(theta_t) x), renormalised each step (its log growth summed):
    the growth the frozen-time rates of :func:`transverse_rows` stand for, measured step by step. One
    Hessian-vector product per sector and step: affordable for small D only."""
    from .pretrain import Trainer

    trainer = Trainer(spec, [seed])
    task, eta, D = trainer.tasks[0], trainer.eta, spec.task.D
    secs = sectors.Sectors(task.v_star, task.j_star, D)
    P = secs.R[secs.d :, secs.d :]
    loss_a, _ = samples(task, n_pairs, *identity, "propagation")
    gen = torch_generator(*identity, "propagation start")
    deltas = {k: secs.random(k, gen) for k in sectors.TRANSVERSE}
    logs = dict.fromkeys(deltas, 0.0)
    marks = set(checkpoint_flow_times(D, eta * spec.pretrain.steps))
    rows = []
    for step in range(spec.pretrain.steps + 1):
        tau = eta * step
        if any(abs(tau - t) < eta / 2 for t in marks) or step == spec.pretrain.steps:
            head = {"d": spec.task.d, "D": D, "eta": eta, "step": step, "flow_time": tau}
            rows += [head | {"sector": k, "log_growth": logs[k]} for k in deltas]
        if step == spec.pretrain.steps:
            break
        W, v = population.build(trainer.coef[0], task.v_star, task.j_star, P, torch.float64)
        theta = sectors.flatten(W, v)
        for k, x in deltas.items():
            x = secs.project(k, x - eta * loss_a.hvp(theta, x))
            norm = float(x.norm())
            logs[k] += math.log(norm)
            deltas[k] = x / norm
        trainer.rule.step()
    return rows
