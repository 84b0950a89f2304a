"""The study's settings schema (config.schema.yaml beside this module): the one home of ranges, enums and defaults.

The Snakefile validates a whole study against it at parse time; the commands, which can also be
called directly with a run spec, validate that spec against the same file's ``$defs`` here, so a
range or an enum is written once. The file ships inside the package (package data), so an installed
package validates as the workflow does; workflow/schemas/config.schema.yaml is a link to it, where
the Snakemake workflow template keeps a schema. Torch-free.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path
from typing import Any

from .errors import ConfigError

# What an error message may quote of a bad value: a YAML alias bomb must not be printed whole.
MAX_SHOWN = 120
SCHEMA_PATH = Path(__file__).resolve().parent / "config.schema.yaml"


@functools.cache
def study_schema() -> dict[str, Any]:
    """The parsed schema file."""
    if not SCHEMA_PATH.is_file():
        raise ConfigError(f"schema: {SCHEMA_PATH} not found (a broken install of groupsparse: reinstall it)")
    return load_yaml(SCHEMA_PATH.read_text())


def load_yaml(text: str) -> Any:
    """yaml.safe_load's tree, by libyaml's loader where PyYAML has it: the schema in 9 ms instead of 80 (every
    command and the Snakefile's parse read it)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


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
            **full["$defs"]["run_labels"]["properties"],
        },
        "required": ["study_seed", "task_name"],
        "additionalProperties": False,
    }


def schema_defaults(definition: str | None = None, **given: Any) -> dict[str, Any]:
    """The schema's defaults of ``$defs/<definition>`` (of the top level when None), the one place they
    are written; with ``given`` values that meet the definition's ``if`` (``kind="images"``), also the
    defaults its ``then`` sets for them."""
    full = study_schema()
    sub = full["$defs"][definition] if definition else full

    def of(schema: dict[str, Any]) -> dict[str, Any]:
        return {
            key: copy.deepcopy(prop["default"])
            for key, prop in schema.get("properties", {}).items()
            if "default" in prop
        }

    out = of(sub)
    when = (sub.get("if") or {}).get("properties") or {}
    if given and when and all(key in given and given[key] == cond.get("const") for key, cond in when.items()):
        out |= of(sub["then"])
    return out


