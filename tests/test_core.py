"""Core package (issue 2): data, the paper's transformer, pretraining, checkpoints, tables, CLI, seeding.

Every test checks a property that wrong code breaks: the model against a literal loop over
STUDY.md section 2, gradients against autograd and finite differences, the theory's
invariants at zero init and under antithetic sampling, convergence on a tiny problem, and
bit-identical reruns, batching and resume. Runs in well under a minute on one thread.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from groupsparse import cli, io
from groupsparse.data import draw_task
from groupsparse.model import (embed, forward, init_params, logistic_loss, loss_and_grads_closed_form,
                               sine_positions, token_width)
from groupsparse.pretrain import Trainer, checkpoint_payload
from groupsparse.seeding import numpy_generator, stable_seed, torch_generator
from groupsparse.specs import ConfigError, ModelSpec, RunSpec, TaskSpec


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_raw(task=None, model=None, pretrain=None, **top) -> dict:
    """A run spec dict for a tiny problem (d = D = 4, short training); overrides merge per section."""
    return {"study_seed": 11, "task_name": "tiny", "task": {"d": 4, "D": 4, **(task or {})},
            "model": dict(model or {}),
            "pretrain": {"steps": 20, "batch": 64, "eval_size": 64, "record_every": 5, **(pretrain or {})},
            **top}


def tiny(task=None, model=None, pretrain=None, **top) -> RunSpec:
    return RunSpec.from_dict(tiny_raw(task, model, pretrain, **top))


def random_tokens(spec: ModelSpec, S: int, B: int, d: int, D: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(S, B, D, d, generator=gen, dtype=torch.float64)
    y = torch.where(torch.rand(S, B, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0).double()
    return X, embed(X, spec), y, gen


def drop_timing(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[c for c in io.TIMING_COLUMNS if c in df.columns])


def assert_same_run(a, b, ia: int = 0, ib: int = 0, seed: int | None = None):
    """Seed ia of result a and seed ib of result b: bit-identical parameters and tables."""
    for k in a.params:
        assert torch.equal(a.params[k][ia], b.params[k][ib]), k
    ta, tb = drop_timing(a.trajectory), drop_timing(b.trajectory)
    aa, ab = a.attention, b.attention
    if seed is not None:
        ta, tb = ta[ta.seed == seed], tb[tb.seed == seed]
        aa, ab = aa[aa.seed == seed], ab[ab.seed == seed]
    pd.testing.assert_frame_equal(ta.reset_index(drop=True), tb.reset_index(drop=True), check_exact=True)
    pd.testing.assert_frame_equal(aa.reset_index(drop=True), ab.reset_index(drop=True), check_exact=True)


# --- positions, embedding, shapes ------------------------------------------------------------

@pytest.mark.parametrize("D", [2, 3, 4, 10, 17])
def test_sine_positions_orthonormal_and_symmetric(D):
    P = sine_positions(D)
    assert P.shape == (D, D)
    torch.testing.assert_close(P @ P.T, torch.eye(D, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(P, P.T)
    k, j = D - 1, D // 2  # one entry against STUDY.md's formula
    assert P[k, j].item() == pytest.approx(math.sqrt(2 / (D + 1)) * math.sin(math.pi * (k + 1) * (j + 1) / (D + 1)))


@pytest.mark.parametrize("d,D", [(3, 4), (5, 3), (1, 2)])
@pytest.mark.parametrize("model", [{}, {"positions": "add"}, {"attention": "separate", "init": "random"},
                                   {"layers": 2}, {"score_scale": "sqrt"}])
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
    point = {k: 0.5 * torch.randn(t.shape, generator=gen, dtype=torch.float64) for k, t in closed.params.items()}
    closed.params, auto.params = dict(point), dict(point)
    batch = closed.batch()
    loss_c, grads_c = closed.loss_and_grads(*batch)
    loss_a, grads_a = auto.loss_and_grads(*batch)
    torch.testing.assert_close(loss_c, loss_a, rtol=1e-12, atol=1e-14)
    for k in grads_a:
        assert grads_a[k].norm() > 1e-2, k
        torch.testing.assert_close(grads_c[k], grads_a[k], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("model", [{"init": "random"}, {"positions": "add", "init": "random"},
                                   {"attention": "separate", "init": "random"},
                                   {"layers": 2, "init": "random"}, {"score_scale": "sqrt", "init": "random"}])
def test_autograd_forward_matches_finite_differences(model):
    spec = ModelSpec(**model, init_scale=0.5)
    spec.validate()
    d, D, S, B = 2, 3, 2, 4
    _, Z, y, _ = random_tokens(spec, S, B, d, D, seed=2)
    params = init_params(spec, S, token_width(spec, d, D), [torch.Generator().manual_seed(10 + s) for s in range(S)],
                         torch.float64)
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
    loss, grads = trainer.loss_and_grads(*trainer.batch())
    torch.testing.assert_close(loss, torch.full_like(loss, math.log(2)), rtol=1e-15, atol=0)
    assert torch.equal(grads["layer0.W"], torch.zeros_like(grads["layer0.W"]))
    gv1, gv2 = grads["v"][:, :d], grads["v"][:, d:]
    assert gv2.abs().max() < 1e-15
    n = B // 2  # independent samples: each antithetic pair contributes the same term twice
    along = -(gv1 * trainer.v_star).sum(-1)
    across = (-gv1 - along[:, None] * trainer.v_star).norm(dim=-1)
    sd_along = 0.5 * math.sqrt((D - 2 / math.pi) / n)   # var of y <v*, sum_j x_j> is D - 2/pi
    sd_across = 0.5 * math.sqrt(D / n)                  # per direction orthogonal to v*
    assert (along - 0.5 * math.sqrt(2 / math.pi)).abs().max() < 5 * sd_along
    assert across.max() < 5 * sd_across
    cos = along / gv1.norm(dim=-1)
    assert cos.min() > 0.99


def test_zero_init_iid_batch_moves_v2():
    """Contrast: without antithetic pairs the first v2 gradient is sampling noise, not 0."""
    trainer = Trainer(tiny(pretrain={"batch": 32768, "sampling": "iid"}, dtype="float64"), [0, 1])
    _, grads = trainer.loss_and_grads(*trainer.batch())
    assert torch.equal(grads["layer0.W"], torch.zeros_like(grads["layer0.W"]))
    assert grads["v"][:, 4:].norm(dim=-1).min() > 1e-4


@pytest.mark.parametrize("sampling", ["antithetic", "iid"])
@pytest.mark.parametrize("gradient", ["closed_form", "autograd"])
def test_antithetic_batches_keep_v2_and_cross_blocks_zero(sampling, gradient):
    spec = tiny(pretrain={"steps": 200, "batch": 256, "eval_size": 256, "record_every": 20, "sampling": sampling,
                          "gradient": gradient}, dtype="float64")
    res = Trainer(spec, [0, 1]).run()
    d = spec.task.d
    W, v = res.params["layer0.W"], res.params["v"]
    cross = {"v2": v[:, d:].norm(dim=-1), "W_fp": W[:, :d, d:].flatten(1).norm(dim=1),
             "W_pf": W[:, d:, :d].flatten(1).norm(dim=1)}
    recorded = res.trajectory[["v2_norm", "W_fp_norm", "W_pf_norm"]].max()
    # the blocks the theory allows do move, so the invariant is not trivially met
    assert res.trajectory.W_ff_norm.iloc[-1] > 0.1 and res.trajectory.W_pp_norm.iloc[-1] > 0.1
    if sampling == "antithetic":
        assert all(t.max() < 1e-6 for t in cross.values()), cross
        assert recorded.max() < 1e-6
    else:
        assert all(t.min() > 1e-3 for t in cross.values()), cross
        assert recorded.min() > 1e-3


def test_tiny_problem_attention_selects_relevant_group():
    """d = D = 4 at the paper's eta = 0.5: attention mass on j* passes 0.9 (at about step 350)."""
    spec = tiny(pretrain={"steps": 600, "eta": 0.5, "batch": 512, "eval_size": 2048, "record_every": 100})
    res = Trainer(spec, [0, 1]).run()
    final = res.trajectory[res.trajectory.step == spec.pretrain.steps]
    assert len(final) == 2 and (final.status == "ok").all()
    assert (final.attention_on_relevant >= 0.9).all(), final.attention_on_relevant.tolist()
    assert (final.cos_v1_vstar > 0.99).all()
    assert (final.eval_accuracy > 0.95).all()
    # the stored mean attention matrix agrees: column averages of row j* give the same mass
    att = res.attention[(res.attention.step == spec.pretrain.steps) & (res.attention.key == res.attention.j_star)]
    mass = att.groupby("seed").mass.mean()
    for _, row in final.iterrows():
        assert mass[row.seed] == pytest.approx(row.attention_on_relevant, abs=1e-6)


