"""Checks the Snakefile runs at parse time, before any job: a bad study fails in seconds.

Torch-free. Each problem is one line naming the config key (or file) and what is allowed,
instead of a JSON-schema dump or a traceback from a job half an hour in.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from pathlib import Path
from typing import Any

# What an error message may quote of a bad value: a YAML alias bomb must not be printed whole.
MAX_SHOWN = 120
# Nodes a config may hold once YAML aliases are expanded (the default study has about 400).
MAX_CONFIG_NODES = 100_000

# the files of an extracted cifar-10-python.tar.gz (images.py reads them; kept here, torch-free,
# so the same check runs at parse time and before loading)
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
CIFAR_FILES = ("batches.meta",) + CIFAR_BATCHES


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
    checker = base.TYPE_CHECKER.redefine_many({
        "integer": lambda _, x: isinstance(x, int) and not isinstance(x, bool),
        "number": lambda _, x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x),
    })
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
        return (f"{_key(where + unexpected[:1])}: unknown key; allowed keys: "
                f"{', '.join(sorted(sub.get('properties', {})))}")
    if kind == "required":
        missing = [k for k in sub["required"] if k not in error.instance]
        return f"{_key(where + missing[:1])}: required key is missing; required keys: {', '.join(sub['required'])}"
    if kind == "propertyNames":
        return f"{_key(where)}: bad name {shown(error.instance)}; allowed: names {_allowed(sub['propertyNames'])}"
    if kind == "minProperties":
        return f"{_key(where)}: needs at least {sub['minProperties']} entry"
    if kind in ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and isinstance(
            error.instance, float) and not math.isfinite(error.instance):
        return f"{_key(where)}: got {error.instance}; allowed: a finite {_allowed(sub)}"
    return f"{_key(where)}: got {shown(error.instance)}; allowed: {_allowed(sub)}"


# --- config files: read strictly, before their values are trusted ---------------------------

def _strict_loader():
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping (YAML lets the last one win)."""

        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    continue  # the base class reports unhashable keys
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {shown(key)} appears twice (first at line {seen[key] + 1})",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def expanded_size(value: Any, limit: int = MAX_CONFIG_NODES) -> int:
    """Nodes of ``value`` with every shared (aliased) part counted each time it is used, stopping
    at ``limit`` + 1: cheap even for a billion-laughs document, whose expansion is astronomic."""
    sizes: dict[int, int] = {}

    def size(v) -> int:
        if id(v) in sizes:
            return sizes[id(v)]
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[id(v)] = total = min(total, limit + 1)
        return total

    return size(value)


def config_file_problem(path: str | os.PathLike) -> str | None:
    """None if ``path`` is a readable UTF-8 YAML/JSON mapping without repeated keys or an alias
    expansion beyond MAX_CONFIG_NODES, else one line that names the file and the problem."""
    import yaml

    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        return f"{path}: cannot read the config file ({exc.strerror})"
    except UnicodeDecodeError as exc:
        return f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); save it as UTF-8"
    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{path}: not a valid config file{where}: {problem}"
    if not isinstance(data, dict):
        return f"{path}: a config file must be a mapping of keys to values, got {type(data).__name__}"
    if expanded_size(data) > MAX_CONFIG_NODES:
        return (f"{path}: the config expands to more than {MAX_CONFIG_NODES} values once its YAML "
                "aliases are resolved (an alias bomb?); write the values out")
    return None


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
    probe_dir = results.resolve()
    while not probe_dir.is_dir():  # the nearest folder that exists: results/<study> is made on demand
        if probe_dir.exists():
            return f"{probe_dir}: a file stands where the results folder must go; move it away"
        probe_dir = probe_dir.parent
    try:  # os.access says yes to root on a read-only or immutable folder; a real write does not lie
        with tempfile.TemporaryFile(dir=probe_dir, prefix=".groupsparse-write-probe."):
            pass
    except OSError as exc:
        return (f"{probe_dir.resolve()}: the results folder is not writable ({exc.strerror}); "
                "run from a folder you can write (snakemake --directory DIR), or fix its permissions")
    return None


# --- the whole parse-time check, as the Snakefile runs it ------------------------------------

