"""No config string reaches a shell: generated from the schema, so a new string key is covered
without touching this file.

For every place in src/groupsparse/config/config.schema.yaml where a config may hold a string (a
string-typed value, an enum, an item of a string list, the name of a map entry), a config with that
place set to a value carrying shell syntax is either refused before any job with a message that
names the key, or runs the study with no marker file created.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from groupsparse.study import preflight

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "src/groupsparse/config/config.schema.yaml").read_text())
MARKER = "INJECTED_MARKER"
PAYLOADS = {
    "command substitution": f"$(touch {MARKER})x",
    "backticks": f"`touch {MARKER}`x",
    "semicolon": f"x; touch {MARKER}",
    "quotes": f"x' \"; touch {MARKER}; '",
    "newline": f"x\ntouch {MARKER}",
}


def base_config() -> dict:
    """The tiny study with every section live, so each schema branch has a value to replace."""
    cfg = yaml.safe_load((REPO / "configs/tiny.yaml").read_text())
    cfg["transfer"]["hyperparameters"] = {"logreg": {"C": 1.0}}
    cfg["transfer"]["grids"] = {"logreg": {"C": [0.1, 1.0]}}
    cfg["scaling"] = {
        "enabled": True,
        "task": {"d": 3},
        "d_grid": [3],
        "D_grid": [3],
        "pretrain": {"seeds": 1, "seeds_per_job": 1, "steps": 20, "batch": 64, "eval_size": 64},
        "transfer": {"enabled": True, "sizes": [8], "methods": ["logreg"], "method_groups": {"s": ["logreg"]}},
        "analysis": {"methods": ["logreg"], "downstream": ["transfer"]},
        "stability": {"d": 3, "seeds": 1, "steps_per_D3": 1, "variants": {"s": {"dtype": "float64"}}},
    }
    cfg["ablations"] = {
        "enabled": True,
        "base_task": "base",
        "pretrain": {"seeds": 1, "seeds_per_job": 1, "steps": 20, "batch": 64, "eval_size": 64},
        "transfer": {"enabled": True, "sizes": [8], "methods": ["logreg"], "method_groups": {"a": ["logreg"]}},
        "variants": {"v": {"task": {"features": "gaussian"}, "model": {"positions": "concat"}}},
        "analysis": {"baseline": "ablation_none", "sizes": [8]},
    }
    return cfg


def _resolve(schema: dict) -> dict:
    while "$ref" in schema:
        target = SCHEMA
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _takes_string(schema: dict) -> bool:
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "string" in kinds or "pattern" in schema:
        return True
    if any(isinstance(v, str) for v in schema.get("enum", [])):
        return True
    return any(_takes_string(_resolve(s)) for s in schema.get("anyOf", []) + schema.get("oneOf", []))


def string_places(schema=SCHEMA, path=()):
    """(path, how) for every place a string can stand: how is 'value' or 'key' (a map entry's name).
    A path step is a key, 0 for a list item, or '*' for 'any entry of this map'."""
    schema = _resolve(schema)
    if _takes_string(schema):
        yield path, "value"
    for name, sub in (schema.get("properties") or {}).items():
        yield from string_places(sub, path + (name,))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield from string_places(extra, path + ("*",))
    if "propertyNames" in schema:
        yield path, "key"
    if isinstance(schema.get("items"), dict):
        yield from string_places(schema["items"], path + (0,))
    for sub in schema.get("anyOf", []) + schema.get("oneOf", []):
        yield from ((p, h) for p, h in string_places(sub, path) if p != path)


PLACES = sorted({(p, h) for p, h in string_places()}, key=lambda ph: (str(ph[0]), ph[1]))


def _label(path, how) -> str:
    return ".".join(map(str, path)) + (" (name)" if how == "key" else "")


def _step(container: dict, step) -> str:
    """The key a path step stands for: '*' is the map's first entry (made if the map is empty)."""
    if step != "*":
        return step
    if not container:
        container["x"] = {}
    return next(iter(container))


def planted(path: tuple, how: str, payload: str) -> tuple[dict, str]:
    """The base config with ``payload`` planted at ``path``, and the key path a refusal must name."""
    cfg = base_config()
    named = ".".join(str(k) for k in path if k not in ("*", 0)) or "(top level)"
    if how == "value" and path[-1] == 0:  # an item of a list: a list of (two, for pairs) payloads
        parent_path, leaf = path[:-2], path[-2]
        value = [payload, payload]
    elif how == "value":
        parent_path, leaf, value = path[:-1], path[-1], payload
    else:  # the name of a map entry: rename the map's first entry
        parent_path, leaf, value = path, None, None
    container = cfg
    for step in parent_path:
        container = container.setdefault(_step(container, step), {})
    if leaf is None:
        first = _step(container, "*")
        container[payload] = container.pop(first)
    else:
        container[_step(container, leaf)] = value
    return cfg, named


def _names_key(message: str, named: str) -> bool:
    """The refusal names the key: every named step of the path stands in the message, in order."""
    at = 0
    for step in named.split("."):
        found = message.find(step, at)
        if found < 0:
            return False
        at = found + len(step)
    return True


def test_the_schema_walk_finds_the_string_keys_we_know_of():
    labels = {_label(p, h) for p, h in PLACES}
    for expected in [
        "ablations.analysis.baseline",
        "scaling.analysis.methods.0",
        "transfer.methods.0",
        "tasks (name)",
        "transfer.method_groups (name)",
        "tasks.*.task.path",
        "device",
    ]:
        assert expected in labels, sorted(labels)
    assert len(PLACES) >= 30


def _outcome(path, how, payload, tmp_path):
    cfg, named = planted(path, how, payload)
    try:
        preflight.check_study(copy.deepcopy(cfg), SCHEMA, results=str(tmp_path / "results"))
    except preflight.StudyRefused as exc:
        return "refused", str(exc), named, cfg
    return "accepted", "", named, cfg


@pytest.mark.parametrize("path,how", PLACES, ids=[_label(p, h) for p, h in PLACES])
def test_a_string_with_shell_syntax_is_refused_naming_its_key(path, how, tmp_path):
    """Every place refuses every payload at parse time (no string with shell syntax is accepted
    anywhere today; a place that must accept one needs its own test that runs the study)."""
    for label, payload in PAYLOADS.items():
        kind, message, named, cfg = _outcome(path, how, payload, tmp_path)
        assert kind == "refused", f"{label} at {_label(path, how)} was accepted"
        assert "\n" not in message, message
        assert len(message) < 600, message
        assert _names_key(message, named), f"{label}: {message!r} does not name {named}"
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize("key", ["ablations.analysis.baseline", "scaling.analysis.methods.0"])
def test_the_real_snakefile_refuses_before_any_job(key, tmp_path):
    """The Snakefile runs the same check: the audit's examples stop at parse time, nothing created."""
    path = tuple(int(k) if k.isdigit() else k for k in key.split("."))
    cfg, named = planted(path, "value", PAYLOADS["command substitution"])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        ["snakemake", "-s", str(REPO / "Snakefile"), "--configfile", "c.yaml", "--cores", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0
    line = next(x for x in (res.stdout + res.stderr).splitlines() if "invalid configuration" in x)
    assert _names_key(line, named), line
    assert not list(tmp_path.rglob(MARKER))
    assert not (tmp_path / "results").exists()
