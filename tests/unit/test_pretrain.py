"""Pretraining: learning, bit-identical reruns and resumes, checkpoints, the pretrain command, settings, divergence."""

from __future__ import annotations

import json
import math
import re
import struct
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from groupsparse import cli
from groupsparse.config.specs import ConfigError, RunSpec
from groupsparse.io import files as io
from groupsparse.training.pretrain import Trainer, checkpoint_payload
from groupsparse.training.recording import record_steps

from conftest import assert_same_run
from conftest import tiny_spec as tiny
from conftest import tiny_spec_dict as tiny_raw

pytestmark = pytest.mark.usefixtures("one_thread")


# --- positions, embedding, shapes ------------------------------------------------------------


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
@pytest.mark.parametrize(
    "gradient,model",
    [
        ("closed_form", {}),
        ("autograd", {}),
        ("autograd", {"layers": 2}),
        ("autograd", {"attention": "separate", "init": "random"}),
    ],
)
def test_batched_seeds_equal_single_seed_runs(dtype, gradient, model):
    """Bit-identical, not close. A batch of 130 (not a multiple of the SIMD width) and d + D = 13
    are deliberate: torch.bmm switches kernels between one and several seeds, and vectorised
    sigmoid/softplus compute a tensor's tail with scalar code; both once changed a seed's bits."""
    spec = tiny(
        task={"d": 10, "D": 3},
        model=model,
        dtype=dtype,
        pretrain={"steps": 8, "batch": 130, "eval_size": 66, "record_every": 2, "eta": 2.0, "gradient": gradient},
    )
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
        X, y = cpu.batches.batch()
        loss_c, grads_c = cpu.rule.loss_and_grads(X, y)
        loss_g, grads_g = gpu.rule.loss_and_grads(X.cuda(), y.cuda())
        torch.testing.assert_close(loss_g.cpu(), loss_c, rtol=1e-9, atol=1e-12)
        cpu.rule.descend(grads_c, active)
        gpu.rule.descend(grads_g, active)
    for k, want in cpu.parameters().items():
        assert gpu.parameters()[k].device.type == "cuda"
        torch.testing.assert_close(gpu.parameters()[k].cpu(), want, rtol=1e-9, atol=1e-12)
    run = Trainer(RunSpec.from_dict({**raw, "device": "cuda"}), [0, 1]).run()
    assert run.status == ["ok", "ok"] and run.params["v"].device.type == "cuda"
    assert run.trajectory[["eval_loss", "attention_on_relevant"]].notna().all().all()


class EventToEvent:
    """A descent rule of its own (``training/rule.py``'s interface): plain gradient descent that goes from one
    event to the next in one call, as a flow solver goes from one event's flow time to the next."""

    def __init__(self, steps):
        self.steps, self.eta, self.coef, self.advances = steps, steps.eta, None, []

    def parameters(self):
        return self.steps.parameters()

    def evaluate(self, step, guard):
        return self.steps.evaluate(step, guard)

    def advance(self, step, to, guard, pause, progress=None):
        self.advances.append((step, to))
        self.steps.descend(self.steps.pending, guard.active)
        for _ in range(step + 1, to):
            self.steps.step(guard.active)
        return to

    def state(self):
        return self.steps.state()

    def load(self, tensors, meta, device):
        self.steps.load(tensors, meta, device)


def test_a_descent_rule_of_its_own_slots_into_the_trainer(monkeypatch):
    """The trainer asks its rule only for the interface of training/rule.py: a rule that advances from event
    to event in one go gives the run's numbers, recorded at the same steps, with nothing else changed."""
    from groupsparse.training import rule as rules

    spec = tiny(pretrain={"steps": 40, "record_every": 10, "attention_checkpoints": 3})
    reference = Trainer(spec, [0, 1]).run()
    make = rules.make
    made = []
    monkeypatch.setattr(rules, "make", lambda *args: made.append(EventToEvent(make(*args))) or made[-1])
    trainer = Trainer(spec, [0, 1])
    assert trainer.rule is made[0] and trainer.recorder.rule is made[0]
    res = trainer.run()
    assert_same_run(reference, res, 0, 0)
    assert_same_run(reference, res, 1, 1)
    stops = [to for _, to in made[0].advances]
    assert stops == sorted((set(reference.trajectory["step"]) | set(reference.attention["step"])) - {0})


# --- resume, checkpoints, tables -------------------------------------------------------------


