"""Property-based: any config is either refused before any job in one line that names a key, or
planned. Configs come from the schema itself (hypothesis-jsonschema) and from mutations of a valid
study (wrong types, non-finite numbers, floats for integers, unknown names, huge values).

Bounded and database-free so it takes well under a minute in CI.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from groupsparse.study import preflight

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "src/groupsparse/config/config.schema.yaml").read_text())
TINY = yaml.safe_load((REPO / "configs/tiny.yaml").read_text())
PROFILE = settings(
    max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def plan_or_refuse(cfg: dict, results: str) -> tuple[str, str]:
    """('planned', '') or ('refused', message); any other exception fails the property."""
    try:
        runs = preflight.check_study(copy.deepcopy(cfg), SCHEMA, results=results)
    except preflight.StudyRefused as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 800, message
        return "refused", message
    assert runs, "a planned study has runs"
    for run in runs.values():  # what the rules then read must be there
        assert run.chunks and run.spec["task"]
    return "planned", ""


def _leaves(node, path=()):
    """Every (path, value) of a config: the places a mutation can hit."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    yield path, node


def _set(cfg, path, value):
    node = cfg
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


BAD_VALUES = st.one_of(
    st.sampled_from(
        [
            math.inf,
            -math.inf,
            math.nan,
            2.0,
            500.0,
            1e300,
            -1,
            0,
            10**12,
            True,
            None,
            "",
            "x",
            "no_such_name",
            [],
            {},
            [1, 2],
            {"a": 1},
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.text(max_size=12),
)


def _live_config() -> dict:
    cfg = copy.deepcopy(TINY)
    cfg["scaling"] = {
        "enabled": True,
        "task": {"d": 3},
        "d_grid": [3],
        "D_grid": [3, 4],
        "pretrain": {"seeds": 1, "steps": 20, "batch": 64, "eval_size": 64},
        "transfer": {"enabled": True, "sizes": [8, 16], "methods": ["logreg"], "method_groups": {"s": ["logreg"]}},
        "analysis": {"methods": ["logreg"], "near_one": 0.9, "n_boot": 200},
    }
    cfg["ablations"] = {
        "enabled": True,
        "pretrain": {"seeds": 1, "steps": 20, "batch": 64, "eval_size": 64},
        "transfer": {"enabled": True, "sizes": [8], "methods": ["logreg"], "method_groups": {"a": ["logreg"]}},
        "variants": {"noisy": {"task": {"label_noise": 0.1}}},
        "analysis": {"baseline": "ablation_none", "sizes": [8]},
    }
    return cfg


LIVE = _live_config()
LEAVES = [p for p, _ in _leaves(LIVE) if p]


def test_the_live_config_is_planned(tmp_path):
    assert plan_or_refuse(LIVE, str(tmp_path / "r")) == ("planned", "")


@PROFILE
@given(path=st.sampled_from(LEAVES), value=BAD_VALUES)
def test_a_mutated_config_is_refused_naming_the_key_or_planned(path, value, tmp_path_factory):
    cfg = copy.deepcopy(LIVE)
    _set(cfg, path, value)
    outcome, message = plan_or_refuse(cfg, str(tmp_path_factory.getbasetemp() / "r"))
    if outcome == "refused":
        # the key the mutation hit, or a key that refers to it (its run, its section)
        named = [str(k) for k in path if not isinstance(k, int)]
        assert any(k in message for k in named), (path, value, message)


@pytest.mark.parametrize("section", ["pretrain", "model", "task", "transfer"])
def test_sections_generated_from_the_schema_are_refused_or_planned(section, tmp_path):
    strategy = from_schema({**SCHEMA["$defs"][section], "$defs": SCHEMA["$defs"]})

    @PROFILE
    @given(value=strategy)
    def check(value):
        cfg = copy.deepcopy(TINY)
        if section == "task":
            cfg["tasks"]["base"]["task"] = value
        elif section == "transfer":
            cfg["transfer"] = {**cfg["transfer"], **value}
        else:
            cfg[section] = value
        plan_or_refuse(cfg, str(tmp_path / "r"))

    check()


@pytest.mark.parametrize(
    "mutate,key",
    [
        (lambda c: c["pretrain"].__setitem__("seeds", 2.0), "pretrain.seeds"),
        (lambda c: c.setdefault("jobs", {}).__setitem__("pretrain_resume_every", 500.0), "jobs.pretrain_resume_every"),
        (lambda c: c["scaling"]["analysis"].__setitem__("n_boot", 2000.0), "scaling.analysis.n_boot"),
        (lambda c: c["scaling"]["analysis"].__setitem__("near_one", math.nan), "scaling.analysis.near_one"),
        (lambda c: c["tasks"]["base"]["task"].__setitem__("sigma_x", math.inf), "tasks.base.task.sigma_x"),
        (
            lambda c: c["ablations"]["variants"].__setitem__(
                "heavy", {"task": {"features": "student_t", "student_dof": math.inf}}
            ),
            "ablations.variants.heavy.task.student_dof",
        ),
        (
            lambda c: c["transfer"]["method_groups"].__setitem__("extra", ["no_such_method"]),
            "transfer.method_groups.extra",
        ),
        (
            lambda c: c["ablations"]["analysis"].__setitem__("baseline", "ablation_nothing"),
            "ablations.analysis.baseline",
        ),
        (lambda c: c["scaling"]["analysis"].__setitem__("methods", ["mlp"]), "scaling.analysis.methods[0]"),
        (lambda c: c["ablations"]["analysis"].__setitem__("sizes", [9]), "ablations.analysis.sizes[0]"),
        (lambda c: c["tasks"]["base"]["task"].__setitem__("D", 100000), "task.D = 100000"),  # ~90 TB: the cost model
        (lambda c: c["transfer"].__setitem__("test_size", 10**9), "transfer.test_size = 1000000000"),
    ],
)
def test_the_audits_examples_are_refused_naming_the_key(mutate, key, tmp_path):
    cfg = copy.deepcopy(LIVE)
    mutate(cfg)
    outcome, message = plan_or_refuse(cfg, str(tmp_path / "r"))
    assert outcome == "refused" and key in message, message


@pytest.mark.parametrize(
    "configfile", ["config.yaml", "configs/tiny.yaml", "configs/paper.yaml", "configs/scaling.yaml"]
)
def test_every_planned_job_spec_is_accepted_by_its_job(configfile, tmp_path):
    """What the Snakefile plans, the jobs accept: each run's spec (as the job reads it from its file)
    passes the job's own check (a digits spec whose classes became strings was refused in the job)."""
    from groupsparse.config.specs import RunSpec
    from groupsparse.transfer.spec import TransferSpec, check_transfer

    cfg = yaml.safe_load((REPO / configfile).read_text())
    for run in preflight.check_study(cfg, SCHEMA, results=str(tmp_path / "r")).values():
        RunSpec.from_dict(json.loads(run.spec_json))
        if run.transfer is not None:
            check_transfer(json.loads(run.transfer_json())["transfer"])
            TransferSpec.from_dict(json.loads(run.transfer_json())["transfer"])
