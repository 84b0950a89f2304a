"""The fast pretraining path gives the paper model's numbers (issue 8).

Reference: the paper's formula written as an nn.Module, differentiated by autograd, one seed
at a time, plain SGD. Tolerances: float64 trajectories agree to 1e-9 (absolute, on parameters
of size ~1; what is left is rounding, amplified where the softmax saturates); float32 and
float64 runs of the fast path agree to 1e-4 on the recorded evaluation metrics.
"""

from __future__ import annotations

import math

import pytest
import torch

from groupsparse.config.specs import ModelSpec, RunSpec
from groupsparse.data.synthetic import draw_task, standard_normal
from groupsparse.model import cpu, fastpath, kernel_flops
from groupsparse.model.transformer import embed, loss_and_grads_closed_form, sine_positions
from groupsparse.training.pretrain import Trainer

TRAJECTORY_ATOL = 1e-9
DTYPE_ATOL = 1e-4


pytestmark = pytest.mark.usefixtures("one_thread")


def spec(dtype="float64", sampling="antithetic", score_scale="none", steps=20, d=3, D=4, batch=32, eta=0.5, **pretrain):
    return RunSpec.from_dict(
        {
            "study_seed": 7,
            "task_name": "fast",
            "dtype": dtype,
            "task": {"d": d, "D": D},
            "model": {"score_scale": score_scale},
            "pretrain": {
                "steps": steps,
                "batch": batch,
                "eta": eta,
                "sampling": sampling,
                "eval_size": 64,
                "record_every": 5,
                **pretrain,
            },
        }
    )


class PaperTransformer(torch.nn.Module):
    """z_j = [x_j; p_j]; S = softmax over keys of Z^T W Z (times scale); f = v^T Z S 1."""

    def __init__(self, d: int, D: int, scale: float, dtype=torch.float64):
        super().__init__()
        self.W = torch.nn.Parameter(torch.zeros(d + D, d + D, dtype=dtype))
        self.v = torch.nn.Parameter(torch.zeros(d + D, dtype=dtype))
        self.register_buffer("P", sine_positions(D, dtype))
        self.scale = scale

    def forward(self, X):  # X (B, D, d)
        B, D, _ = X.shape
        Z = torch.cat([X, self.P.expand(B, D, D)], dim=2).transpose(1, 2)  # (B, m, D): columns z_j
        S = torch.softmax(self.scale * (Z.transpose(1, 2) @ self.W @ Z), dim=1)
        return ((self.v @ Z).unsqueeze(1) @ S).sum((1, 2))


@pytest.mark.parametrize("sampling,score_scale", [("antithetic", "none"), ("iid", "none"), ("antithetic", "sqrt")])
def test_trajectories_match_autograd_reference(sampling, score_scale):
    s = spec(sampling=sampling, score_scale=score_scale)
    trainer = Trainer(s, [0, 1])
    assert trainer.plan.closed_form
    d, D = s.task.d, s.task.D
    scale = 1 / math.sqrt(d + D) if score_scale == "sqrt" else 1.0
    refs = [PaperTransformer(d, D, scale) for _ in trainer.seeds]
    opts = [torch.optim.SGD(r.parameters(), lr=s.pretrain.eta) for r in refs]
    active = torch.ones(2, dtype=torch.bool)
    for _ in range(s.pretrain.steps):
        X, y = trainer.batches.batch()
        loss, grads = trainer.rule.loss_and_grads(X, y)
        trainer.rule.descend(grads, active)
        for i, (ref, opt) in enumerate(zip(refs, opts)):
            ref_loss = torch.nn.functional.softplus(-y[i] * ref(X[i])).mean()
            opt.zero_grad()
            ref_loss.backward()
            opt.step()
            assert abs(float(loss[i]) - float(ref_loss.detach())) < TRAJECTORY_ATOL
    for i, ref in enumerate(refs):
        assert torch.allclose(trainer.parameters()["layer0.W"][i], ref.W.detach(), rtol=0, atol=TRAJECTORY_ATOL)
        assert torch.allclose(trainer.parameters()["v"][i], ref.v.detach(), rtol=0, atol=TRAJECTORY_ATOL)
    assert trainer.parameters()["layer0.W"].abs().max() > 0.1  # the run went somewhere


