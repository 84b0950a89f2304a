"""The paper's transformer: positions, forward pass, closed-form and autograd gradients, the antithetic subspace."""

from __future__ import annotations

import math

import pytest
import torch

from groupsparse.config.specs import ModelSpec, RunSpec
from groupsparse.model.transformer import (
    embed,
    forward,
    init_params,
    logistic_loss,
    loss_and_grads_closed_form,
    sine_positions,
    token_width,
)
from groupsparse.training.pretrain import Trainer

from conftest import tiny_spec as tiny
from conftest import tiny_spec_dict as tiny_raw

pytestmark = pytest.mark.usefixtures("one_thread")


def random_tokens(spec: ModelSpec, S: int, B: int, d: int, D: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(S, B, D, d, generator=gen, dtype=torch.float64)
    y = torch.where(torch.rand(S, B, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0).double()
    return X, embed(X, spec), y, gen


# --- positions, embedding, shapes ------------------------------------------------------------


@pytest.mark.parametrize("D", [2, 3, 4, 10, 17])
def test_sine_positions_orthonormal_and_symmetric(D):
    P = sine_positions(D)
    assert P.shape == (D, D)
    torch.testing.assert_close(P @ P.T, torch.eye(D, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(P, P.T)
    k, j = D - 1, D // 2  # one entry against docs/STUDY.md's formula
    assert P[k, j].item() == pytest.approx(math.sqrt(2 / (D + 1)) * math.sin(math.pi * (k + 1) * (j + 1) / (D + 1)))


@pytest.mark.parametrize("d,D", [(3, 4), (5, 3), (1, 2)])
@pytest.mark.parametrize(
    "model",
    [{}, {"positions": "add"}, {"attention": "separate", "init": "random"}, {"layers": 2}, {"score_scale": "sqrt"}],
)
def test_embed_and_forward_shapes(d, D, model):
    spec = ModelSpec(**model)
    S, B = 2, 5
    X, Z, _, gen = random_tokens(spec, S, B, d, D)
    m = token_width(spec, d, D)
    assert Z.shape == (S, B, D, m)
    P = sine_positions(D)
    if spec.positions == "concat":
        assert m == d + D
        assert torch.equal(Z[..., :d], X)
        assert torch.equal(Z[..., d:], P.expand(S, B, D, D))  # token j carries p_j (column j of P)
    else:
        assert m == d
        q = torch.zeros(D, d, dtype=torch.float64)
        q[:, : min(d, D)] = P[:, : min(d, D)]
        assert torch.equal(Z, X + q)
    params = init_params(spec, S, m, [torch.Generator().manual_seed(s) for s in range(S)], torch.float64)
    f, attn = forward(params, Z, spec)
    assert f.shape == (S, B)
    assert attn.shape == (S, B, D, D)
    torch.testing.assert_close(attn.sum(-2), torch.ones(S, B, D, dtype=torch.float64))  # columns sum to 1


# --- the model against the paper's formula -----------------------------------------------------


@pytest.mark.parametrize("score_scale", ["none", "sqrt"])
def test_forward_equals_loop_over_paper_formula(score_scale):
    """f = sum_j v^T Z S[:, j], S = column softmax of Z^T W Z, Z the (d+D) x D matrix of columns z_j."""
    d, D, S, B = 3, 4, 2, 3
    spec = ModelSpec(score_scale=score_scale)
    X, Z, y, gen = random_tokens(spec, S, B, d, D)
    m = d + D
    W = 0.7 * torch.randn(S, m, m, generator=gen, dtype=torch.float64)  # not symmetric: catches W vs W^T
    v = torch.randn(S, m, generator=gen, dtype=torch.float64)
    f, attn = forward({"layer0.W": W, "v": v}, Z, spec)
    scale = 1 / math.sqrt(m) if score_scale == "sqrt" else 1.0
    for s in range(S):
        for b in range(B):
            Zmat = torch.zeros(m, D, dtype=torch.float64)
            for j in range(D):
                Zmat[:d, j] = X[s, b, j]
                for k in range(D):
                    Zmat[d + k, j] = math.sqrt(2 / (D + 1)) * math.sin(math.pi * (k + 1) * (j + 1) / (D + 1))
            scores = scale * (Zmat.T @ W[s] @ Zmat)
            total = 0.0
            for j in range(D):
                expo = [math.exp(scores[i, j].item()) for i in range(D)]
                column = [e / sum(expo) for e in expo]  # S[:, j]: query j's distribution over keys i
                for i in range(D):
                    assert attn[s, b, i, j].item() == pytest.approx(column[i], rel=1e-12, abs=1e-15)
                total += sum(column[i] * (v[s] @ Zmat[:, i]).item() for i in range(D))
            assert f[s, b].item() == pytest.approx(total, rel=1e-12, abs=1e-12)
    _, _, _, f_closed, attn_closed = loss_and_grads_closed_form(W, v, Z, y, scale)
    torch.testing.assert_close(f_closed, f, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(attn_closed, attn, rtol=1e-12, atol=1e-14)


# --- gradients ---------------------------------------------------------------------------


@pytest.mark.parametrize("score_scale", ["none", "sqrt"])
def test_closed_form_gradients_match_autograd(score_scale):
    d, D, S, B = 3, 4, 2, 16
    spec = ModelSpec(score_scale=score_scale)
    _, Z, y, gen = random_tokens(spec, S, B, d, D, seed=1)
    m = d + D
    W = 0.5 * torch.randn(S, m, m, generator=gen, dtype=torch.float64)
    v = torch.randn(S, m, generator=gen, dtype=torch.float64)
    params = {"layer0.W": W.clone().requires_grad_(True), "v": v.clone().requires_grad_(True)}
    f, _ = forward(params, Z, spec)
    loss = logistic_loss(f, y)
    gW_auto, gv_auto = torch.autograd.grad(loss.sum(), [params["layer0.W"], params["v"]])
    scale = 1 / math.sqrt(m) if score_scale == "sqrt" else 1.0
    loss_c, gW, gv, _, _ = loss_and_grads_closed_form(W, v, Z, y, scale)
    assert gW_auto.norm() > 1e-2 and gv_auto.norm() > 1e-2  # a point where the test means something
    torch.testing.assert_close(loss_c, loss.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gW, gW_auto, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(gv, gv_auto, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("score_scale", ["none", "sqrt"])
@pytest.mark.parametrize("sampling", ["antithetic", "iid"])
def test_trainer_closed_form_gradients_match_autograd(score_scale, sampling):
    """Whatever kernel the Trainer's closed-form path uses, at a random point it agrees with autograd."""
    raw = tiny_raw(model={"score_scale": score_scale}, pretrain={"batch": 32, "sampling": sampling}, dtype="float64")
    closed = Trainer(RunSpec.from_dict({**raw, "pretrain": {**raw["pretrain"], "gradient": "closed_form"}}), [0, 1])
    auto = Trainer(RunSpec.from_dict({**raw, "pretrain": {**raw["pretrain"], "gradient": "autograd"}}), [0, 1])
    gen = torch.Generator().manual_seed(3)
    point = {k: 0.5 * torch.randn(t.shape, generator=gen, dtype=torch.float64) for k, t in closed.parameters().items()}
    closed.rule.params, auto.rule.params = dict(point), dict(point)
    batch = closed.batches.batch()
    loss_c, grads_c = closed.rule.loss_and_grads(*batch)
    loss_a, grads_a = auto.rule.loss_and_grads(*batch)
    torch.testing.assert_close(loss_c, loss_a, rtol=1e-12, atol=1e-14)
    for k in grads_a:
        assert grads_a[k].norm() > 1e-2, k
        torch.testing.assert_close(grads_c[k], grads_a[k], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(
    "model",
    [
        {"init": "random"},
        {"positions": "add", "init": "random"},
        {"attention": "separate", "init": "random"},
        {"layers": 2, "init": "random"},
        {"score_scale": "sqrt", "init": "random"},
    ],
)
def test_autograd_forward_matches_finite_differences(model):
    spec = ModelSpec(**model, init_scale=0.5)
    spec.validate()
    d, D, S, B = 2, 3, 2, 4
    _, Z, y, _ = random_tokens(spec, S, B, d, D, seed=2)
    params = init_params(
        spec, S, token_width(spec, d, D), [torch.Generator().manual_seed(10 + s) for s in range(S)], torch.float64
    )
    names = list(params)

    def loss_of(*tensors):
        f, _ = forward(dict(zip(names, tensors)), Z, spec)
        return logistic_loss(f, y)

    inputs = tuple(params[n].clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


# --- the theory's invariants --------------------------------------------------------------


@pytest.mark.parametrize("gradient", ["closed_form", "autograd"])
def test_zero_init_first_gradient(gradient):
    """At W = 0, v = 0: u = v.z = 0, so dL/dW is exactly 0; attention is uniform, and
    -dL/dv1 = (1/2) mean_b y_b sum_j x_bj, whose mean is (1/2) sqrt(2/pi) sigma_x v*.
    Antithetic pairs make dL/dv2 vanish in exact arithmetic (rounding only)."""
    B, d, D = 32768, 4, 4
    trainer = Trainer(tiny(pretrain={"batch": B, "gradient": gradient}, dtype="float64"), [0, 1])
    loss, grads = trainer.rule.loss_and_grads(*trainer.batches.batch())
    torch.testing.assert_close(loss, torch.full_like(loss, math.log(2)), rtol=1e-15, atol=0)
    assert torch.equal(grads["layer0.W"], torch.zeros_like(grads["layer0.W"]))
    gv1, gv2 = grads["v"][:, :d], grads["v"][:, d:]
    assert gv2.abs().max() < 1e-15
    n = B // 2  # independent samples: each antithetic pair contributes the same term twice
    along = -(gv1 * trainer.recorder.v_star).sum(-1)
    across = (-gv1 - along[:, None] * trainer.recorder.v_star).norm(dim=-1)
    sd_along = 0.5 * math.sqrt((D - 2 / math.pi) / n)  # var of y <v*, sum_j x_j> is D - 2/pi
    sd_across = 0.5 * math.sqrt(D / n)  # per direction orthogonal to v*
    assert (along - 0.5 * math.sqrt(2 / math.pi)).abs().max() < 5 * sd_along
    assert across.max() < 5 * sd_across
    cos = along / gv1.norm(dim=-1)
    assert cos.min() > 0.99


def test_zero_init_iid_batch_moves_v2():
    """Contrast: without antithetic pairs the first v2 gradient is sampling noise, not 0."""
    trainer = Trainer(tiny(pretrain={"batch": 32768, "sampling": "iid"}, dtype="float64"), [0, 1])
    _, grads = trainer.rule.loss_and_grads(*trainer.batches.batch())
    assert torch.equal(grads["layer0.W"], torch.zeros_like(grads["layer0.W"]))
    assert grads["v"][:, 4:].norm(dim=-1).min() > 1e-4


@pytest.mark.parametrize("sampling", ["antithetic", "iid"])
@pytest.mark.parametrize("gradient", ["closed_form", "autograd"])
def test_antithetic_batches_keep_v2_and_cross_blocks_zero(sampling, gradient):
    spec = tiny(
        pretrain={
            "steps": 200,
            "batch": 256,
            "eval_size": 256,
            "record_every": 20,
            "sampling": sampling,
            "gradient": gradient,
        },
        dtype="float64",
    )
    res = Trainer(spec, [0, 1]).run()
    d = spec.task.d
    W, v = res.params["layer0.W"], res.params["v"]
    cross = {
        "v2": v[:, d:].norm(dim=-1),
        "W_fp": W[:, :d, d:].flatten(1).norm(dim=1),
        "W_pf": W[:, d:, :d].flatten(1).norm(dim=1),
    }
    recorded = res.trajectory[["v2_norm", "W_fp_norm", "W_pf_norm"]].max()
    # the blocks the theory allows do move, so the invariant is not trivially met
    assert res.trajectory.W_ff_norm.iloc[-1] > 0.1 and res.trajectory.W_pp_norm.iloc[-1] > 0.1
    if sampling == "antithetic":
        assert all(t.max() < 1e-6 for t in cross.values()), cross
        assert recorded.max() < 1e-6
    else:
        assert all(t.min() > 1e-3 for t in cross.values()), cross
        assert recorded.min() > 1e-3
