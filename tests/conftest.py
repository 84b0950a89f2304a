"""Shared test helpers: the repository's paths, a snakemake runner, one torch thread, tiny run specs.

Tests live in ``unit/`` (in-process, seconds) and ``workflow/`` (snakemake runs; the long ones are
marked ``slow``, the Slurm ones ``slurm``). Plain helpers here are imported with ``from conftest import ...``.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TINY_PATH = REPO / "configs" / "tiny.yaml"


XDIST_MISMATCH = (
    "pytest-xdist's --dist loadgroup would ignore every xdist_group with this pytest (pytest-xdist tags a group on "
    "Node._nodeid, which pytest 9.2 replaced): a group's module fixture (a Slurm cluster, a reference study) would run "
    "once per worker. pyproject.toml pins pytest below 9.2 for this reason"
)


def pytest_configure(config):
    """On the controller, before any worker starts: refuse a pytest whose nodes pytest-xdist cannot group."""
    from _pytest.nodes import Node

    if getattr(config.option, "dist", "no") == "loadgroup" and "_nodeid" not in getattr(Node, "__slots__", ()):
        raise pytest.UsageError(XDIST_MISMATCH)


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook, which tags each grouped test's id
def pytest_collection_modifyitems(config, items):
    """Refuse to run when --dist loadgroup ignores the xdist_group marks: a group's module fixture (a Slurm
    cluster, a reference study) would then run once per worker, and two Slurm clusters contend for one machine."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers under --dist loadgroup
        return
    lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"{len(lost)} grouped tests untagged (first: {lost[0]}): {XDIST_MISMATCH}")


def tiny_config() -> dict:
    """The tiny study (configs/tiny.yaml) as a fresh dict."""
    return yaml.safe_load(TINY_PATH.read_text())


def snakemake_cmd(workdir: Path, *configfiles: Path, extra=(), cores: int = 2) -> list[str]:
    """The study's snakemake command in ``workdir`` (``--configfile`` last: it takes every argument after it)."""
    return [
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--cores",
        str(cores),
        "-d",
        str(workdir),
        *extra,
        "--configfile",
        *map(str, configfiles),
    ]


def run_snakemake(*args: str, cwd: Path = REPO, timeout: int = 900) -> subprocess.CompletedProcess:
    """``snakemake -s Snakefile *args``, output captured."""
    cmd = ["snakemake", "-s", str(REPO / "Snakefile"), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def tiny_spec_dict(
    task=None,
    model=None,
    pretrain=None,
    *,
    study_seed: int = 11,
    task_name: str = "tiny",
    d: int = 4,
    D: int = 4,
    **top,
) -> dict:
    """A run spec dict for a tiny problem (short training); overrides merge per section."""
    return {
        "study_seed": study_seed,
        "task_name": task_name,
        "task": {"d": d, "D": D, **(task or {})},
        "model": dict(model or {}),
        "pretrain": {"steps": 20, "batch": 64, "eval_size": 64, "record_every": 5, **(pretrain or {})},
        **top,
    }


def tiny_spec(task=None, model=None, pretrain=None, **top):
    """:func:`tiny_spec_dict` as a validated RunSpec."""
    from groupsparse.config.specs import RunSpec

    return RunSpec.from_dict(tiny_spec_dict(task, model, pretrain, **top))


def drop_timing(df):
    """A table without its timing columns (the only ones allowed to differ between identical runs)."""
    from groupsparse.io import files as io

    return df.drop(columns=[c for c in io.TIMING_COLUMNS if c in df.columns])


def assert_same_run(a, b, ia: int = 0, ib: int = 0, seed: int | None = None):
    """Seed ia of pretraining result a and seed ib of result b: bit-identical parameters and tables."""
    import pandas as pd
    import torch

    for k in a.params:
        assert torch.equal(a.params[k][ia], b.params[k][ib]), k
    ta, tb = drop_timing(a.trajectory), drop_timing(b.trajectory)
    aa, ab = a.attention, b.attention
    if seed is not None:
        ta, tb = ta[ta.seed == seed], tb[tb.seed == seed]
        aa, ab = aa[aa.seed == seed], ab[ab.seed == seed]
    pd.testing.assert_frame_equal(ta.reset_index(drop=True), tb.reset_index(drop=True), check_exact=True)
    pd.testing.assert_frame_equal(aa.reset_index(drop=True), ab.reset_index(drop=True), check_exact=True)


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder``: sha256 and mtime (ns), to show that nothing was touched."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for the module (tests compare numbers across runs), restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
