"""A setting is validated once at parse time, with the whole study, and once more by the one job
that reads it from its spec file (a few milliseconds: no stamp lets a job skip it), so a spec file
edited or written by hand fails in one line naming the key. Every schema validation goes through
config.schema.strict_validator; the tests count the validations whose instance holds a setting.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from groupsparse import cli
from groupsparse.config import schema
from groupsparse.io import files as io
from groupsparse.study import preflight

from conftest import REPO, TINY_PATH, tiny_config, tiny_spec_dict

ETA = 0.4321  # pretrain.eta, a value no other setting of the tiny study holds
SIGMA = 1.2345  # transfer.sigma_x, likewise


class _Stop(Exception):
    """Raised by a stand-in for the job's work: the spec it was handed is all the test needs."""


def _holds(value, sentinel) -> bool:
    if isinstance(value, dict):
        return any(_holds(v, sentinel) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds(v, sentinel) for v in value)
    return isinstance(value, float) and value == sentinel


@pytest.fixture
def validations(monkeypatch):
    """The instances of every schema validation from now on."""
    seen, real = [], schema.strict_validator

    class Counting:
        def __init__(self, validator):
            self.validator = validator

        def iter_errors(self, instance):
            seen.append(instance)
            return self.validator.iter_errors(instance)

    monkeypatch.setattr(schema, "strict_validator", lambda sch: Counting(real(sch)))
    return seen


def _parse_time(tmp_path):
    """The Snakefile's parse (the study checked), then the spec files its `spec` jobs write."""
    config = tiny_config()
    config["pretrain"]["eta"] = ETA
    config["transfer"]["sigma_x"] = SIGMA
    runs = preflight.check_study(config, schema.study_schema(), config_files=[str(TINY_PATH)], results=str(tmp_path))
    run = runs["base"]
    written = []
    for stem, text in (("base.pretrain", run.spec_json), ("base.transfer", run.transfer_json())):
        path = io.content_path(tmp_path / "specs", stem, text)
        assert cli.main(["write-spec", "--json", text, "--out", str(path)]) == 0
        written.append(path)
    return tuple(written)


def _job_spec(monkeypatch, argv: list[str]):
    """The spec a job hands to its work: the command runs until then (its work is a stand-in)."""
    from groupsparse.commands import pretrain as pretrain_cmd
    from groupsparse.commands import transfer as transfer_cmd
    from groupsparse.training import pretrain as training
    from groupsparse.transfer import runner

    def stop(*args, **kwargs):
        raise _Stop(args)

    for module in (pretrain_cmd, transfer_cmd):
        monkeypatch.setattr(module, "set_threads", lambda n: None)
    monkeypatch.setattr(training, "Trainer", stop)
    monkeypatch.setattr(runner, "run_transfer", stop)
    args = cli.build_parser().parse_args(argv)
    with pytest.raises(_Stop) as stopped:
        args.func(args)
    return stopped.value.args[0]


def test_pretrain_eta_is_validated_at_parse_time_and_by_the_pretraining_job(tmp_path, monkeypatch, validations):
    spec_file, _ = _parse_time(tmp_path)
    assert sum(_holds(v, ETA) for v in validations) == 1  # the parse-time check of the whole study
    out = str(tmp_path / "out")
    spec, seeds = _job_spec(
        monkeypatch,
        ["pretrain", "--spec", f"@{spec_file}", "--seeds", "0-1", "--checkpoint", out]
        + ["--trajectory", out, "--attention", out],
    )
    assert spec.pretrain.eta == ETA and seeds == [0, 1]
    assert sum(_holds(v, ETA) for v in validations) == 2  # and the job's own, of its spec file


def test_transfer_settings_are_validated_at_parse_time_and_by_the_transfer_job(tmp_path, monkeypatch, validations):
    _, spec_file = _parse_time(tmp_path)
    out = str(tmp_path / "out")
    (tmp_path / "out").write_bytes(b"")  # the checkpoint must exist (an argument's check); its work is a stand-in
    run_spec, spec = _job_spec(
        monkeypatch, ["transfer", "--spec", f"@{spec_file}", "--checkpoint", out, "--out", out, "--sizes", "8"]
    )[:2]
    assert run_spec.pretrain.eta == ETA and spec.sigma_x == SIGMA
    assert sum(_holds(v, SIGMA) for v in validations) == 2
    assert sum(_holds(v, ETA) for v in validations) == 2


def test_a_spec_file_edited_afterwards_is_refused_in_one_line(tmp_path, capsys):
    spec_file, _ = _parse_time(tmp_path)
    spec_file.write_text(spec_file.read_text().replace(f'"eta":{ETA}', '"eta":-1'))
    out = str(tmp_path / "out")
    code = cli.main(
        ["pretrain", "--spec", f"@{spec_file}", "--seeds", "0", "--checkpoint", out]
        + ["--trajectory", out, "--attention", out]
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert (
        code == cli.EXIT_CONFIG
        and len(err) == 1
        and err[0].startswith("groupsparse pretrain: bad setting: pretrain.eta: got -1;")
    )


def test_a_hand_written_bad_spec_file_fails_in_one_line_naming_the_key(tmp_path):
    bad = tmp_path / "spec.json"
    bad.write_text(json.dumps(tiny_spec_dict(pretrain={"eta": -1})))
    out = str(tmp_path / "out")
    res = subprocess.run(
        [sys.executable, "-m", "groupsparse.cli", "pretrain", "--spec", f"@{bad}", "--seeds", "0"]
        + ["--checkpoint", out, "--trajectory", out, "--attention", out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == cli.EXIT_CONFIG, res.stderr
    assert len(lines) == 1 and lines[0].startswith("groupsparse pretrain: bad setting: pretrain.eta: got -1;"), (
        res.stderr
    )


def test_a_spec_file_is_named_by_its_bytes(tmp_path, capsys):
    """write-spec writes the bytes it is given, and refuses a name that is not their hash."""
    text = json.dumps(tiny_spec_dict(), sort_keys=True, separators=(",", ":"))
    path = io.content_path(tmp_path, "run.pretrain", text)
    assert cli.main(["write-spec", "--json", text, "--out", str(path)]) == 0 and path.read_text() == text
    wrong = tmp_path / "run.pretrain.000000000000.json"
    assert cli.main(["write-spec", "--json", text, "--out", str(wrong)]) == cli.EXIT_INPUT and not wrong.exists()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "not the hash" in err[0]


def test_every_schema_validation_goes_through_strict_validator():
    """What the counts above see is every validation: jsonschema is used in config/schema.py alone."""
    users = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "src").rglob("*.py")
        if "jsonschema" in p.read_text() and p.name != "schema.py"
    )
    assert users == []
