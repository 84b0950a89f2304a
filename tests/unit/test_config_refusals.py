"""Parse-time refusals that are one line naming the key or path."""

from __future__ import annotations

import copy

import pytest
import yaml

from groupsparse.study import outputs, preflight

from conftest import REPO, tiny_config

SCHEMA = yaml.safe_load((REPO / "src/groupsparse/config/config.schema.yaml").read_text())


def refusal(config: dict, tmp_path) -> str:
    with pytest.raises(preflight.StudyRefused) as err:
        preflight.check_study(copy.deepcopy(config), SCHEMA, results=str(tmp_path / "results"))
    message = str(err.value)
    assert "\n" not in message and len(message) < 600, message
    return message


def test_scaling_enabled_without_its_D_grid_is_refused_naming_the_key(tmp_path):
    config = tiny_config() | {"scaling": {"enabled": True}}
    message = refusal(config, tmp_path)
    assert "scaling.D_grid: required key is missing when scaling.enabled is true" in message


def test_scaling_switched_off_needs_no_D_grid(tmp_path):
    config = tiny_config() | {"scaling": {"enabled": False}}
    assert "base" in preflight.check_study(config, SCHEMA, results=str(tmp_path / "results"))


@pytest.mark.parametrize("enabled", [False, True])
def test_an_unknown_scaling_analysis_method_is_refused_whether_or_not_scaling_is_on(enabled, tmp_path):
    scaling = {"enabled": enabled, "analysis": {"methods": ["magic"]}}
    if enabled:
        scaling |= {"D_grid": [3], "task": {"d": 3}, "pretrain": {"seeds": 1, "seeds_per_job": 1, "steps": 10}}
        scaling["transfer"] = {"enabled": True, "sizes": [8], "methods": ["logreg"], "method_groups": {"a": ["logreg"]}}
    message = refusal(tiny_config() | {"scaling": scaling}, tmp_path)
    assert "scaling.analysis.methods[0]: 'magic' is not a transfer method" in message and "logreg" in message


def test_an_ablation_baseline_that_names_no_run_is_refused_with_ablations_off(tmp_path):
    config = tiny_config() | {"ablations": {"enabled": False, "analysis": {"baseline": "ablation_typo"}}}
    assert "ablations.analysis.baseline: 'ablation_typo' is not an ablation run" in refusal(config, tmp_path)


def test_every_written_path_of_the_wrong_type_is_named(tmp_path):
    results = tmp_path / "results" / "s"
    files = [results / "tables" / "summary.csv", results / "pretrain" / "base" / "seeds0-1.safetensors"]
    assert outputs.wrong_type_problem(results, files) is None  # nothing there yet
    results.mkdir(parents=True)
    (results / "tables").write_text("a file where a folder goes")
    assert outputs.wrong_type_problem(results, files) == (
        f"{(results / 'tables').resolve()}: the study writes into this folder, but it is a file; move it away"
    )
    (results / "tables").unlink()
    (results / "pretrain" / "base" / "seeds0-1.safetensors").mkdir(parents=True)
    problem = outputs.wrong_type_problem(results, files)
    assert problem.startswith(f"{(results / 'pretrain/base/seeds0-1.safetensors').resolve()}: the study writes a file")


@pytest.mark.parametrize("section", ["transfer", "scaling.transfer", "ablations.transfer"])
def test_an_unknown_method_in_a_switched_off_transfer_section_is_refused(section, tmp_path):
    config = tiny_config()
    node = config
    for part in section.split(".")[:-1]:
        node = node.setdefault(part, {"enabled": False})
    node[section.split(".")[-1]] = {"enabled": False, "methods": ["logreg", "magik"]}
    assert f"{section}.methods[1]: 'magik' is not a transfer method" in refusal(config, tmp_path)


def test_an_ablation_base_task_that_is_no_task_is_refused_with_ablations_off(tmp_path):
    variants = {"v": {"task": {"features": "gaussian"}}}
    config = tiny_config() | {"ablations": {"enabled": False, "base_task": "nope", "variants": variants}}
    assert "ablations.base_task: 'nope' is not a task; tasks: base" in refusal(config, tmp_path)


def test_a_study_without_ablations_needs_no_task_named_base(tmp_path):
    config = tiny_config()
    config["tasks"] = {"other": config["tasks"].pop("base")}
    assert list(preflight.check_study(config, SCHEMA, results=str(tmp_path / "results"))) == ["other"]


def test_a_verdict_target_outside_the_accuracy_targets_is_refused_naming_both_keys(tmp_path):
    """Every verdict the README quotes is made at scaling.analysis.accuracy_targets: its one target must be one."""
    analysis = {"accuracy_targets": [0.8, 0.9], "verdict_target": 0.85}
    message = refusal(tiny_config() | {"scaling": {"enabled": False, "analysis": analysis}}, tmp_path)
    assert "scaling.analysis.verdict_target: 0.85 is not one of scaling.analysis.accuracy_targets (0.8, 0.9)" in message
    analysis["verdict_target"] = 0.8
    config = tiny_config() | {"scaling": {"enabled": False, "analysis": analysis}}
    assert "base" in preflight.check_study(config, SCHEMA, results=str(tmp_path / "results"))
