"""Every command the documentation shows is one the tools accept: snakemake flags exist in
`snakemake --help`, the workflow's own profiles are given with --workflow-profile (with
--profile the default profile's settings would win), and groupsparse subcommands and options
exist in the CLI's parser."""

from __future__ import annotations

import re
import shlex
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from groupsparse import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = [
    REPO / "README.md",
    REPO / "benchmarks/README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "configs").glob("*.yaml")),
    REPO / "config.yaml",
    *sorted((REPO / "workflow/profiles").glob("*/config.yaml")),
    REPO / ".ci/run",
]


def documented_commands() -> list[tuple[str, str]]:
    """(where, command) for every `snakemake ...` / `groupsparse ...` in a code span, and every line
    of a code block, indented block or comment that starts with one and gives an option;
    backslash continuations joined."""
    found = []
    for path in DOCS:
        if not path.exists():
            continue
        text = re.sub(r"\\\n\s*#?\s*", " ", path.read_text())  # join continued lines
        for lineno, line in enumerate(text.splitlines(), 1):
            commands = re.findall(r"`((?:snakemake|groupsparse) [^`]*)`", line)
            commands += re.findall(r"&& ((?:snakemake|groupsparse) [^`&]*)", line)
            start = re.match(r"^[#\s$]*((?:snakemake|groupsparse) .*)$", line)
            if start and " -" in start.group(1) and not commands:
                commands.append(start.group(1).split("  #")[0].split("&&")[0])
            for command in commands:
                if re.match(r"^\S+ <", command):  # a form with a placeholder command (`groupsparse <cmd>: ...`)
                    continue
                command = re.sub(r"<[^>]*>", "X", command.strip().rstrip(".,;:"))  # placeholders
                found.append((f"{path.relative_to(REPO)}:{lineno}", command))
    return found


COMMANDS = documented_commands()


@lru_cache(maxsize=1)
def snakemake_flags() -> set[str]:
    out = subprocess.run(["snakemake", "--help"], capture_output=True, text=True, timeout=120).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out))


def test_the_documentation_shows_both_tools():
    tools = {command.split()[0] for _, command in COMMANDS}
    assert tools == {"snakemake", "groupsparse"} and len(COMMANDS) >= 10, COMMANDS


@pytest.mark.parametrize(
    "where,command",
    [c for c in COMMANDS if c[1].startswith("snakemake")],
    ids=[c[0] for c in COMMANDS if c[1].startswith("snakemake")],
)
def test_documented_snakemake_commands_use_real_flags(where, command):
    words = shlex.split(command, comments=False)
    unknown = [w.split("=")[0] for w in words if w.startswith("--") and w.split("=")[0] not in snakemake_flags()]
    assert not unknown, f"{where}: {command!r} uses {unknown}"
    for i, word in enumerate(words[:-1]):
        if word == "--profile":
            assert not words[i + 1].startswith("workflow/profiles"), (
                f"{where}: the workflow's own profile needs --workflow-profile, not --profile: {command!r}"
            )


@pytest.mark.parametrize(
    "where,command",
    [c for c in COMMANDS if c[1].startswith("groupsparse")],
    ids=[c[0] for c in COMMANDS if c[1].startswith("groupsparse")],
)
def test_documented_groupsparse_commands_parse(where, command):
    words = shlex.split(command)[1:]
    parser = cli.build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    assert words and words[0] in subcommands, f"{where}: no subcommand {words[:1]} in {sorted(subcommands)}"
    options = {s for action in subcommands[words[0]]._actions for s in action.option_strings}
    unknown = [w.split("=")[0] for w in words if w.startswith("--") and w.split("=")[0] not in options]
    assert not unknown, f"{where}: {command!r} uses {unknown}"


SCRIPT = REPO / ".ci" / "documented-commands.sh"


@pytest.mark.parametrize(
    "where,command",
    [c for c in COMMANDS if c[0].startswith(("README.md", "docs/usage.md"))],
    ids=[c[0] for c in COMMANDS if c[0].startswith(("README.md", "docs/usage.md"))],
)
def test_ci_runs_every_command_of_the_readme_and_usage_page(where, command):
    """.ci/documented-commands.sh (run by .ci/run) runs each such command's subcommand, flags and config,
    or says under "Not run here" why not."""
    script = SCRIPT.read_text()
    ran, skipped = script.split("# Not run here", 1)
    words = shlex.split(command)
    if words[0] == "groupsparse":
        assert f"groupsparse {words[1]}" in ran, f"{where}: {command!r}: no `groupsparse {words[1]}` in {SCRIPT.name}"
        return
    parts = [w for w in words[1:] if w.startswith("-") or w.endswith(".yaml")]
    if any(w in skipped for w in words[1:] if "/" in w and not w.endswith(".yaml")):
        return  # e.g. the Slurm profile: named under "Not run here"
    missing = [w for w in parts if w.split("=")[0] not in ran and w not in ("all",)]
    assert not missing, f"{where}: {command!r}: {SCRIPT.name} never uses {missing}"


def test_ci_calls_the_documented_commands_script():
    assert "bash .ci/documented-commands.sh" in (REPO / ".ci" / "run").read_text()