# --- determinism ---------------------------------------------------------------------------

def test_same_seed_gives_bit_identical_runs():
    spec = tiny(pretrain={"steps": 30})
    a, b = Trainer(spec, [0, 3]).run(), Trainer(spec, [0, 3]).run()
    assert_same_run(a, b, 0, 0)
    assert_same_run(a, b, 1, 1)
    for ta, tb in zip(a.tasks, b.tasks):
        assert torch.equal(ta.relevant, tb.relevant) and torch.equal(ta.directions, tb.directions)
    c = Trainer(tiny(pretrain={"steps": 30}, study_seed=12), [0, 3]).run()
    assert not torch.equal(a.params["v"], c.params["v"])  # another study seed is another run


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("gradient,model", [("closed_form", {}), ("autograd", {}),
                                            ("autograd", {"layers": 2}),
                                            ("autograd", {"attention": "separate", "init": "random"})])
def test_batched_seeds_equal_single_seed_runs(dtype, gradient, model):
    """Bit-identical, not close. A batch of 130 (not a multiple of the SIMD width) and d + D = 13
    are deliberate: torch.bmm switches kernels between one and several seeds, and vectorised
    sigmoid/softplus compute a tensor's tail with scalar code; both once changed a seed's bits."""
    spec = tiny(task={"d": 10, "D": 3}, model=model, dtype=dtype,
                pretrain={"steps": 8, "batch": 130, "eval_size": 66, "record_every": 2, "eta": 2.0,
                          "gradient": gradient})
    seeds = [0, 1, 2]
    batched = Trainer(spec, seeds).run()
    for i in (0, 2):
        alone = Trainer(spec, [seeds[i]]).run()
        assert_same_run(batched, alone, i, 0, seed=seeds[i])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("gradient", ["closed_form", "autograd"])
