"""Analysis settings for tests: the schema's defaults (their one home), with a test's overrides."""

from __future__ import annotations

from pathlib import Path

import yaml

from groupsparse.analysis.settings import Settings
from groupsparse.config.schema import fill_defaults

SCHEMA = Path(__file__).resolve().parents[2] / "src" / "groupsparse" / "config" / "config.schema.yaml"


def schema_config(**scaling_analysis) -> dict:
    """A config holding only the analysis sections, the schema's defaults filled in."""
    config = {"study_seed": 0, "scaling": {"analysis": dict(scaling_analysis)}, "ablations": {}}
    fill_defaults(config, yaml.safe_load(SCHEMA.read_text()))
    return config


def settings(**overrides) -> Settings:
    """The schema's default settings, ``overrides`` replacing fields (any Settings field)."""
    return Settings.from_spec(Settings.spec(schema_config())).replace(**overrides)
