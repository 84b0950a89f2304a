"""Corrupt or mismatched inputs are refused by name and overwrite nothing; thread counts change no number."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from groupsparse.io import files as io

from conftest import snapshot, tiny_config

TINY = tiny_config()
PAPER_METHODS = ["pretrained_finetune", "pretrained_frozen_W", "scratch_transformer"]
TABLE_TARGET = "results/provenance.json"  # the aggregate rule: every table, no figures
CHUNK = "0-1"
RESUME_FILE = f"results/pretrain/base/.seeds{CHUNK}.resume.safetensors"
PRETRAIN_OUTPUTS = [
    f"results/pretrain/base/seeds{CHUNK}{ext}" for ext in (".safetensors", ".trajectory.parquet", ".attention.parquet")
]
WAIT_S = 240


def test_on_diverge_fail_exits_non_zero_and_writes_no_checkpoint(tmp_path):
    spec = {
        "study_seed": 7,
        "task_name": "base",
        "task": {"d": 4, "D": 4},
        "pretrain": {"steps": 30, "batch": 64, "eval_size": 64, "eta": 1e20, "on_diverge": "fail"},
    }
    res = subprocess.run(
        [
            "groupsparse",
            "pretrain",
            "--spec",
            json.dumps(spec),
            "--seeds",
            "0-1",
            "--checkpoint",
            str(tmp_path / "c.safetensors"),
            "--trajectory",
            str(tmp_path / "t.parquet"),
            "--attention",
            str(tmp_path / "a.parquet"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 3, res.stderr
    assert "pretrain.eta" in res.stderr and "on_diverge: record" in res.stderr
    assert not (tmp_path / "c.safetensors").exists()


# -- corrupt inputs --------------------------------------------------------------------------


def _small_spec(**pretrain):
    from groupsparse.config.specs import RunSpec

    return RunSpec.from_dict(
        {
            "study_seed": 3,
            "task_name": "base",
            "task": {"d": 3, "D": 4},
            "pretrain": {"steps": 40, "batch": 32, "eval_size": 32, "record_every": 10, "attention_checkpoints": 2}
            | pretrain,
        }
    )


def save_small_checkpoint(spec, folder: Path) -> Path:
    """Pretrain ``spec`` in-process and save checkpoint and tables as the pretrain command does."""
    from groupsparse.training.pretrain import Trainer, checkpoint_payload

    res = Trainer(spec, [0, 1]).run()
    tensors, meta = checkpoint_payload(spec, res, [0, 1])
    prov = io.provenance(spec.science_hash(), "cpu")
    io.save_checkpoint(folder / "ck.safetensors", tensors, meta | {"provenance": prov})
    io.write_parquet(res.trajectory.assign(wall_seconds=0.0, role=spec.role), folder / "traj.parquet", prov)
    io.write_parquet(res.attention.assign(role=spec.role), folder / "att.parquet", prov)
    return folder / "ck.safetensors"


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """A real pretraining checkpoint and tables of a small run."""
    folder, spec = tmp_path_factory.mktemp("small"), _small_spec()
    save_small_checkpoint(spec, folder)
    return folder, spec


def truncate(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return dst


def test_stale_or_truncated_resume_state_is_discarded_and_a_good_one_is_used(tmp_path, monkeypatch):
    """A resume state from another config, or a damaged one, must never be continued from."""
    from groupsparse.training.pretrain import Trainer
    from groupsparse.training.resume import ResumeStore

    spec, other = _small_spec(), _small_spec(eta=0.25)
    fresh = Trainer(spec, [0, 1]).run().trajectory
    fresh_other = Trainer(other, [0, 1]).run().trajectory
    state = tmp_path / "state.safetensors"
    real_save = ResumeStore.save

    def save_then_die(self, *args):  # a job killed right after its first saved state
        real_save(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(ResumeStore, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        Trainer(spec, [0, 1], resume_path=state, resume_every=10).run()
    monkeypatch.setattr(ResumeStore, "save", real_save)
    assert state.exists()
    saved = state.read_bytes()

    res = Trainer(other, [0, 1], resume_path=state, resume_every=10).run()  # another config's state
    assert res.resumed_from_step == 0
    pd.testing.assert_frame_equal(res.trajectory, fresh_other, check_exact=True)

    state.write_bytes(saved[: len(saved) // 2])  # damaged state
    res = Trainer(spec, [0, 1], resume_path=state, resume_every=10).run()
    assert res.resumed_from_step == 0
    pd.testing.assert_frame_equal(res.trajectory, fresh, check_exact=True)

    state.write_bytes(saved)  # the intact state: continued, same numbers
    res = Trainer(spec, [0, 1], resume_path=state, resume_every=10).run()
    assert res.resumed_from_step == 10
    pd.testing.assert_frame_equal(res.trajectory, fresh, check_exact=True)
    assert not state.exists()


def test_truncated_checkpoint_is_refused_naming_the_file(small_checkpoint, tmp_path):
    folder, _ = small_checkpoint
    bad = truncate(folder / "ck.safetensors", tmp_path / "truncated.safetensors")
    with pytest.raises(io.InputError, match=re.escape(str(bad))):
        io.load_checkpoint(bad)


def _transfer(spec, checkpoint: Path, out: Path) -> subprocess.CompletedProcess:
    payload = {"run": spec.to_dict(), "transfer": {"test_size": 100}}
    return subprocess.run(
        [
            "groupsparse",
            "transfer",
            "--spec",
            json.dumps(payload),
            "--checkpoint",
            str(checkpoint),
            "--methods",
            "logreg",
            "--sizes",
            "8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_transfer_rows_name_their_run_so_runs_sharing_a_task_never_merge(small_checkpoint, tmp_path):
    """Ablation runs share their base task's data (same task_name); without the run's name in
    every transfer row, the summary would silently average different models together."""
    from groupsparse.analysis.summary import transfer_summary
    from groupsparse.config.specs import RunSpec

    _, spec = small_checkpoint
    variant = RunSpec.from_dict(spec.to_dict() | {"run_name": "ablation_x"})
    checkpoint = save_small_checkpoint(variant, tmp_path)
    out = tmp_path / "t.parquet"
    res = _transfer(variant, checkpoint, out)
    assert res.returncode == 0, res.stderr[-2000:]
    table = io.read_parquet(out)
    assert "run" in table and set(table["run"]) == {"ablation_x"}
    both = pd.concat([table, table.assign(run="ablation_y", test_accuracy=1.0)], ignore_index=True)
    summary = transfer_summary(both)
    assert set(summary["run"]) == {"ablation_x", "ablation_y"}
    assert (summary.loc[summary["run"] == "ablation_y", "mean_test_accuracy"] == 1.0).all()


@pytest.mark.parametrize("fault", ["truncated", "other_config"])
def test_transfer_refuses_a_bad_checkpoint_and_overwrites_nothing(fault, small_checkpoint, tmp_path):
    folder, spec = small_checkpoint
    if fault == "truncated":
        checkpoint = truncate(folder / "ck.safetensors", tmp_path / "truncated.safetensors")
        expected = "not a readable groupsparse checkpoint"
    else:  # the checkpoint is fine, but it was pretrained with another learning rate
        checkpoint, spec = folder / "ck.safetensors", _small_spec(eta=0.25)
        expected = "pretrained with another configuration"
    out = tmp_path / "out.parquet"
    out.write_bytes(b"an earlier result")
    res = _transfer(spec, checkpoint, out)
    assert res.returncode == 4, res.stderr[-2000:]
    assert str(checkpoint) in res.stderr and expected in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert out.read_bytes() == b"an earlier result"


def test_aggregate_refuses_a_truncated_table_before_writing_anything(small_checkpoint, tmp_path):
    folder, _ = small_checkpoint
    out = tmp_path / "out"
    base = [
        "groupsparse",
        "aggregate",
        "--attention",
        str(folder / "att.parquet"),
        "--study-json",
        json.dumps({"study_seed": 3}),
        "--outdir",
        str(out / "tables"),
        "--provenance-json",
        str(out / "prov.json"),
    ]
    good = subprocess.run(
        base + ["--trajectories", str(folder / "traj.parquet")], capture_output=True, text=True, timeout=300
    )
    assert good.returncode == 0, good.stderr[-2000:]
    before = snapshot(out)
    bad = truncate(folder / "traj.parquet", tmp_path / "truncated.parquet")
    # a truncated pretraining table, and a truncated transfer table read after good pretraining ones
    good_traj = str(folder / "traj.parquet")
    for args in (["--trajectories", str(bad)], ["--trajectories", good_traj, "--transfer", str(bad)]):
        res = subprocess.run(base + args, capture_output=True, text=True, timeout=300)
        assert res.returncode == 4, res.stderr[-2000:]
        assert str(bad) in res.stderr and "not a readable Parquet table" in res.stderr, res.stderr[-2000:]
        assert snapshot(out) == before, "a refused aggregation rewrote earlier tables"


def test_cifar_batch_with_a_forbidden_class_is_refused_and_never_run(tmp_path):
    import pickle

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [n.encode() for n in names]}))
    marker = tmp_path / "code_ran"

    class Payload:  # unpickling this calls os.system: what a malicious "batch" would do
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        (folder / name).write_bytes(pickle.dumps({b"data": Payload(), b"labels": [0]}))
    spec = {
        "study_seed": 1,
        "task_name": "img",
        "pretrain": {"steps": 5, "sampling": "iid", "batch": 16, "eval_size": 16},
        "task": {
            "kind": "images",
            "dataset": "cifar10",
            "path": str(tmp_path),
            "classes": ["cat", "dog"],
            "transfer_classes": ["ship", "truck"],
            "D": 4,
            "d": 48,
        },
    }
    outputs = {k: tmp_path / f"earlier.{k}" for k in ("checkpoint", "trajectory", "attention")}
    for path in outputs.values():
        path.write_bytes(b"an earlier result")
    res = subprocess.run(
        [
            "groupsparse",
            "pretrain",
            "--spec",
            json.dumps(spec),
            "--seeds",
            "0",
            *[a for k, p in outputs.items() for a in (f"--{k}", str(p))],
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 4, res.stderr[-2000:]
    assert str(folder / "data_batch_1") in res.stderr and "refused to load class" in res.stderr, res.stderr[-2000:]
    assert "system" in res.stderr
    assert not marker.exists(), "unpickling ran code"
    assert all(p.read_bytes() == b"an earlier result" for p in outputs.values())


WRITER = textwrap.dedent("""
    import os, signal, sys
    import pandas as pd
    import pyarrow.parquet as pq
    from groupsparse.io import files as io
    real = pq.write_table
    def write_then_die(table, where, **kw):  # the process dies after writing, before the rename
        real(table, where, **kw)
        os.kill(os.getpid(), signal.SIGKILL)
    pq.write_table = write_then_die
    io.write_parquet(pd.DataFrame({"x": range(100000)}), sys.argv[1], {"config_hash": "new"})