def test_cuda_run_matches_cpu_run(gradient):
    """device: cuda computes the CPU's numbers on the same samples (float64; kernels differ, so not bitwise).
    A cuda run draws its samples on the device (reproducible per config, dtype and device), so the CPU
    trainer's batches are fed to both here; then a whole run on the device, recording included."""
    raw = tiny_raw(pretrain={"steps": 30, "gradient": gradient}, dtype="float64")
    cpu = Trainer(RunSpec.from_dict(raw), [0, 1])
    gpu = Trainer(RunSpec.from_dict({**raw, "device": "cuda"}), [0, 1])
    active = torch.ones(2, dtype=torch.bool)
    for _ in range(30):
        X, y = cpu.batch()
        loss_c, grads_c = cpu.loss_and_grads(X, y)
        loss_g, grads_g = gpu.loss_and_grads(X.cuda(), y.cuda())
        torch.testing.assert_close(loss_g.cpu(), loss_c, rtol=1e-9, atol=1e-12)
        cpu.descend(grads_c, active)
        gpu.descend(grads_g, active)
    for k in cpu.params:
        assert gpu.params[k].device.type == "cuda"
        torch.testing.assert_close(gpu.params[k].cpu(), cpu.params[k], rtol=1e-9, atol=1e-12)
    run = Trainer(RunSpec.from_dict({**raw, "device": "cuda"}), [0, 1]).run()
    assert run.status == ["ok", "ok"] and run.params["v"].device.type == "cuda"
    assert run.trajectory[["eval_loss", "attention_on_relevant"]].notna().all().all()


# --- resume, checkpoints, tables -------------------------------------------------------------

class Interrupted(RuntimeError):
    pass


class StopsAfter(Trainer):
    """A trainer killed (as by a job time limit) when it draws its ``stop_at``-th batch (``run`` draws with ``draw``)."""

    stop_at = 25

    def draw(self):
        self.drawn = getattr(self, "drawn", 0) + 1
        if self.drawn == self.stop_at:
            raise Interrupted(f"killed at batch {self.drawn}")
        return super().draw()


def test_resume_after_interruption_is_bit_identical(tmp_path):
    spec = tiny(pretrain={"steps": 40, "record_every": 3, "attention_checkpoints": 4})
    seeds = [0, 1]
    reference = Trainer(spec, seeds).run()
    state = tmp_path / "resume.safetensors"
    with pytest.raises(Interrupted):
        StopsAfter(spec, seeds, resume_path=state, resume_every=10).run()
    assert state.is_file()
    resumed = Trainer(spec, seeds, resume_path=state, resume_every=10).run()
    assert resumed.resumed_from_step == 20  # the last state saved before batch 25 (step 24)
    assert_same_run(reference, resumed, 0, 0)
    assert_same_run(reference, resumed, 1, 1)
    assert not state.exists()  # the side file is removed once the run completes