def study_name(config: dict[str, Any], config_files=()) -> str:
    """The study's name, which names its results folder: the config's `study_name`, else the
    name of its first config file (configs/paper.yaml -> 'paper'). Raises StudyRefused when
    neither gives a usable name."""
    import re

    name = config.get("study_name")
    where = "study_name"
    if name is None:
        if not config_files:
            raise StudyRefused("invalid configuration: study_name: required when no config file names the study")
        name, where = Path(list(config_files)[0]).stem, f"study_name (from {list(config_files)[0]})"
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) or len(name) > 64:
        raise StudyRefused(f"invalid configuration: {where}: got {shown(name)}; allowed: a name matching "
                           "^[A-Za-z][A-Za-z0-9_]*$ (set study_name in the config)")
    return name


class StudyRefused(Exception):
    """A study that must not start; the message is one line naming the key, file or value."""


def fill_defaults(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """Fill in the schema's `default`s, recursively (the jsonschema documentation's recipe), so the
    schema is the one place a default is written. Call only on a config that validates."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    set_properties = base.VALIDATORS["properties"]

    def properties(validator, props, instance, schema_):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from set_properties(validator, props, instance, schema_)

    jsonschema.validators.extend(base, {"properties": properties})(schema).validate(config)


def reference_problems(config: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    """Names in the analysis settings that must refer to a run or a method, and do not."""
    problems = []
    scaling = config.get("scaling") or {}
    if scaling.get("enabled"):
        fitted = {m for run in runs.values() if run.role == "scaling" for m in run.methods}
        for i, method in enumerate((scaling.get("analysis") or {}).get("methods") or []):
            if method not in fitted:
                problems.append(f"scaling.analysis.methods[{i}]: {shown(method)} is not a transfer method of the "
                                f"scaling runs; they run: {', '.join(sorted(fitted)) or 'none (transfer is off)'}")
    ablations = config.get("ablations") or {}
    if ablations.get("enabled"):
        analysis = ablations.get("analysis") or {}
        baseline = analysis.get("baseline", "ablation_none")
        ablation_runs = sorted(r for r, run in runs.items() if run.role == "ablation")
        if baseline not in ablation_runs:
            problems.append(f"ablations.analysis.baseline: {shown(baseline)} is not an ablation run; "
                            f"runs: {', '.join(ablation_runs)}")
        sizes = {n for run in runs.values() if run.role == "ablation" for n in run.sizes}
        for i, n in enumerate(analysis.get("sizes") or []):
            if n not in sizes:
                problems.append(f"ablations.analysis.sizes[{i}]: {n} is not a transfer sample size of the "
                                f"ablation runs; they use: {', '.join(map(str, sorted(sizes))) or 'none'}")
    return problems


def check_study(config: dict[str, Any], schema: dict[str, Any], config_files=(), results="results") -> dict:
    """Everything the Snakefile checks before any job, in order; returns the runs (see study.expand)
    and fills in the schema's defaults, or raises StudyRefused with the first problem (one line)."""
    try:
        return _check_study(config, schema, config_files, results)
    except StudyRefused as exc:
        raise StudyRefused(one_line(str(exc))) from None


def _check_study(config, schema, config_files, results) -> dict:
    from .specs import ConfigError
    from .study import expand

    for path in config_files:
        problem = config_file_problem(path)
        if problem:
            raise StudyRefused(f"invalid configuration: {problem}")
    if expanded_size(config) > MAX_CONFIG_NODES:
        raise StudyRefused(f"invalid configuration: more than {MAX_CONFIG_NODES} values once YAML aliases "
                           "are resolved (an alias bomb?)")
    problem = schema_problem(config, schema)
    if problem:
        raise StudyRefused(f"invalid configuration: {problem}")
    fill_defaults(config, schema)
    try:
        runs = expand(config)
    except ConfigError as exc:
        raise StudyRefused(f"invalid configuration: {exc}") from None
    problems = reference_problems(config, runs)
    if problems:
        raise StudyRefused(f"invalid configuration: {problems[0]}")
    where = lambda r: f"tasks.{r}" if runs[r].role == "task" else f"run {r}"  # noqa: E731
    problems = input_problems(runs, where) + [p for p in [results_problem(results)] if p]
    if problems:
        raise StudyRefused("cannot run the study: " + "; ".join(problems))
    return runs