""")


def test_a_writer_killed_mid_write_leaves_the_earlier_file_intact(tmp_path):
    target = tmp_path / "table.parquet"
    io.write_parquet(pd.DataFrame({"x": [1, 2, 3]}), target, {"config_hash": "old"})
    before = target.read_bytes()
    res = subprocess.run([sys.executable, "-c", WRITER, str(target)], capture_output=True, text=True, timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert target.read_bytes() == before
    assert io.read_provenance(target)["config_hash"] == "old"
    partial = list(tmp_path.glob(".table.parquet.*.tmp"))
    assert len(partial) == 1  # the killed write's temporary file, never at the declared path
    # the next run of the job (a new process) removes the leftover when it writes the table again
    rewrite = "import sys, pandas as pd; from groupsparse.io import files as io; "
    rewrite += "io.write_parquet(pd.DataFrame({'x': [4]}), sys.argv[1], {'config_hash': 'again'})"
    res = subprocess.run([sys.executable, "-c", rewrite, str(target)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert list(tmp_path.glob(".table.parquet.*.tmp")) == []
    assert io.read_provenance(target)["config_hash"] == "again"


def test_a_live_writers_temporary_file_is_left_alone(tmp_path):
    """Only files last written before this process started are leftovers: one written now is not."""
    live = tmp_path / ".table.parquet.abc.tmp"
    live.write_text("being written")
    assert io.remove_leftovers(tmp_path / "table.parquet") == [] and live.exists()


def test_a_cuda_job_without_a_gpu_is_one_line_naming_the_device_setting(monkeypatch, capsys, tmp_path):
    import torch

    from groupsparse.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = _small_spec().to_dict() | {"device": "cuda"}
    args = ["pretrain", "--spec", json.dumps(spec), "--seeds", "0-0", "--checkpoint", str(tmp_path / "c.safetensors")]
    args += ["--trajectory", str(tmp_path / "t.parquet"), "--attention", str(tmp_path / "a.parquet")]
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code != 0 and "\n" not in err, err
    assert err.startswith("groupsparse pretrain: bad setting: device: 'cuda'") and "device: cpu" in err, err
    assert "internal error" not in err and not (tmp_path / "c.safetensors").exists()


def test_thread_count_changes_no_number():
    """What --cores changes inside a job: torch's thread count (snakemake caps threads at --cores)."""
    import torch

    from groupsparse.training.pretrain import Trainer

    spec, runs = _small_spec(), []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            res = Trainer(spec, [0, 1]).run()
            runs.append((res.trajectory, res.attention, {k: t.clone() for k, t in res.params.items()}))
    finally:
        torch.set_num_threads(before)
    (t1, a1, p1), (t2, a2, p2) = runs
    pd.testing.assert_frame_equal(t1, t2, check_exact=True)
    pd.testing.assert_frame_equal(a1, a2, check_exact=True)
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