@pytest.mark.parametrize("antithetic", [True, False])
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_kernel_matches_dense_closed_form(antithetic, scale):
    gen = torch.Generator().manual_seed(3)
    d, D, B = 5, 6, 40
    X = torch.randn(B // 2, D, d, generator=gen, dtype=torch.float64)
    y = torch.sign(torch.randn(B // 2, generator=gen, dtype=torch.float64))
    if antithetic:
        X, y = torch.cat([X, -X]), torch.cat([y, -y])
    W = 0.5 * torch.randn(d + D, d + D, generator=gen, dtype=torch.float64)
    v = torch.randn(d + D, generator=gen, dtype=torch.float64)
    want_loss, want_gW, want_gv, _, _ = loss_and_grads_closed_form(
        W[None], v[None], embed(X[None], ModelSpec()), y[None], scale
    )
    n = B // 2 if antithetic else B
    loss, gW, gv = fastpath.seed_loss_and_grads(
        W, v, fastpath.batch_inner(X[:n]), y[:n], sine_positions(D, torch.float64), scale, antithetic
    )
    assert torch.allclose(loss, want_loss[0], rtol=1e-12, atol=0)
    assert torch.allclose(gW, want_gW[0], rtol=0, atol=1e-12 * float(want_gW.abs().max()))
    assert torch.allclose(gv, want_gv[0], rtol=0, atol=1e-12 * float(want_gv.abs().max()))


def test_float32_agrees_with_float64():
    """The same samples (drawn in float32, as a float32 run does) through float32 and float64 arithmetic."""
    runs = {
        dt: Trainer(spec(dtype=dt, steps=300, d=4, D=5, batch=256), [0, 1], draw_dtype=torch.float32).run()
        for dt in ("float32", "float64")
    }
    a, b = (runs[dt].trajectory.set_index(["seed", "step"]) for dt in ("float32", "float64"))
    assert len(a) == len(b) > 0
    for col in ("train_loss", "eval_loss", "attention_on_relevant", "cos_v1_vstar"):
        assert float((a[col] - b[col]).abs().max()) < DTYPE_ATOL, col
    assert float(b["attention_on_relevant"].iloc[-1]) > 0.5  # compared while attention actually moves


def test_seeds_batched_equal_single_seed_runs_at_any_thread_count():
    s = spec(dtype="float32", steps=15, d=4, D=5, batch=48)
    reference = Trainer(s, [0, 1, 2]).run()  # one thread (fixture)
    again = Trainer(s, [0, 1, 2]).run()
    assert all(torch.equal(again.params[k], reference.params[k]) for k in reference.params)
    assert again.trajectory.drop(columns=["wall_seconds"], errors="ignore").equals(reference.trajectory)
    torch.set_num_threads(2)  # seeds then run on two worker threads
    together = Trainer(s, [0, 1, 2]).run()
    assert torch.get_num_threads() == 2
    for k in reference.params:
        assert torch.equal(together.params[k], reference.params[k]), k
    for i, seed in enumerate([0, 1, 2]):
        alone = Trainer(s, [seed]).run()
        for name, t in alone.params.items():
            assert torch.equal(t[0], reference.params[name][i]), (seed, name)


@pytest.mark.parametrize("shape", [(1024, 10, 10), (37, 3, 5), (3, 5), (2,)])
def test_standard_normal_is_torch_randn(shape):
    mine, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    got = standard_normal(shape, mine)
    want = torch.randn(shape, generator=theirs, dtype=torch.float64)
    assert got.shape == want.shape
    assert torch.equal(mine.get_state(), theirs.get_state())  # the same draws, the stream continues alike
    ulp = torch.finfo(torch.float64).eps * want.abs().clamp_min(1e-300)
    assert bool(((got - want).abs() <= 2 * ulp).all())


def test_antithetic_fast_path_refuses_unmirrored_batches():
    trainer = Trainer(spec(steps=2), [0])
    task = draw_task(trainer.spec.task, 7, "fast", 0)
    plain = lambda n, gen, **kw: task.sample(n, gen, **(kw | {"antithetic": False}))
    trainer.tasks[0].sample = plain  # a task that ignores antithetic=True
    X, y = trainer.batches.batch()
    with pytest.raises(ValueError, match="pretrain.sampling"):
        trainer.rule.loss_and_grads(X, y)


def test_dense_flop_count():
    # scores 2BDm^2 + 2BD^2m, W-gradient the same again
    B, D, d = 8, 3, 2
    m = d + D
    assert kernel_flops.dense_flops(B, D, d) == 2 * (2 * B * D * m * m + 2 * B * D * D * m)


# --- the data draw in the run's precision (issue 18) ---------------------------------------------


def test_float32_runs_draw_float32_normals_exactly_antithetic():
    task = draw_task(spec().task, 7, "fast", 0)
    n, m = 130, 65
    Xi, yh = task.sample_inner(n, torch.Generator().manual_seed(5), dtype=torch.float32)
    want = torch.randn(3, 4, m, generator=torch.Generator().manual_seed(5), dtype=torch.float32)
    assert Xi.dtype == torch.float32 and Xi.is_contiguous() and torch.equal(Xi, want)  # (d, D, m), no cast
    X, y = task.sample(n, torch.Generator().manual_seed(5), dtype=torch.float32)
    assert X.dtype == y.dtype == torch.float32 and X.shape == (n, 4, 3)
    assert torch.equal(X[:m], Xi.permute(2, 1, 0)) and torch.equal(y[:m], yh)
    assert torch.equal(X[m:], -X[:m]) and torch.equal(y[m:], -y[:m])  # exactly antithetic
    assert torch.equal(y[:m], torch.sign(X[:m, task.j_star] @ task.v_star.float()))


def test_float64_runs_keep_their_float64_draws():
    """float64 samples are those of earlier versions: drawn sample by sample [b, j, k] as torch.randn."""
    task = draw_task(spec().task, 7, "fast", 0)
    X, y = task.sample(64, torch.Generator().manual_seed(5), dtype=torch.float64)
    want = standard_normal((32, 4, 3), torch.Generator().manual_seed(5))
    assert X.dtype == torch.float64 and torch.equal(X[:32], want) and torch.equal(X[32:], -want)
    assert torch.equal(y[:32], torch.sign(torch.einsum("bkd,kd->b", want[:, task.relevant], task.directions)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_draws_are_standard_normal(dtype):
    """Sanity of the generator in either precision: moments within 5 standard errors, KS test vs N(0, 1)."""
    stats = pytest.importorskip("scipy.stats")
    N = 1 << 20
    x = standard_normal((N,), torch.Generator().manual_seed(2025), dtype)
    assert x.dtype == dtype
    x = x.double().numpy()
    assert abs(x.mean()) < 5 / math.sqrt(N)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / N)
    assert abs(stats.skew(x)) < 5 * math.sqrt(6 / N)
    assert abs(stats.kurtosis(x)) < 5 * math.sqrt(24 / N)
    assert stats.kstest(x, "norm").pvalue > 1e-3


@pytest.mark.parametrize("sampling", ["antithetic", "iid"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_run_loop_draws_equal_public_batches(sampling, dtype):
    """Trainer.run's path (draw + step_grads, no (S, B, D, d) batch) gives batch() + loss_and_grads's bits."""
    s = spec(dtype=dtype, sampling=sampling, d=4, D=5, batch=66)
    a, b = Trainer(s, [0, 1, 2]), Trainer(s, [0, 1, 2])
    active = torch.ones(3, dtype=torch.bool)
    for _ in range(4):
        loss_a, grads_a = a.rule.step_grads(a.batches.draw())
        loss_b, grads_b = b.rule.loss_and_grads(*b.batches.batch())
        assert torch.equal(loss_a, loss_b)
        assert all(torch.equal(grads_a[k], grads_b[k]) for k in grads_a)
        a.rule.descend(grads_a, active)
        b.rule.descend(grads_b, active)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_antithetic_float_runs_keep_v2_and_cross_blocks_exactly_zero(dtype):
    """From the zero init, exactly antithetic batches give exactly zero v2 and W cross-block gradients in
    the fast kernel (the odd parts cancel bit for bit), in either precision and at D = 16 too."""
    s = spec(dtype=dtype, steps=150, d=4, D=16, batch=128, eta=2.0)
    res = Trainer(s, [0, 1]).run()
    d = s.task.d
    W, v = res.params["layer0.W"], res.params["v"]
    assert float(W[:, :d, :d].abs().max()) > 0.05 and float(W[:, d:, d:].abs().max()) > 0.05  # the run moved
    assert torch.equal(v[:, d:], torch.zeros_like(v[:, d:]))
    assert torch.equal(W[:, :d, d:], torch.zeros_like(W[:, :d, d:]))
    assert torch.equal(W[:, d:, :d], torch.zeros_like(W[:, d:, :d]))


@pytest.mark.parametrize("antithetic", [True, False])
def test_batched_contractions_match_the_loops(antithetic):
    """The einsum form of the two per-sample contractions (used on GPUs) against the CPU loops."""
    gen = torch.Generator().manual_seed(4)
    d, D, H = 5, 7, 33
    X = torch.randn(d, D, H, generator=gen, dtype=torch.float64)
    y = torch.sign(torch.randn(H, generator=gen, dtype=torch.float64))
    W = 0.5 * torch.randn(d + D, d + D, generator=gen, dtype=torch.float64)
    v = torch.randn(d + D, generator=gen, dtype=torch.float64)
    P = sine_positions(D, torch.float64)
    want = fastpath.seed_loss_and_grads(W, v, X, y, P, 0.7, antithetic, batched=False)
    got = fastpath.seed_loss_and_grads(W, v, X, y, P, 0.7, antithetic, batched=True)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-12, atol=1e-12 * float(w.abs().max()))


# --- float32 on a CPU: the fused kernel (issue 18) ------------------------------------------------


def _kernel_inputs(d, D, H, seed=5):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(d, D, H, generator=gen, dtype=torch.float64)
    y = torch.sign(torch.randn(H, generator=gen, dtype=torch.float64))
    W = 0.5 * torch.randn(d + D, d + D, generator=gen, dtype=torch.float64)
    v = torch.randn(d + D, generator=gen, dtype=torch.float64)
    return W, v, X, y, sine_positions(D, torch.float64)


@pytest.mark.parametrize("antithetic", [True, False])
@pytest.mark.parametrize("d,D,H,scale", [(10, 10, 1024, 1.0), (4, 5, 33, 0.3), (3, 16, 65, 1.0), (1, 1, 7, 1.0)])
def test_fused_float32_kernel_matches_float64(d, D, H, scale, antithetic):
    """The fused float32 kernel (numba loops) against the float64 torch path on the same inputs: float32
    rounding, no more than the float32 torch path's own deviation allows for."""
    args64 = _kernel_inputs(d, D, H)
    args32 = [a.float() for a in args64]
    want = fastpath.seed_loss_and_grads(*args64, scale, antithetic)
    fused = fastpath.fused_loss_and_grads(*args32, scale, antithetic)
    torch_ops = fastpath.seed_loss_and_grads(*args32, scale, antithetic)
    for got, ops, w in zip(fused, torch_ops, want):
        assert got.dtype == torch.float32 and got.shape == w.shape
        size = float(w.abs().max())
        err, ops_err = float((got.double() - w).abs().max()), float((ops.double() - w).abs().max())
        assert err <= max(10 * ops_err, 1e-6 * size), (err, ops_err)


def test_denormals_flushed_inside_and_the_threads_setting_restored():
    tiny = torch.tensor([1e-40], dtype=torch.float32)  # subnormal
    assert float(tiny * 1.0) > 0
    with cpu.denormals_flushed():
        assert float(tiny * 1.0) == 0.0
    assert float(tiny * 1.0) > 0  # off again, as it was
    try:
        torch.set_flush_denormal(True)
        with cpu.denormals_flushed():
            pass
        assert float(tiny * 1.0) == 0.0  # on again, as it was
    finally:
        torch.set_flush_denormal(False)


# --- CUDA (run with `pytest -k cuda` on a machine with a GPU; benchmarks/gpu_check.py) ------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_fast_path_invariants_batching_and_reruns(dtype):
    """On CUDA: data drawn on the device; v2 and W's cross blocks exactly 0 with antithetic batches;
    batched seeds equal single seeds and reruns equal runs, bit for bit (per device, not equal to CPU)."""
    s = RunSpec.from_dict({**spec(dtype=dtype, steps=60, d=4, D=16, batch=130, eta=2.0).to_dict(), "device": "cuda"})
    res = Trainer(s, [0, 1, 2]).run()
    d = s.task.d
    W, v = res.params["layer0.W"], res.params["v"]
    assert W.device.type == "cuda" and float(W[:, :d, :d].abs().max()) > 0.01
    for block in (v[:, d:], W[:, :d, d:], W[:, d:, :d]):
        assert torch.equal(block, torch.zeros_like(block))
    again = Trainer(s, [0, 1, 2]).run()
    alone = Trainer(s, [2]).run()
    for k in res.params:
        assert torch.equal(again.params[k], res.params[k]), k
        assert torch.equal(alone.params[k][0], res.params[k][2]), k


@cuda
@pytest.mark.parametrize("antithetic", [True, False])
def test_cuda_kernel_matches_cpu_kernel(antithetic):
    gen = torch.Generator().manual_seed(9)
    d, D, H = 6, 12, 257
    X = torch.randn(d, D, H, generator=gen, dtype=torch.float64)
    y = torch.sign(torch.randn(H, generator=gen, dtype=torch.float64))
    W = 0.3 * torch.randn(d + D, d + D, generator=gen, dtype=torch.float64)
    v = torch.randn(d + D, generator=gen, dtype=torch.float64)
    P = sine_positions(D, torch.float64)
    want = fastpath.seed_loss_and_grads(W, v, X, y, P, 1.0, antithetic)
    got = fastpath.seed_loss_and_grads(W.cuda(), v.cuda(), X.cuda(), y.cuda(), P.cuda(), 1.0, antithetic)
    for g, w in zip(got, want):
        assert g.device.type == "cuda"
        assert torch.allclose(g.cpu(), w, rtol=1e-10, atol=1e-12 * float(w.abs().max()))