def schema_property(key: str) -> dict[str, Any]:
    """The schema of a dotted key of the study config (``jobs.pretrain_resume_every``, ``transfer.test_size``;
    ``task.d``: a key of a ``$defs`` entry, here a task's), its ``$ref`` resolved; KeyError if no such key."""
    full = study_schema()
    first = key.split(".", 1)[0]
    sub: dict[str, Any] = full if first in full["properties"] else {"properties": full["$defs"]}
    for part in key.split("."):
        while "$ref" in sub and "properties" not in sub:
            sub = {**full["$defs"][sub["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in sub.items() if k != "$ref"}}
        if part not in sub.get("properties", {}):
            raise KeyError(f"{key}: not a key of the schema")
        sub = sub["properties"][part]
    return sub


def default_of(key: str) -> Any:
    """The schema's default of a dotted key (see schema_property); KeyError if it has none."""
    prop = schema_property(key)
    if "default" not in prop:
        raise KeyError(f"{key}: the schema gives no default")
    return copy.deepcopy(prop["default"])


def check_study(config: Any) -> None:
    """ConfigError naming the key if a study config breaks the schema (the Snakefile's check, for direct callers)."""
    if not isinstance(config, dict):
        raise ConfigError(f"study: must be a mapping, got {type(config).__name__}")
    problem = schema_problem(json.loads(json.dumps(config, default=str)), study_schema())
    if problem:
        raise ConfigError(problem)


def check_run_spec(raw: Any) -> None:
    """ConfigError naming the key if a run spec dict breaks the schema's ranges, enums or types."""
    if not isinstance(raw, dict):
        raise ConfigError(f"run spec: must be a mapping, got {type(raw).__name__}")
    plain = json.loads(json.dumps(raw, default=str))  # tuples (a spec's to_dict) become JSON arrays
    problem = schema_problem(plain, run_spec_schema())
    if problem:
        raise ConfigError(problem)


def section_problem(raw: Any, definition: str) -> str | None:
    """The first problem of ``raw`` against the schema's ``$defs/<definition>`` (keys relative to it), or None."""
    plain = json.loads(json.dumps(raw if raw is not None else {}, default=str))
    full = study_schema()
    return schema_problem(plain, {"$defs": full["$defs"], "$ref": f"#/$defs/{definition}"})


# --- checking a config against it, in one line a person can act on ----------------------------


def _key(path) -> str:
    """jsonschema's path deque -> 'pretrain.steps' / 'transfer.sizes[1]' / "tasks['a b']"."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not str(part).isidentifier():  # a key a user could not read back as written
            out += f"[{shown(part)}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def one_line(message: str, limit: int = 600) -> str:
    """``message`` with control characters escaped and cut to ``limit``: a refusal is one line."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _allowed(schema: dict[str, Any]) -> str:
    """What a (sub)schema accepts, in words: 'integer >= 1', 'one of a, b', 'keys: x, y'."""
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    kinds = schema.get("type", "string" if "pattern" in schema else None)
    words = [" or ".join(kinds) if isinstance(kinds, list) else str(kinds)] if kinds else []
    bounds = [
        f"{op} {schema[bound]}"
        for bound, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if bound in schema
    ]
    if bounds:
        words.append(" and ".join(bounds))
    if "minItems" in schema:
        words.append(f"with at least {schema['minItems']} item(s)")
    if "pattern" in schema:
        words.append(f"matching {schema['pattern']}")
    if schema.get("properties") and schema.get("additionalProperties") is False:
        words.append("with keys " + ", ".join(sorted(schema["properties"])))
    return " ".join(words) or "see src/groupsparse/config/config.schema.yaml"


def shown(value: Any) -> str:
    """repr(value), cut to MAX_SHOWN characters (one line, whatever the value holds)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def strict_validator(schema: dict[str, Any]):
    """A JSON-schema validator whose `integer` refuses 2.0 and whose `number` refuses inf and nan.

    Draft 2020-12 counts 2.0 as an integer and has no notion of a finite number; both let values
    through that later fail inside a job (`seeds: 2.0`, `sigma_x: .inf`, `near_one: .nan`)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine_many(
        {
            "integer": lambda _, x: isinstance(x, int) and not isinstance(x, bool),
            "number": lambda _, x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x),
        }
    )
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


def schema_problem(config: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The most relevant JSON-schema violation as 'key: problem; allowed: ...', or None."""
    import jsonschema

    error = jsonschema.exceptions.best_match(strict_validator(schema).iter_errors(config))
    if error is None:
        return None
    where, sub, kind = list(error.absolute_path), error.schema, error.validator
    if kind == "additionalProperties":
        unexpected = sorted(set(error.instance) - set(sub.get("properties", {})))
        return (
            f"{_key(where + unexpected[:1])}: unknown key; allowed keys: {', '.join(sorted(sub.get('properties', {})))}"
        )
    if kind == "required":
        missing = [k for k in sub["required"] if k not in error.instance]
        when = f" when {_key(where + ['enabled'])} is true" if "then" in error.schema_path else ""
        return (
            f"{_key(where + missing[:1])}: required key is missing{when}; required keys: {', '.join(sub['required'])}"
        )
    if kind == "propertyNames":
        return f"{_key(where)}: bad name {shown(error.instance)}; allowed: names {_allowed(sub['propertyNames'])}"
    if kind == "minProperties":
        return f"{_key(where)}: needs at least {sub['minProperties']} entry"
    if (
        kind in ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        and isinstance(error.instance, float)
        and not math.isfinite(error.instance)
    ):
        return f"{_key(where)}: got {error.instance}; allowed: a finite {_allowed(sub)}"
    return f"{_key(where)}: got {shown(error.instance)}; allowed: {_allowed(sub)}"


# --- config files: read strictly, before their values are trusted ---------------------------


# Sections that override the study-level section of the same kind (a task's own `transfer:`, the
# scaling grid's `pretrain:`, ...): defaults are filled at the study level only, or a filled-in
# default would silently replace the study's own value when the two are merged.
OVERRIDE_DEFS = ("#/$defs/task", "#/$defs/model", "#/$defs/pretrain", "#/$defs/transfer")


def fill_defaults(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """Fill in the schema's `default`s in place (the schema is the one place a default is written),
    except inside override sections below the top level (see OVERRIDE_DEFS) and those marked
    ``x-filled: false`` (their readers take them from schema_defaults). Call on a config that validates."""

    def resolve(sub: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in sub:
            target: Any = schema
            for part in sub["$ref"].lstrip("#/").split("/"):
                target = target[part]
            sub = {**target, **{k: v for k, v in sub.items() if k != "$ref"}}
        return sub

    def fill(node: Any, sub: dict[str, Any], depth: int) -> None:
        if not isinstance(node, dict):
            return
        sub = resolve(sub)
        props = sub.get("properties") or {}
        for name, prop in props.items():
            if name not in node and "default" in prop and prop.get("x-filled", True):
                node[name] = copy.deepcopy(prop["default"])
            if name in node and not (depth > 0 and prop.get("$ref") in OVERRIDE_DEFS):
                fill(node[name], prop, depth + 1)
        extra = sub.get("additionalProperties")
        if isinstance(extra, dict):
            for name, value in node.items():
                if name not in props:
                    fill(value, extra, depth + 1)

    fill(config, schema, 0)
