"""Checks the Snakefile runs at parse time, before any job: a bad study fails in seconds.

Torch-free. Each problem is one line naming the config key (or file) and what is allowed,
instead of a JSON-schema dump or a traceback from a job half an hour in.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

# the files of an extracted cifar-10-python.tar.gz (images.py reads them; kept here, torch-free,
# so the same check runs at parse time and before loading)
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
CIFAR_FILES = ("batches.meta",) + CIFAR_BATCHES


def _key(path) -> str:
    """jsonschema's path deque -> 'pretrain.steps' / 'transfer.sizes[1]'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _allowed(schema: dict[str, Any]) -> str:
    """What a (sub)schema accepts, in words: 'integer >= 1', 'one of a, b', 'keys: x, y'."""
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    kinds = schema.get("type", "string" if "pattern" in schema else None)
    words = [" or ".join(kinds) if isinstance(kinds, list) else str(kinds)] if kinds else []
    bounds = [f"{op} {schema[bound]}" for bound, op in
              (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
              if bound in schema]
    if bounds:
        words.append(" and ".join(bounds))
    if "minItems" in schema:
        words.append(f"with at least {schema['minItems']} item(s)")
    if "pattern" in schema:
        words.append(f"matching {schema['pattern']}")
    if schema.get("properties") and schema.get("additionalProperties") is False:
        words.append("with keys " + ", ".join(sorted(schema["properties"])))
    return " ".join(words) or "see workflow/schemas/config.schema.yaml"


def schema_problem(config: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The most relevant JSON-schema violation as 'key: problem; allowed: ...', or None."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return None
    where, sub, kind = list(error.absolute_path), error.schema, error.validator
    if kind == "additionalProperties":
        unexpected = sorted(set(error.instance) - set(sub.get("properties", {})))
        return (f"{_key(where + unexpected[:1])}: unknown key; allowed keys: "
                f"{', '.join(sorted(sub.get('properties', {})))}")
    if kind == "required":
        missing = [k for k in sub["required"] if k not in error.instance]
        return f"{_key(where + missing[:1])}: required key is missing; required keys: {', '.join(sub['required'])}"
    if kind == "propertyNames":
        return f"{_key(where)}: bad name {error.instance!r}; allowed: names {_allowed(sub['propertyNames'])}"
    if kind == "minProperties":
        return f"{_key(where)}: needs at least {sub['minProperties']} entry"
    return f"{_key(where)}: got {error.instance!r}; allowed: {_allowed(sub)}"


def cifar_folder(path: str | os.PathLike) -> Path:
    """``path`` itself, or the cifar-10-batches-py folder inside it."""
    folder = Path(path).expanduser()
    return folder / CIFAR_FOLDER if (folder / CIFAR_FOLDER).is_dir() else folder


def cifar_folder_problem(path: str, where: str) -> str | None:
    """None if ``path`` is (or holds) a complete cifar-10-batches-py folder, else why not."""
    folder = cifar_folder(path)
    if not folder.is_dir():
        return (f"{where}: {path!r} is not a folder (resolved from {Path.cwd()}); allowed: the extracted "
                f"{CIFAR_FOLDER} folder or its parent (download cifar-10-python.tar.gz yourself; "
                "the workflow never downloads)")
    missing = [name for name in CIFAR_FILES if not (folder / name).is_file()]
    if missing:
        return f"{where}: {folder} is an incomplete {CIFAR_FOLDER} folder, missing {', '.join(missing)}"
    return None


def input_problems(runs: dict[str, Any], where_of) -> list[str]:
    """Input files the study reads but cannot find (CIFAR-10 batches)."""
    problems = []
    for name, run in runs.items():
        task = run.spec["task"]
        if task.get("kind") == "images" and task.get("dataset") == "cifar10":
            problem = cifar_folder_problem(task.get("path", ""), f"{where_of(name)}.task.path")
            if problem and problem not in problems:
                problems.append(problem)
    return problems


def results_problem(results: str | os.PathLike = "results") -> str | None:
    """None if the results folder can be written (it, or the folder that will hold it), else why not."""
    results = Path(results)
    if results.exists() and not results.is_dir():
        return f"{results.resolve()}: the results folder is a file, not a folder; move it away"
    probe_dir = results if results.is_dir() else results.resolve().parent
    try:  # os.access says yes to root on a read-only or immutable folder; a real write does not lie
        with tempfile.TemporaryFile(dir=probe_dir, prefix=".groupsparse-write-probe."):
            pass
    except OSError as exc:
        return (f"{probe_dir.resolve()}: the results folder is not writable ({exc.strerror}); "
                "run from a folder you can write (snakemake --directory DIR), or fix its permissions")
    return None