def test_checkpoint_round_trip_through_safetensors(tmp_path):
    spec = tiny(pretrain={"steps": 5})
    res = Trainer(spec, [0, 1]).run()
    tensors, meta = checkpoint_payload(spec, res, [0, 1])
    path = tmp_path / "ck.safetensors"
    io.save_checkpoint(path, tensors, meta)
    raw = path.read_bytes()
    header_len = struct.unpack("<Q", raw[:8])[0]  # safetensors: u64 header size, then a JSON header
    header = json.loads(raw[8: 8 + header_len])
    assert "__metadata__" in header and set(tensors) <= set(header)
    loaded, loaded_meta = io.load_checkpoint(path)
    assert set(loaded) == set(tensors)
    for k, t in tensors.items():
        assert loaded[k].dtype == t.dtype and torch.equal(loaded[k], t), k
    assert loaded_meta == json.loads(json.dumps(meta, default=str))
    assert RunSpec.from_dict(loaded_meta["spec"]) == spec
    assert loaded["task.relevant"][:, 0].tolist() == [t.j_star for t in res.tasks]
    # a pickle or a truncated file is refused with InputError, never unpickled
    pickled = tmp_path / "pickled.safetensors"
    torch.save(tensors, pickled)
    with pytest.raises(io.InputError, match="pickled.safetensors"):
        io.load_checkpoint(pickled)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(io.InputError, match="cut.safetensors"):
        io.load_checkpoint(cut)


def run_cli(tmp_path, raw: dict, seeds: str = "0-1", tag: str = "run") -> tuple[int, dict]:
    paths = {k: tmp_path / f"{tag}.{k}" for k in ("checkpoint", "trajectory", "attention")}
    argv = ["pretrain", "--spec", json.dumps(raw), "--seeds", seeds, "--threads", "1",
            "--checkpoint", str(paths["checkpoint"]), "--trajectory", str(paths["trajectory"]),
            "--attention", str(paths["attention"])]
    return cli.main(argv), paths


def test_cli_writes_typed_tables_with_provenance(tmp_path, capsys):
    raw = tiny_raw(pretrain={"steps": 10})
    code, paths = run_cli(tmp_path, raw)
    assert code == 0, capsys.readouterr().err
    schema = pq.read_schema(paths["trajectory"])
    types = {name: schema.field(name).type for name in schema.names}
    for col in ("seed", "step", "j_star", "d", "D", "diverged_step"):
        assert types[col] == pa.int64(), col
    for col in ("train_loss", "eval_loss", "eval_accuracy", "attention_on_relevant", "cos_v1_vstar", "v1_norm",
                "v2_norm", "W_ff_norm", "W_fp_norm", "W_pf_norm", "W_pp_norm", "last_finite_loss"):
        assert types[col] == pa.float64(), col
    for col in ("task_name", "status"):  # pandas 3 writes large_string
        assert pa.types.is_string(types[col]) or pa.types.is_large_string(types[col]), col
    att_schema = pq.read_schema(paths["attention"])
    assert att_schema.field("mass").type == pa.float64() and att_schema.field("key").type == pa.int64()
    spec = RunSpec.from_dict(raw)
    for table in ("trajectory", "attention"):
        prov = io.read_provenance(paths[table])
        assert prov["config_hash"] == spec.science_hash()
        assert isinstance(prov["git_commit"], str) and prov["git_commit"]
        assert prov["versions"]["torch"] == torch.__version__.split("+")[0] or \
            prov["versions"]["torch"] == torch.__version__
        assert prov["versions"]["groupsparse"]
    traj = io.read_parquet(paths["trajectory"])
    assert sorted(traj.seed.unique()) == [0, 1] and traj.step.max() == 10
    tensors, meta = io.load_checkpoint(paths["checkpoint"])
    assert meta["science_hash"] == spec.science_hash() and meta["seeds"] == [0, 1]


# --- errors ----------------------------------------------------------------------------------