class Interrupted(RuntimeError):
    pass


def stops_after(*args, stop_at: int = 25, **kw) -> Trainer:
    """A trainer killed (as by a job time limit) when it draws its ``stop_at``-th batch."""
    trainer = Trainer(*args, **kw)
    draw, drawn = trainer.batches.draw, []

    def dying():
        drawn.append(1)
        if len(drawn) == stop_at:
            raise Interrupted(f"killed at batch {len(drawn)}")
        return draw()

    trainer.batches.draw = dying
    return trainer


def test_resume_after_interruption_is_bit_identical(tmp_path):
    spec = tiny(pretrain={"steps": 40, "record_every": 3, "attention_checkpoints": 4})
    seeds = [0, 1]
    reference = Trainer(spec, seeds).run()
    state = tmp_path / "resume.safetensors"
    with pytest.raises(Interrupted):
        stops_after(spec, seeds, resume_path=state, resume_every=10).run()
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
    header = json.loads(raw[8 : 8 + header_len])
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
    argv = [
        "pretrain",
        "--spec",
        json.dumps(raw),
        "--seeds",
        seeds,
        "--threads",
        "1",
        "--checkpoint",
        str(paths["checkpoint"]),
        "--trajectory",
        str(paths["trajectory"]),
        "--attention",
        str(paths["attention"]),
    ]
    return cli.main(argv), paths


