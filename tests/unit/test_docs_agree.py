"""The pages say the same thing where they say the same thing, and what the workflow does.

Each check reads every page (README.md, docs/*.md) for one command or claim several of them share:
the report command (every study but the default needs its --configfile), whether the workflow downloads
CIFAR-10, the states `groupsparse status` prints, the guarantees of docs/reliability.md and the tests
named for them. The estimate's job count against snakemake's: tests/workflow/test_estimate_count.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from groupsparse.study import jobstate

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def page_texts() -> dict[str, str]:
    return {str(p.relative_to(REPO)): re.sub(r"\s+", " ", p.read_text()) for p in PAGES}


def study_name_of(config_files: list[str]) -> str:
    """The study a config (or several, merged in order) names: its study_name, else the first file's stem."""
    name = None
    for path in config_files:
        name = (yaml.safe_load((REPO / path).read_text()) or {}).get("study_name", name)
    return name or Path(config_files[0]).stem


def test_every_report_command_names_the_config_of_its_study():
    """`snakemake --report results/<study>/report.html` reads the study's config: the default study's
    without --configfile, any other's only with it (without, snakemake reads config.yaml and fails on a
    table the default study has and this one has not)."""
    found = []
    for where, text in page_texts().items():
        for command in re.findall(r"`?(snakemake --report \S+(?: [^`#|]*)?)`?", text):
            words = shlex.split(command.split(" #")[0])
            report = Path(words[2])
            configs = words[words.index("--configfile") + 1 :] if "--configfile" in words else []
            configs = [c for c in configs if c.endswith(".yaml")]
            study = study_name_of(configs) if configs else "default"
            found.append(where)
            assert report.parts[:2] == ("results", study), f"{where}: {command!r} reports {report} of study {study}"
    assert len(found) >= 3, found  # the README's, the usage page's two


def test_the_pages_agree_with_the_workflow_on_downloading_cifar10():
    """The workflow downloads CIFAR-10 once where task.path does not exist (rule fetch_cifar10): no page may
    say it never downloads, and the README and the usage page both say it does."""
    assert "rule fetch_cifar10:" in (REPO / "workflow/rules/images.smk").read_text()
    texts = page_texts()
    for where, text in texts.items():
        assert not re.search(r"never download", text, re.I), f"{where} says the workflow never downloads"
    for where in ("README.md", "docs/usage.md"):
        assert re.search(r"downloads CIFAR-10 once", texts[where]), f"{where} does not say CIFAR-10 is downloaded"


def test_the_pages_name_only_states_status_prints():
    """`groupsparse status` reads done, running, interrupted, failed, not started from snakemake's records;
    a page describing it names no other state (it once printed "stalled?" from a log's age)."""
    for where, text in page_texts().items():
        for sentence in re.findall(r"[^.|]*groupsparse status[^.|]*", text):
            assert "stalled" not in sentence, f"{where}: {sentence!r}"
    usage = page_texts()["docs/usage.md"]
    row = re.search(r"\| `groupsparse status` \|[^|]*\|", usage).group(0)
    missing = [s for s in jobstate.STATES if s not in row]
    assert not missing, f"docs/usage.md's status row does not name {missing}"


def test_every_test_reliability_md_names_exists():
    """Each guarantee of docs/reliability.md names the tests that show it, as path::name: each exists."""
    text = (REPO / "docs/reliability.md").read_text()
    named = re.findall(r"(tests/[\w/]+\.py)::(\w+)", text)
    assert len(named) >= 10, named
    for path, name in named:
        source = (REPO / path).read_text()
        assert re.search(rf"^(async )?def {name}\(", source, re.M), f"docs/reliability.md names {path}::{name}"
