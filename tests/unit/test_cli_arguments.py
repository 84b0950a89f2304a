"""Every argument of every command is checked before any work, by the same rules as the workflow.

Generated from the commands' own argparse definitions (cli.build_parser): for each argument, the values
its domain refuses (commands/_args.py: a Domain type, the choices, or, for an argument that passes
straight into the run spec a command builds, its schema key's range) are fed to the command, one
argument at a time, on an otherwise valid command line; hypothesis draws them (and, for a number, values
beyond its range). Each must be refused in one line that names the argument, with a non-zero exit and no
traceback, before the command's work starts (the work is a stand-in that fails the test). An argument
added later is tested the same way; one whose domain cannot be told fails here until it has one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupsparse import cli
from groupsparse.commands import _args
from groupsparse.commands._specs import keys_reached_by

from conftest import REPO, tiny_spec_dict

EXAMPLES = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


class WorkStarted(BaseException):
    """The command's work was reached: a bad value got through every check (a BaseException, so that the
    CLI's one-line error handling cannot take it for a refusal)."""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Inputs that pass their arguments' checks (contents are read by the work, which never runs here)."""
    root = tmp_path_factory.mktemp("cli_arguments")
    spec = root / "spec.json"
    spec.write_text(json.dumps(tiny_spec_dict()))
    transfer = root / "transfer_spec.json"
    transfer.write_text(json.dumps({"run": tiny_spec_dict(), "transfer": {"test_size": 100}}))
    (root / "table.parquet").write_bytes(b"PAR1")
    (root / "checkpoint.safetensors").write_bytes(b"x")
    (root / "analysis.json").write_text("{}")
    (root / "results" / "study" / "tables").mkdir(parents=True)
    (root / "out").mkdir()
    return {"root": str(root), "spec": str(spec), "transfer": str(transfer)} | {
        name: str(root / name) for name in ("table.parquet", "checkpoint.safetensors", "analysis.json", "out")
    }


def valid_command_lines(f: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    """A valid command line of each command: option (or positional dest) -> values."""
    out, table, study = f["out"], f["table.parquet"], f"{f['root']}/results/study"
    return {
        "write-spec": {"--json": ["{}"], "--out": [f"{out}/spec.json"]},
        "pretrain": {
            "--spec": [f"@{f['spec']}"],
            "--seeds": ["0-1"],
            "--checkpoint": [f"{out}/c.safetensors"],
            "--trajectory": [f"{out}/t.parquet"],
            "--attention": [f"{out}/a.parquet"],
        },
        "transfer": {
            "--spec": [f"@{f['transfer']}"],
            "--checkpoint": [f["checkpoint.safetensors"]],
            "--out": [f"{out}/transfer.parquet"],
            "--methods": ["logreg"],
            "--sizes": ["8"],
        },
        "check-tables": {"--out": [f"{out}/checked"]},
        "aggregate": {
            "--trajectories": [table],
            "--attention": [table],
            "--study-json": ['{"study_seed": 1}'],
            "--outdir": [f"{out}/tables"],
        },
        "plot": {"--tables": [f["root"]], "--run": ["base"], "--outdir": [f"{out}/figures"]},
        "summary": {"table": [table]},
        "scaling": {
            "--trajectories": [table],
            "--out-claims": [f"{out}/claims.parquet"],
            "--out-fits": [f"{out}/fits.parquet"],
            "--figures": [f"{out}/scaling"],
            "--spec": [f["analysis.json"]],
        },
        "predict": {
            "--spec": [f["analysis.json"]],
            "--out": [f"{out}/predictions.parquet"],
            "--out-csv": [f"{out}/predictions.csv"],
        },
        "check-predictions": {"--predictions": [table], "--spec": [f["analysis.json"]], "--trajectories": [table]},
        "population": {"--d": ["4"], "--D": ["4"], "--steps": ["10"], "--out": [f"{out}/population.csv"]},
        "transverse": {"--D": ["4"], "--out": [f"{out}/transverse.csv"]},
        "image-figures": {
            "--spec": [f"@{f['spec']}"],
            "--checkpoint": [f["checkpoint.safetensors"]],
            "--attention": [table],
            "--outdir": [f"{out}/images"],
        },
        "snapshot": {"--results": [study], "--docs": [f"{out}/docs"], "--out": [f"{out}/results.md"]},
        "choices": {"--study": [str(REPO / "docs/STUDY.md")], "--config": [str(REPO / "config.yaml")]},
        "status": {"results": [study]},
        "estimate": {"--configfile": [str(REPO / "configs/tiny.yaml")]},
        "fetch": {"dataset": ["cifar10"], "--dest": [f"{out}/data"]},
        "review": {"results": [study]},
        "calibrate": {},
    }


def subparsers() -> dict[str, argparse.ArgumentParser]:
    return cli.build_parser()._subparsers._group_actions[0].choices


def argument_name(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def command_line(command: str, given: dict[str, list[str]]) -> list[str]:
    parser = subparsers()[command]
    positionals = [a.dest for a in parser._actions if not a.option_strings]
    argv = [command]
    for dest in positionals:
        argv += given.get(dest, [])
    for name, values in given.items():
        if name.startswith("-"):
            argv += [name, *values]
    return argv


def arguments() -> list[tuple[str, str]]:
    """(command, argument) for every argument of every command that takes a value."""
    out = []
    for command, parser in subparsers().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.nargs == 0:
                continue  # --help and flags: no value to refuse
            out.append((command, argument_name(action)))
    return out


def domain_of(command: str, action: argparse.Action, valid: dict[str, list[str]]):
    """The domain that tells this argument's bad values: its type, its choices, or its run spec key's."""
    if isinstance(action.type, _args.Domain):
        return action.type
    if action.choices is not None:
        return _args.Choice(action.choices, "choice")
    if action.type in (int, float):
        args = subparsers()[command].parse_args(command_line(command, valid)[1:])
        assert getattr(args, "specs_of", None), f"{command} {argument_name(action)}: a plain {action.type.__name__}"
        keys = keys_reached_by(args, action.dest)
        value = getattr(args, action.dest)
        specs = args.specs_of(args)
        # the key it passes straight into (a default of None: the one key it reaches)
        straight = [k for k in keys if all(values_at(s, k) == [value] for s in specs)] if value is not None else keys
        assert len(straight) == 1, (
            f"{command} {argument_name(action)}: reaches the run spec at {keys}, none or several as it is; "
            "give it a domain type from commands/_args.py"
        )
        return _args.setting(straight[0])
    raise AssertionError(f"{command} {argument_name(action)}: no domain (type {action.type}); give it one from _args")


def values_at(spec: dict, key: str) -> list:
    value = spec
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return [value]


def bad_value_strategy(domain, tmp: Path):
    bad = st.sampled_from(domain.bad_values(tmp))
    if isinstance(domain, _args.Number):
        if domain.minimum is not None:
            below = domain.minimum - (0 if domain.exclusive_minimum else 1)
            bad |= st.integers(max_value=int(below) if domain.kind is int else -(10**6), min_value=-(10**9)).map(str)
            if domain.kind is float:
                bad |= (
                    st.floats(max_value=domain.minimum, allow_nan=False, allow_infinity=False)
                    .filter(lambda x: x <= domain.minimum if domain.exclusive_minimum else x < domain.minimum)
                    .map(repr)
                )
        if domain.kind is int:
            bad |= st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)).map(repr)
    return bad


def test_every_argument_of_every_command_has_a_domain(files):
    valid = valid_command_lines(files)
    assert set(valid) == set(subparsers()), "a command without a valid command line here"
    for command, name in arguments():
        action = next(a for a in subparsers()[command]._actions if argument_name(a) == name)
        domain = domain_of(command, action, valid[command])
        assert domain.bad_values(Path(files["root"])), f"{command} {name}: its domain lists no bad value"


@pytest.mark.parametrize("command,name", arguments(), ids=[f"{c} {n}" for c, n in arguments()])
def test_a_bad_value_is_refused_in_one_line_naming_the_argument_before_any_work(
    command, name, files, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(REPO)  # the defaults (docs/STUDY.md, config.yaml) are paths in the repository
    valid = valid_command_lines(files)[command]
    action = next(a for a in subparsers()[command]._actions if argument_name(a) == name)
    domain = domain_of(command, action, valid)
    real_build = cli.build_parser

    def stand_in_work(args):
        raise WorkStarted(f"{command} started its work with {name} = {getattr(args, action.dest)!r}")

    def parser_without_work():
        parser = real_build()
        for each in parser._subparsers._group_actions[0].choices.values():
            each.set_defaults(func=stand_in_work)
        return parser

    monkeypatch.setattr(cli, "build_parser", parser_without_work)

    @EXAMPLES
    @given(bad=bad_value_strategy(domain, tmp_path))
    def refused(bad):
        argv = command_line(command, valid | {name: [bad]})
        try:
            code = cli.main(argv)
        except SystemExit as exit_:  # argparse's refusal of a value
            code = exit_.code
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert code not in (0, None), f"{argv}: accepted {bad!r}"
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"groupsparse {command}: ") and name in lines[0], lines[0]

    refused()
