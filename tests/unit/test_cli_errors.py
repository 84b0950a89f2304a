"""Every CLI error path prints one line `groupsparse <cmd>: <problem>` and exits non-zero; --debug
shows the traceback; crafted or foreign files are refused naming the file."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
from safetensors.torch import save_file

from groupsparse import cli
from groupsparse.config.specs import RunSpec
from groupsparse.io import files as io
from groupsparse.training.pretrain import Trainer, checkpoint_payload

from conftest import tiny_spec_dict


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "groupsparse.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def one_line_refusal(res, command: str, *needles: str) -> str:
    assert res.returncode != 0, res.stdout
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"groupsparse {command}: ") and "Traceback" not in res.stderr, res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ck")
    raw = tiny_spec_dict(pretrain={"steps": 5})
    spec = RunSpec.from_dict(raw)
    tensors, meta = checkpoint_payload(spec, Trainer(spec, [0, 1]).run(), [0, 1])
    io.save_checkpoint(folder / "ck.safetensors", tensors, meta)
    (folder / "spec.json").write_text(json.dumps({"run": raw, "transfer": {"test_size": 50}}))
    return folder, tensors, meta


def _crafted(folder, tensors, meta, name):
    path = folder / f"{name}.safetensors"
    if name == "metadata_not_an_object":
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), {"groupsparse": json.dumps([1, 2])})
    else:
        io.save_checkpoint(path, tensors, meta)
    return path


@pytest.mark.parametrize(
    "fault,needle",
    [
        ("W_wrong_shape", "parameter layer0.W has shape"),
        ("metadata_not_an_object", "not an object"),
        ("status_shorter_than_seeds", "one status per seed"),
    ],
)
def test_a_crafted_checkpoint_is_refused_in_one_line(checkpoint, tmp_path, fault, needle):
    folder, tensors, meta = checkpoint
    tensors, meta = dict(tensors), dict(meta)
    if fault == "W_wrong_shape":
        tensors["param.layer0.W"] = torch.zeros(2, 3, 3)
    if fault == "status_shorter_than_seeds":
        meta["status"] = ["ok"]
    path = _crafted(tmp_path, tensors, meta, fault)
    res = run_cli(
        "transfer",
        "--spec",
        f"@{folder / 'spec.json'}",
        "--checkpoint",
        str(path),
        "--methods",
        "logreg",
        "--sizes",
        "8",
        "--out",
        str(tmp_path / "out.parquet"),
    )
    one_line_refusal(res, "transfer", str(path), needle)
    assert not (tmp_path / "out.parquet").exists()


def test_a_foreign_parquet_is_refused_by_aggregate_naming_the_file(checkpoint, tmp_path):
    foreign = tmp_path / "foreign.parquet"
    io.write_parquet(pd.DataFrame({"x": [1]}), foreign, {})
    res = run_cli(
        "aggregate",
        "--trajectories",
        str(foreign),
        "--attention",
        str(foreign),
        "--study-json",
        json.dumps({"study_seed": 1}),
        "--outdir",
        str(tmp_path / "tables"),
    )
    one_line_refusal(res, "aggregate", str(foreign), "not a trajectory table")


def test_a_results_folder_that_is_a_file_is_one_line(tmp_path):
    table = tmp_path / "t.parquet"
    io.write_parquet(pd.DataFrame({"a": [1]}), table, {})
    (tmp_path / "tables").write_text("a file")
    res = run_cli("check-tables", "--out", str(tmp_path / "tables" / "marker"))
    one_line_refusal(res, "check-tables", "tables")


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "broken.parquet").write_text("not parquet")
    res = run_cli(
        "--debug", "check-tables", "--trajectories", str(tmp_path / "broken.parquet"), "--out", str(tmp_path / "m")
    )
    assert res.returncode != 0 and "Traceback" in res.stderr


def test_version_help_and_an_empty_selection(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("groupsparse ")
    table = tmp_path / "s.parquet"
    io.write_parquet(pd.DataFrame({"run": ["base", "digits"], "n": [8, 16]}), table, {})
    assert cli.main(["summary", str(table), "--where", "run=nothing"]) == 1
    out = capsys.readouterr().out
    assert "no rows" in out and "base, digits" in out and "Empty DataFrame" not in out


def test_snapshot_refuses_numbers_that_do_not_come_from_head(tmp_path, capsys):
    from groupsparse.io.report import results_commit_problem

    results = tmp_path / "results"
    results.mkdir()
    head = io.git_commit()
    for made_by, refused in (
        (head.removesuffix("+dirty") + "+dirty", True),
        ("0" * 40, True),
        (head, "+dirty" in head),
    ):
        (results / "provenance.json").write_text(json.dumps({"git_commit": made_by}))
        assert (results_commit_problem(results) is not None) == refused, made_by
    (results / "provenance.json").write_text(json.dumps({"git_commit": "0" * 40}))
    code = cli.main(["snapshot", "--results", str(results), "--out", str(tmp_path / "R.md")])
    err = capsys.readouterr().err
    assert code != 0 and ("HEAD" in err or "uncommitted" in err) and not (tmp_path / "R.md").exists()


EXIT_PROBE = """
import atexit, sys
from groupsparse import cli


class Teardown:  # collected only by the interpreter's teardown, which the command skips
    def __del__(self):
        print("teardown ran", flush=True)


sys.modules["__main__"].kept = Teardown()
atexit.register(lambda: print("exit handler ran"))
sys.argv = ["groupsparse", *sys.argv[1:]]
sys.exit(cli.main())
"""


@pytest.mark.parametrize("ok", [True, False], ids=["finished", "refused"])
def test_the_command_process_exits_with_its_code_and_whole_output_skipping_the_teardown(tmp_path, capsys, ok):
    """The console script's process leaves by os._exit: its code and every line it printed (through a pipe's
    buffer) come out as from the command run in-process, the exit handlers run, and the interpreter's teardown
    (seconds of torch and numba) does not."""
    table = tmp_path / "t.parquet"
    pd.DataFrame({"run": [f"r{i}" for i in range(3000)], "value": range(3000)}).to_parquet(table)
    args = ["summary", str(table), "--where", "run=r1" if ok else "run=nothing"]
    code = cli.main(args)
    want = capsys.readouterr()
    res = subprocess.run([sys.executable, "-c", EXIT_PROBE, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == code == (0 if ok else 1), res.stderr
    assert res.stdout == want.out + "exit handler ran\n" and res.stderr == want.err
    assert len(want.out + want.err) > 20