BAD_SETTINGS = [
    ({"task": {"d": 0}}, "task.d"),
    ({"task": {"D": 1}}, "task.D"),
    ({"pretrain": {"eta": 0}}, "pretrain.eta"),
    ({"pretrain": {"eta": -0.5}}, "pretrain.eta"),
    ({"task": {"j_star": 4}}, "task.j_star"),      # D = 4: j* in 0..3
    ({"task": {"j_star": -1}}, "task.j_star"),
    ({"pretrain": {"batch": 63}}, "pretrain.batch"),  # antithetic (the default) needs an even batch
    ({"bogus": 1}, "bogus"),
    ({"task": {"dd": 4}}, "task.dd"),
    ({"model": {"heads": 2}}, "model.heads"),
    ({"pretrain": {"lr": 0.1}}, "pretrain.lr"),
]


def merged(over: dict) -> dict:
    raw = tiny_raw()
    for key, value in over.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
    return raw


@pytest.mark.parametrize("over,key", BAD_SETTINGS)
def test_impossible_settings_raise_config_error_naming_the_key(over, key, tmp_path, capsys):
    with pytest.raises(ConfigError, match=rf"(^|\W){re.escape(key)}\b"):
        RunSpec.from_dict(merged(over))
    code, paths = run_cli(tmp_path, merged(over))
    err = capsys.readouterr().err
    assert code == cli.EXIT_CONFIG == 2
    assert key in err and "bad setting" in err
    assert not any(p.exists() for p in paths.values())


def test_odd_batch_is_fine_without_antithetic_sampling():
    spec = RunSpec.from_dict(merged({"pretrain": {"batch": 63, "sampling": "iid"}}))
    assert spec.pretrain.batch == 63


