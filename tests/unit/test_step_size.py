"""The step-size rule eta(D) = min(eta, eta_D_limit / D) has one definition (``config.specs.step_size``),
which the run spec, the study's planner, the commands and the cost model call."""

from __future__ import annotations

import ast

import pytest

from groupsparse import costs
from groupsparse.config.specs import RunSpec, step_size
from groupsparse.study.runs import expand

from conftest import REPO

SOURCES = [*(REPO / "src" / "groupsparse").rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
HOME = REPO / "src" / "groupsparse" / "config" / "specs.py"
# each caller of the rule, by the module that must call it
CALLERS = {
    "the run spec": "config/specs.py",
    "the planner": "study/runs.py",
    "a command": "commands/transverse.py",
    "the cost model": "costs/work.py",
}


def names_the_limit(node: ast.AST) -> bool:
    """Whether an expression reads eta_D_limit (an attribute, a name or a key)."""
    return any(
        (isinstance(n, ast.Attribute) and n.attr == "eta_D_limit")
        or (isinstance(n, ast.Name) and n.id == "eta_D_limit")
        or (isinstance(n, ast.Constant) and n.value == "eta_D_limit")
        for n in ast.walk(node)
    )


def divisions_by_D_of_the_limit(path) -> list[int]:
    """Lines of ``path`` where eta_D_limit is divided by something: the rule written out again."""
    tree = ast.parse(path.read_text())
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and names_the_limit(n.left)
    ]


def test_the_rule_is_written_once():
    found = {str(p.relative_to(REPO)): lines for p in SOURCES if (lines := divisions_by_D_of_the_limit(p))}
    home = str(HOME.relative_to(REPO))
    assert set(found) == {home} and len(found[home]) == 1, found


def test_every_caller_calls_it():
    package = REPO / "src" / "groupsparse"
    for who, module in CALLERS.items():
        tree = ast.parse((package / module).read_text())
        calls = {
            n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
        }
        assert "step_size" in calls, f"{who} ({module}) does not call step_size"


def test_the_check_sees_the_rule_written_again(tmp_path):
    """The first test can fail: a module that writes min(eta, eta_D_limit / D) itself is found."""
    stray = tmp_path / "stray.py"
    stray.write_text("def eta(p, D):\n    return min(p['eta'], p['eta_D_limit'] / D)\n")
    assert divisions_by_D_of_the_limit(stray) == [2]


@pytest.mark.parametrize("eta, limit, D, want", [(0.5, None, 64, 0.5), (0.5, 6, 8, 0.5), (0.5, 6, 24, 0.25)])
def test_every_caller_gives_the_same_step_size(eta, limit, D, want):
    """The rule's value through the run spec, the planner (steps for a flow time) and the cost model."""
    assert step_size(eta, limit, D) == want
    pre = {"eta": eta, "eta_D_limit": limit, "steps": 10}
    spec = RunSpec.from_dict({"study_seed": 1, "task_name": "t", "task": {"d": 4, "D": D}, "pretrain": pre})
    assert spec.pretrain.step_size(D) == want
    assert costs.describe_pretrain(spec.to_dict(), 1)["eta"] == want
    config = {
        "study_seed": 1,
        "tasks": {"base": {"task": {"d": 4, "D": 4}}},
        "pretrain": {"eta": eta, "eta_D_limit": limit, "steps": 10, "seeds": 1, "seeds_per_job": 1},
        "transfer": {"enabled": False},
        "scaling": {"enabled": True, "d_grid": [4], "D_grid": [D], "flow_time_per_D3": 1},
    }
    run = expand(config)[f"scale_d4_D{D}"]
    assert run.spec["pretrain"]["steps"] == max(10, -(-(D**3) // want))  # ceil(D^3 / eta(D))
