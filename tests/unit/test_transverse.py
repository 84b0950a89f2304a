"""Transverse stability (model/sectors.py, training/transverse.py, `groupsparse transverse`): the sectors
partition the parameter space orthogonally, the Hessian-vector products are the package loss's, the
gauge directions change nothing, the measured zero-start eigenvalues match theory within Monte Carlo
error (and the whole Hessian's is not D / 4), and the reported growth factor is a real GD step's."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from groupsparse import cli
from groupsparse.config.specs import TaskSpec
from groupsparse.data.kinds import make_task
from groupsparse.model import population, sectors
from groupsparse.training import transverse

D_SMALL, d_SMALL = 4, 3


def small_task(d=d_SMALL, D=D_SMALL):
    return make_task(TaskSpec(d=d, D=D), 7, "test transverse", d, D)


def projector_matrix(secs, sector):
    n = secs.m * secs.m + secs.m
    eye = torch.eye(n, dtype=torch.float64)
    return torch.stack([secs.project(sector, eye[i]) for i in range(n)], 1)


def random_subspace_point(task, gen):
    coef = 0.5 * torch.randn(population.N_COEF, generator=gen, dtype=torch.float64)
    P = sectors.frame(task.v_star, task.spec.D)[task.spec.d :, task.spec.d :]
    W, v = population.build(coef, task.v_star, task.j_star, P, torch.float64)
    return coef, sectors.flatten(W, v)


def test_the_sectors_are_orthogonal_projectors_that_sum_to_the_identity():
    task = small_task()
    secs = sectors.Sectors(task.v_star, task.j_star, D_SMALL)
    mats = {k: projector_matrix(secs, k) for k in sectors.SECTORS}
    n = secs.m * secs.m + secs.m
    total = torch.zeros(n, n, dtype=torch.float64)
    for k, M in mats.items():
        assert torch.allclose(M, M.T, atol=1e-12), f"{k}: not symmetric"
        assert torch.allclose(M @ M, M, atol=1e-12), f"{k}: not idempotent"
        assert round(float(torch.trace(M))) == secs.dimension(k), k
        for other, N in mats.items():
            if other != k:
                assert float((M @ N).abs().max()) < 1e-12, f"{k} and {other} overlap"
        total += M
    assert torch.allclose(total, torch.eye(n, dtype=torch.float64), atol=1e-12)


def test_a_point_of_the_invariant_subspace_lies_in_the_subspace_and_gauge_sectors():
    task = small_task()
    secs = sectors.Sectors(task.v_star, task.j_star, D_SMALL)
    coef, theta = random_subspace_point(task, torch.Generator().manual_seed(1))
    inside = secs.project("subspace", theta) + secs.project("gauge", theta)
    assert torch.allclose(inside, theta, atol=1e-12)
    for k in sectors.TRANSVERSE:
        assert float(secs.project(k, theta).norm()) < 1e-12, k
    W, v = sectors.unflatten(theta, secs.m)
    P = secs.R[secs.d :, secs.d :]
    assert torch.allclose(population.coefficients(W, v, task.v_star, task.j_star, P), coef, atol=1e-12)


def a_sample(task, pairs, seed):
    X, y = task.sample_inner(2 * pairs, torch.Generator().manual_seed(seed), antithetic=True, dtype=torch.float64)
    return sectors.SampleLoss(X, y)


def test_the_closed_form_hessian_vector_product_is_autograds():
    task = small_task()
    loss = a_sample(task, 64, 2)
    gen = torch.Generator().manual_seed(3)
    n = loss.m * loss.m + loss.m
    theta = 0.3 * torch.randn(n, generator=gen, dtype=torch.float64)
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    exact = loss.hvp_autograd(theta, x)
    assert float((loss.hvp(theta, x) - exact).norm() / exact.norm()) < 1e-6
    # the closed-form gradient is the autograd model's too
    t = theta.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(loss.autograd_loss(t), t)
    assert torch.allclose(loss.gradient(theta), g, atol=1e-12)


def test_gauge_directions_change_no_output():
    task = small_task()
    secs = sectors.Sectors(task.v_star, task.j_star, D_SMALL)
    loss = a_sample(task, 64, 4)
    gen = torch.Generator().manual_seed(5)
    n = secs.m * secs.m + secs.m
    theta = 0.3 * torch.randn(n, generator=gen, dtype=torch.float64)
    x = secs.random("gauge", gen)
    assert abs(loss.loss_and_gradient(theta + 0.7 * x)[0] - loss.loss_and_gradient(theta)[0]) < 1e-12
    assert float(loss.hvp(theta, x).norm()) < 1e-7
    # a transverse direction does change the loss (the check above can fail)
    y = secs.random("pos_perm", gen)
    assert abs(loss.loss_and_gradient(theta + 0.7 * y)[0] - loss.loss_and_gradient(theta)[0]) > 1e-4


def test_an_antithetic_sample_keeps_the_odd_sectors_apart_on_the_subspace():
    """X -> -X is exact for an antithetic sample: at a subspace point H maps an odd perturbation to odd ones."""
    task = small_task()
    secs = sectors.Sectors(task.v_star, task.j_star, D_SMALL)
    loss = a_sample(task, 256, 6)
    gen = torch.Generator().manual_seed(7)
    _, theta = random_subspace_point(task, gen)
    Hx = loss.hvp(theta, secs.random("odd_along", gen))
    odd = secs.project("odd_along", Hx) + secs.project("odd_across", Hx) + secs.project("gauge", Hx)
    assert float((Hx - odd).norm()) < 1e-8 * float(Hx.norm())
    assert float(secs.project("odd_along", Hx).norm()) > 1e-3 * float(Hx.norm())


def test_lanczos_finds_the_extremes_of_a_known_matrix():
    values = torch.linspace(-1.5, 4.0, 30, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(30, 30, generator=torch.Generator().manual_seed(8), dtype=torch.float64))
    A = Q @ torch.diag(values) @ Q.T
    ritz, vecs = sectors.lanczos(lambda x: A @ x, torch.ones(30, dtype=torch.float64), 30)
    assert abs(float(ritz[0]) + 1.5) < 1e-10 and abs(float(ritz[-1]) - 4.0) < 1e-10
    assert torch.allclose(A @ vecs[:, 0], ritz[0] * vecs[:, 0], atol=1e-8)


def test_the_zero_start_eigenvalues_match_theory_within_monte_carlo_error():
    """v-block: D / 4; the whole Hessian: the W-v coupling lifts it above D / 4, by many standard errors at D = 4."""
    row = transverse.zero_start_row(d_SMALL, D_SMALL, 8192, 30, 11, "test zero start")
    assert abs(row["vblock_top"] - D_SMALL / 4) < 4 * row["vblock_se"]
    assert abs(row["top"] - row["predicted_top"]) < 4 * row["top_se"]
    assert row["top"] - D_SMALL / 4 > 4 * row["top_se"]
    assert row["predicted_top"] > D_SMALL / 4 and row["eta_edge"] < 8 / D_SMALL


def test_the_reported_growth_factor_is_one_gradient_step_of_a_perturbation():
    """On a sector small enough for Lanczos to be exact, the Ritz pair's 1 - eta lambda is the factor by which
    one full-gradient GD step (the package's closed form, no projection) scales a tiny perturbation there."""
    task = small_task(d=2, D=3)
    secs = sectors.Sectors(task.v_star, task.j_star, 3)
    loss = a_sample(task, 512, 9)
    gen = torch.Generator().manual_seed(10)
    _, theta = random_subspace_point(task, gen)
    eta, eps = 0.5, 1e-6
    for k in ("v1_across", "odd_along", "pos_perm"):

        def project(x, k=k):
            return secs.project(k, x)

        ritz, vecs = sectors.lanczos(lambda x, p=project: p(loss.hvp(theta, p(x))), secs.random(k, gen), 40)
        for idx in (0, -1):
            q = project(vecs[:, idx])
            q = q / q.norm()
            moved = (theta + eps * q - eta * loss.gradient(theta + eps * q)) - (theta - eta * loss.gradient(theta))
            factor = float(project(moved) @ q) / eps
            assert abs(factor - (1 - eta * float(ritz[idx]))) < 1e-4, (k, idx)


def test_the_command_writes_the_table(tmp_path):
    out, hess, carried = tmp_path / "transverse_by_D.csv", tmp_path / "hessian.csv", tmp_path / "carried.csv"
    argv = ["transverse", "--d", "3", "--D", "4", "--samples", "64", "--iters", "6", "--hessian-samples", "256"]
    argv += ["--max-steps", "40", "--propagation-out", str(carried)]
    assert cli.main(argv + ["--out", str(out), "--hessian-out", str(hess)]) == 0
    steps = pd.read_csv(carried)
    assert set(steps["sector"]) == set(sectors.TRANSVERSE) and steps["step"].max() == 40
    assert (steps[steps["step"] == 0]["log_growth"] == 0).all() and steps["log_growth"].notna().all()
    table = pd.read_csv(out)
    assert set(table["sector"]) == {"subspace", *sectors.TRANSVERSE}
    assert table["flow_time"].min() == 0 and table["flow_time"].max() == pytest.approx(0.5 * 40)
    assert table[["lam_min", "lam_max", "rho_step"]].notna().all().all()
    assert math.isclose(pd.read_csv(hess)["D_over_4"].iloc[0], 1.0)


def test_the_command_names_a_bad_sample_count(tmp_path):
    argv = ["transverse", "--d", "3", "--D", "4", "--samples", "60", "--max-steps", "4"]
    assert cli.main(argv + ["--out", str(tmp_path / "x.csv")]) != 0
    assert not (tmp_path / "x.csv").exists()
