"""The study's settings schema (workflow/schemas/config.schema.yaml): the one home of ranges, enums and defaults.

The Snakefile validates a whole study against it at parse time; the commands, which can also be
called directly with a run spec, validate that spec against the same file's ``$defs`` here, so a
range or an enum is written once. The file is read from the checkout the package is installed
from (``pip install -e``): the workflow and the package are one repository, and a copy shipped as
package data could drift from the file the workflow validates with. Torch-free.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .errors import ConfigError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


@functools.cache
def study_schema() -> dict[str, Any]:
    """The parsed schema file."""
    import yaml

    if not SCHEMA_PATH.is_file():
        raise ConfigError(f"schema: {SCHEMA_PATH} not found (groupsparse must be installed from its checkout)")
    return yaml.safe_load(SCHEMA_PATH.read_text())


@functools.cache
def run_spec_schema() -> dict[str, Any]:
    """A run spec's sections checked by the study's own definitions (task, model, pretrain, dtype, device)."""
    full = study_schema()
    top = full["properties"]
    return {
        "$defs": full["$defs"],
        "type": "object",
        "properties": {
            "study_seed": top["study_seed"],
            "task_name": {"type": "string", "minLength": 1},
            "task": {"$ref": "#/$defs/task"},
            "model": {"$ref": "#/$defs/model"},
            "pretrain": {"$ref": "#/$defs/pretrain"},
            "dtype": top["dtype"],
            "device": top["device"],
        },
    }


def check_study(config: Any) -> None:
    """ConfigError naming the key if a study config breaks the schema (the Snakefile's check, for direct callers)."""
    from .preflight import schema_problem

    if not isinstance(config, dict):
        raise ConfigError(f"study: must be a mapping, got {type(config).__name__}")
    problem = schema_problem(json.loads(json.dumps(config, default=str)), study_schema())
    if problem:
        raise ConfigError(problem)


def check_run_spec(raw: Any) -> None:
    """ConfigError naming the key if a run spec dict breaks the schema's ranges, enums or types."""
    from .preflight import schema_problem

    if not isinstance(raw, dict):
        raise ConfigError(f"run spec: must be a mapping, got {type(raw).__name__}")
    plain = json.loads(json.dumps(raw, default=str))  # tuples (a spec's to_dict) become JSON arrays
    problem = schema_problem(plain, run_spec_schema())
    if problem:
        raise ConfigError(problem)