def test_cli_process_exits_2_on_a_bad_setting(tmp_path):
    raw = merged({"task": {"D": 1}})
    proc = subprocess.run([sys.executable, "-m", "groupsparse.cli", "pretrain", "--spec", json.dumps(raw),
                           "--seeds", "0", "--checkpoint", str(tmp_path / "c"), "--trajectory", str(tmp_path / "t"),
                           "--attention", str(tmp_path / "a")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "task.D" in proc.stderr and "Traceback" not in proc.stderr


# --- divergence -----------------------------------------------------------------------------

DIVERGING = {"steps": 20, "eta": 1e20, "record_every": 1}  # float32: the first steps overflow to inf


def test_divergence_is_recorded():
    res = Trainer(tiny(pretrain=DIVERGING), [0, 1]).run()
    assert res.status == ["diverged", "diverged"]
    assert all(step >= 1 for step in res.diverged_step)
    traj = res.trajectory
    assert (traj.status == "diverged").all()
    for seed, step in zip([0, 1], res.diverged_step):
        rows = traj[traj.seed == seed]
        assert (rows.diverged_step == step).all()
        assert rows.step.max() < step  # nothing is recorded from the non-finite step on
        assert math.isfinite(rows.last_finite_loss.iloc[0])
    assert all(math.isfinite(x) for x in res.extra["last_finite_loss"])


def test_a_blow_up_that_stays_finite_is_recorded_as_diverged():
    """eta = 1e10 in float64: the loss grows to ~1e9 without overflowing; the rule (loss above
    DIVERGE_FACTOR x its start) marks the seed diverged at the first such step."""
    from groupsparse.pretrain import DIVERGE_FACTOR

    spec = tiny(pretrain={"steps": 20, "eta": 1e10, "record_every": 1}, dtype="float64")
    res = Trainer(spec, [0]).run()
    assert res.status == ["diverged"] and res.diverged_step[0] >= 1
    traj = res.trajectory
    assert traj["train_loss"].map(math.isfinite).all() and traj["eval_loss"].map(math.isfinite).all()
    assert traj["train_loss"].max() <= DIVERGE_FACTOR * traj["train_loss"].iloc[0]  # nothing recorded past it
    # the same task with a sane step stays "ok": the rule does not fire on ordinary training
    assert Trainer(tiny(pretrain={"steps": 20, "eta": 0.5}, dtype="float64"), [0]).run().status == ["ok"]


def test_cli_divergence_fail_exits_3_and_record_exits_0(tmp_path, capsys):
    code, paths = run_cli(tmp_path, tiny_raw(pretrain={**DIVERGING, "on_diverge": "fail"}), tag="fail")
    err = capsys.readouterr().err
    assert code == cli.EXIT_DIVERGED == 3
    assert "diverged" in err and "pretrain.eta" in err
    assert not paths["checkpoint"].exists()
    code, paths = run_cli(tmp_path, tiny_raw(pretrain={**DIVERGING, "on_diverge": "record"}), tag="record")
    assert code == 0, capsys.readouterr().err
    traj = io.read_parquet(paths["trajectory"])
    assert (traj.status == "diverged").all() and (traj.diverged_step >= 1).all()
    assert traj.last_finite_loss.map(math.isfinite).all()
    _, meta = io.load_checkpoint(paths["checkpoint"])
    assert meta["status"] == ["diverged", "diverged"]


class InfGradientAt(Trainer):
    """Seed 0's v-gradient becomes +inf at step ``bad_step`` (an overflow in the backward pass)."""

    bad_step = 3

    def step_grads(self, drawn):  # run's gradients (loss_and_grads off the fast path)
        loss, grads = super().step_grads(drawn)
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == self.bad_step + 1:
            grads = dict(grads, v=grads["v"].clone())
            grads["v"][0] = float("inf")
        return loss, grads


def test_diverged_seed_is_frozen_and_others_unaffected():
    spec = tiny(pretrain={"steps": 12, "eta": 2.0})
    res = InfGradientAt(spec, [0, 1]).run()
    assert res.status == ["diverged", "ok"] and res.diverged_step == [3, -1]
    # seed 0 keeps the parameters it had when its gradient broke (eta * inf * 0 must not leak NaN)
    upto = Trainer(tiny(pretrain={"steps": 3, "eta": 2.0}), [0]).run()
    for k in res.params:
        assert torch.isfinite(res.params[k][0]).all(), k
        assert torch.equal(res.params[k][0], upto.params[k][0]), k
    alone = Trainer(spec, [1]).run()
    assert_same_run(res, alone, 1, 0, seed=1)


# --- data and seeding -----------------------------------------------------------------------

def test_samples_follow_the_data_model():
    spec = TaskSpec(d=3, D=5)
    task = draw_task(spec, 1, "t", 0)
    again = draw_task(spec, 1, "t", 0)
    assert task.j_star == again.j_star and torch.equal(task.v_star, again.v_star)
    assert task.v_star.norm().item() == pytest.approx(1.0)
    X, y = task.sample(1000, torch_generator(1, "t", 0, "train"), dtype=torch.float64)
    assert X.shape == (1000, 5, 3) and y.shape == (1000,)
    assert torch.equal(X[500:], -X[:500]) and torch.equal(y[500:], -y[:500])
    assert torch.equal(y, torch.sign(X[:, task.j_star] @ task.v_star))
    X2, _ = task.sample(1000, torch_generator(1, "t", 0, "train"), dtype=torch.float64)
    assert torch.equal(X, X2)
    Xi, _ = task.sample(1001, torch_generator(1, "t", 0, "train"), antithetic=False)
    assert not torch.equal(Xi[500:1000], -Xi[:500])
    with pytest.raises(ValueError, match="even"):
        task.sample(7, torch_generator(0), antithetic=True)
    js = {draw_task(spec, 1, "t", rep).j_star for rep in range(30)}
    assert len(js) > 1  # j* is drawn per repetition


STABLE_IDENTITY = (2025, "base", 3, "train")
STABLE_SEED = 1249158244961606000  # stable_seed(*STABLE_IDENTITY), computed once; must never change


def test_stable_seed_is_fixed_across_processes():
    assert stable_seed(*STABLE_IDENTITY) == STABLE_SEED
    code = f"from groupsparse.seeding import stable_seed; print(stable_seed(*{STABLE_IDENTITY!r}))"
    for hash_seed in ("0", "12345"):  # Python's str hash randomisation must not matter
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": hash_seed}, check=True).stdout
        assert int(out) == STABLE_SEED


def test_distinct_identities_give_distinct_seeds_and_streams():
    identities = [STABLE_IDENTITY, (2026, "base", 3, "train"), (2025, "other", 3, "train"),
                  (2025, "base", 4, "train"), (2025, "base", 3, "eval"), (2025, "base", "3", "train"),
                  ("base", 2025, 3, "train"), (2025, "base", 3), (2025, "base", 3, "train", "task")]
    seeds = [stable_seed(*ident) for ident in identities]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**63 for s in seeds)
    a = torch.randn(4, generator=torch_generator(*STABLE_IDENTITY))
    assert torch.equal(a, torch.randn(4, generator=torch_generator(*STABLE_IDENTITY)))
    assert not torch.equal(a, torch.randn(4, generator=torch_generator(2025, "base", 3, "eval")))
    assert (numpy_generator(*STABLE_IDENTITY).random(3) == numpy_generator(*STABLE_IDENTITY).random(3)).all()
    with pytest.raises(TypeError):
        stable_seed(object())
