"""Defaults have one home, the schema (src/groupsparse/config/config.schema.yaml): every spec dataclass
takes its field defaults from it, nothing fills them twice, and docs/STUDY.md section 9, generated
from it by `groupsparse choices`, is in step with it and with config.yaml."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from groupsparse.config import choices, schema, specs
from groupsparse.transfer.spec import TransferSpec

from conftest import REPO

SPECS = [
    (specs.TaskSpec, schema.schema_defaults("task")),
    (specs.ImageTaskSpec, schema.schema_defaults("task", kind="images")),
    (specs.ModelSpec, schema.schema_defaults("model")),
    (specs.PretrainSpec, schema.schema_defaults("pretrain")),
    (TransferSpec, schema.schema_defaults("transfer")),
    (specs.RunSpec, schema.schema_defaults() | schema.schema_defaults("run_labels")),
]


@pytest.mark.parametrize("cls, defaults", SPECS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_default_of_a_spec_field_is_the_schemas(cls, defaults):
    plain = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    plain.pop("kind", None) if cls is specs.ImageTaskSpec else None  # the class's kind, not a default
    assert sorted(set(plain) - set(defaults)) == [], "fields with a default the schema does not give"
    wrong = {k: (v, defaults[k]) for k, v in plain.items() if (list(v) if isinstance(v, tuple) else v) != defaults[k]}
    assert wrong == {}


def test_docs_study_section_9_is_generated_from_the_schema_and_config_yaml():
    text = (REPO / "docs/STUDY.md").read_text()
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    assert choices.rewritten(text, config) == text, "docs/STUDY.md section 9 is stale: run `groupsparse choices`"


def test_every_key_the_table_names_is_a_key_of_the_schema():
    keys = [k for _, named, elsewhere in choices.ROWS if elsewhere is None for k in named]
    assert keys and [k for k in keys if not _is_key(k)] == []


def _is_key(key: str) -> bool:
    try:
        schema.schema_property(key)
    except KeyError:
        return False
    return True


def test_defaults_marked_unfilled_stay_out_of_the_config_and_its_spec_files(tmp_path):
    """`x-filled: false` defaults are read by their readers, not written in: a study that leaves
    transfer.test_size out keeps the same spec file bytes (which name its jobs)."""
    from groupsparse.study import preflight

    config = yaml.safe_load((REPO / "configs/tiny.yaml").read_text())
    config["transfer"].pop("test_size", None)
    runs = preflight.check_study(
        config, schema.study_schema(), results=str(tmp_path), config_files=[str(REPO / "configs/tiny.yaml")]
    )
    assert "test_size" not in config["transfer"] and "test_size" not in runs["base"].transfer_json()
    assert TransferSpec.from_dict(runs["base"].transfer).test_size == schema.default_of("transfer.test_size")