def test_cli_writes_typed_tables_with_provenance(tmp_path, capsys):
    raw = tiny_raw(pretrain={"steps": 10})
    code, paths = run_cli(tmp_path, raw)
    assert code == 0, capsys.readouterr().err
    schema = pq.read_schema(paths["trajectory"])
    types = {name: schema.field(name).type for name in schema.names}
    for col in ("seed", "step", "j_star", "d", "D", "diverged_step"):
        assert types[col] == pa.int64(), col
    from groupsparse.io.tables import FINAL_METRICS

    for col in ("train_loss", *FINAL_METRICS, "last_finite_loss"):
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
        assert (
            prov["versions"]["torch"] == torch.__version__.split("+")[0]
            or prov["versions"]["torch"] == torch.__version__
        )
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
    ({"task": {"j_star": 4}}, "task.j_star"),  # D = 4: j* in 0..3
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "groupsparse.cli",
            "pretrain",
            "--spec",
            json.dumps(raw),
            "--seeds",
            "0",
            "--checkpoint",
            str(tmp_path / "c"),
            "--trajectory",
            str(tmp_path / "t"),
            "--attention",
            str(tmp_path / "a"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
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
    assert all(math.isfinite(x) for x in traj.groupby("seed")["last_finite_loss"].first())


def test_a_blow_up_that_stays_finite_is_recorded_as_diverged():
    """eta = 1e10 in float64: the loss grows to ~1e9 without overflowing; the rule (loss above
    DIVERGE_FACTOR x its start for DIVERGE_PATIENCE consecutive steps) marks the seed diverged."""
    from groupsparse.training.divergence import DIVERGE_FACTOR, DIVERGE_PATIENCE

    spec = tiny(pretrain={"steps": 20, "eta": 1e10, "record_every": 1}, dtype="float64")
    res = Trainer(spec, [0]).run()
    assert res.status == ["diverged"] and res.diverged_step[0] >= DIVERGE_PATIENCE
    traj = res.trajectory
    assert traj["train_loss"].map(math.isfinite).all() and traj["eval_loss"].map(math.isfinite).all()
    assert traj["train_loss"].max() > DIVERGE_FACTOR * traj["train_loss"].iloc[0]  # finite, yet far above
    assert traj["step"].max() < res.diverged_step[0]  # nothing recorded from the declared step on
    # the same task with a sane step stays "ok": the rule does not fire on ordinary training
    assert Trainer(tiny(pretrain={"steps": 20, "eta": 0.5}, dtype="float64"), [0]).run().status == ["ok"]


def test_a_single_loss_spike_is_not_a_divergence():
    """One step far above the bound (a heavy-tailed batch) followed by recovery: still "ok"."""
    from groupsparse.training.divergence import DIVERGE_PATIENCE

    trainer = Trainer(tiny(pretrain={"steps": 20, "eta": 0.5}), [0, 1])
    step_grads, calls = trainer.rule.step_grads, []

    def one_spike(drawn):
        loss, grads = step_grads(drawn)
        calls.append(1)
        if len(calls) in (3, 3 + DIVERGE_PATIENCE):  # two isolated spikes, never PATIENCE in a row
            loss = loss * 1000
        return loss, grads

    trainer.rule.step_grads = one_spike
    res = trainer.run()
    assert res.status == ["ok", "ok"]


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


def inf_gradient_at(*args, bad_step: int = 3) -> Trainer:
    """A trainer whose seed 0's v-gradient becomes +inf at step ``bad_step`` (an overflow in the backward pass)."""
    trainer = Trainer(*args)
    step_grads, calls = trainer.rule.step_grads, []

    def overflowing(drawn):  # run's gradients (loss_and_grads off the fast path)
        loss, grads = step_grads(drawn)
        calls.append(1)
        if len(calls) == bad_step + 1:
            grads = dict(grads, v=grads["v"].clone())
            grads["v"][0] = float("inf")
        return loss, grads

    trainer.rule.step_grads = overflowing
    return trainer


def test_diverged_seed_is_frozen_and_others_unaffected():
    spec = tiny(pretrain={"steps": 12, "eta": 2.0})
    res = inf_gradient_at(spec, [0, 1]).run()
    assert res.status == ["diverged", "ok"] and res.diverged_step == [3, -1]
    # seed 0 keeps the parameters it had when its gradient broke (eta * inf * 0 must not leak NaN)
    upto = Trainer(tiny(pretrain={"steps": 3, "eta": 2.0}), [0]).run()
    for k in res.params:
        assert torch.isfinite(res.params[k][0]).all(), k
        assert torch.equal(res.params[k][0], upto.params[k][0]), k
    alone = Trainer(spec, [1]).run()
    assert_same_run(res, alone, 1, 0, seed=1)


# --- data and seeding -----------------------------------------------------------------------


def test_accuracy_at_the_zero_start_is_chance_not_zero():
    """f = 0 for every input at W = 0, v = 0: a tie is a coin flip and counts 1/2 (the figures drew 0.0)."""
    res = Trainer(tiny(pretrain={"steps": 2, "record_every": 1}), [0, 1]).run()
    start = res.trajectory[res.trajectory["step"] == 0]
    assert (start["eval_accuracy"] == 0.5).all()


def test_resume_state_saved_by_wall_time_resumes_bit_identically(tmp_path):
    """resume_seconds = 0: a state after every step whatever resume_every says (a long run's wall-time
    trigger); killed at batch 25, the run resumes from step 24 and ends as the uninterrupted one."""
    spec = tiny(pretrain={"steps": 40, "record_every": 3, "attention_checkpoints": 4})
    seeds = [0, 1]
    reference = Trainer(spec, seeds).run()
    state = tmp_path / "resume.safetensors"
    with pytest.raises(Interrupted):
        stops_after(spec, seeds, resume_path=state, resume_every=10**6, resume_seconds=0.0).run()
    tensors, meta = io.load_checkpoint(state)
    assert meta["step"] == 24 and "rows" not in meta  # the recorded rows travel as tensors, not JSON
    assert tensors["rows"].shape[0] == 2 * sum(s < 24 for s in record_steps(40, 3))  # rows before step 24
    resumed = Trainer(spec, seeds, resume_path=state, resume_every=10**6, resume_seconds=0.0).run()
    assert resumed.resumed_from_step == 24
    assert_same_run(reference, resumed, 0, 0)
    assert_same_run(reference, resumed, 1, 1)


def test_resume_reads_a_state_with_json_rows(tmp_path):
    """A resume state written before the rows were stored as tensors (rows in its JSON) still resumes."""
    spec = tiny(pretrain={"steps": 40, "record_every": 3, "attention_checkpoints": 4})
    reference = Trainer(spec, [0]).run()
    state = tmp_path / "resume.safetensors"
    with pytest.raises(Interrupted):
        stops_after(spec, [0], resume_path=state, resume_every=10).run()
    tensors, meta = io.load_checkpoint(state)
    old = Trainer(spec, [0], resume_path=state)
    old_meta = old.resume.read(old.rule, old.device)  # rows as dicts
    meta |= {"rows": old_meta["rows"], "attention_rows": old_meta["attention_rows"]}
    io.save_checkpoint(state, {k: t for k, t in tensors.items() if "rows" not in k}, meta)
    resumed = Trainer(spec, [0], resume_path=state, resume_every=10).run()
    assert resumed.resumed_from_step == 20
    assert_same_run(reference, resumed, 0, 0)
