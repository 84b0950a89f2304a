"""Checks the Snakefile runs at parse time, before any job: a bad study fails in seconds.

Torch-free. Each problem is one line naming the config key (or file) and what is allowed,
instead of a JSON-schema dump or a traceback from a job half an hour in.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..config.schema import fill_defaults, one_line, schema_problem, shown
from ..data.kinds import kind_of

# Nodes a config may hold once YAML aliases are expanded (the default study has about 400).
MAX_CONFIG_NODES = 100_000


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
                        None,
                        None,
                        f"key {shown(key)} appears twice (first at line {seen[key] + 1})",
                        key_node.start_mark,
                    )
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
        return (
            f"{path}: the config expands to more than {MAX_CONFIG_NODES} values once its YAML "
            "aliases are resolved (an alias bomb?); write the values out"
        )
    return None


def input_problems(runs: dict[str, Any], where_of) -> list[str]:
    """Input files the study reads but cannot find (its task kinds' data: CIFAR-10 batches)."""
    problems = []
    for name, run in runs.items():
        task = run.spec["task"]
        problem = kind_of(task).input_problem(task, f"{where_of(name)}.task")
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
            return f"{probe_dir}: the results folder is a file, not a folder; move it away"
        probe_dir = probe_dir.parent
    try:  # os.access says yes to root on a read-only or immutable folder; a real write does not lie
        with tempfile.TemporaryFile(dir=probe_dir, prefix=".groupsparse-write-probe."):
            pass
    except OSError as exc:
        return (
            f"{probe_dir.resolve()}: the results folder is not writable ({exc.strerror}); "
            "run from a folder you can write (snakemake --directory DIR), or fix its permissions"
        )
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
        raise StudyRefused(
            f"invalid configuration: {where}: got {shown(name)}; allowed: a name matching "
            "^[A-Za-z][A-Za-z0-9_]*$ (set study_name in the config)"
        )
    return name


class StudyRefused(Exception):
    """A study that must not start; the message is one line naming the key, file or value."""


def reference_problems(config: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    """Names in the analysis settings that must refer to a run or a method, and do not: checked
    whether or not their section is on (a name a switched-off section holds still reaches the
    analysis settings, and is wrong the day the section is switched on)."""
    from ..transfer.methods import method_names

    problems = []
    known = set(method_names())
    sections = [("transfer", config.get("transfer"))]
    sections += [(f"tasks.{name}.transfer", (entry or {}).get("transfer")) for name, entry in config["tasks"].items()]
    sections += [(f"{part}.transfer", (config.get(part) or {}).get("transfer")) for part in ("scaling", "ablations")]
    for where, section in sections:  # every transfer section, switched on or not
        section = section or {}
        named = [(f"{where}.methods[{i}]", m) for i, m in enumerate(section.get("methods") or [])]
        for group, members in (section.get("method_groups") or {}).items():
            named += [(f"{where}.method_groups.{group}[{i}]", m) for i, m in enumerate(members)]
        for key, name in named:
            if name not in known:
                problems.append(f"{key}: {shown(name)} is not a transfer method; known: {', '.join(method_names())}")
    ablations = config["ablations"]  # filled: the schema's defaults (base_task: base)
    base = ablations["base_task"]
    # a study without ablations needs no task named like the default base_task
    if (ablations.get("enabled") or ablations.get("variants")) and base not in config["tasks"]:
        problems.append(f"ablations.base_task: {shown(base)} is not a task; tasks: {', '.join(config['tasks'])}")
    scaling = config.get("scaling") or {}
    fitted = {m for run in runs.values() if run.role == "scaling" for m in run.methods}
    if scaling.get("enabled") and fitted:
        what = "a transfer method of the scaling runs; they run"
    else:  # scaling off, or its runs fit nothing: the names must still be methods
        fitted = set(((scaling.get("transfer") or {}).get("methods")) or method_names())
        what = "a transfer method the scaling runs would fit; known"
    for i, method in enumerate((scaling.get("analysis") or {}).get("methods") or []):
        if method not in fitted:
            problems.append(
                f"scaling.analysis.methods[{i}]: {shown(method)} is not {what}: "
                f"{', '.join(sorted(fitted)) or 'none (transfer is off)'}"
            )
    targets = (scaling.get("analysis") or {}).get("accuracy_targets") or []
    verdict_target = (scaling.get("analysis") or {}).get("verdict_target")
    if verdict_target is not None and not any(abs(verdict_target - t) < 1e-12 for t in targets):
        problems.append(
            f"scaling.analysis.verdict_target: {verdict_target:g} is not one of scaling.analysis.accuracy_targets "
            f"({', '.join(f'{t:g}' for t in targets)}): every verdict it quotes is made at those targets"
        )
    analysis = ablations.get("analysis") or {}
    baseline = analysis["baseline"]
    if ablations.get("enabled"):
        ablation_runs = sorted(r for r, run in runs.items() if run.role == "ablation")
    else:  # the runs the section would make
        ablation_runs = sorted(["ablation_none"] + [f"ablation_{v}" for v in ablations.get("variants") or {}])
    if baseline not in ablation_runs:
        problems.append(
            f"ablations.analysis.baseline: {shown(baseline)} is not an ablation run; runs: {', '.join(ablation_runs)}"
        )
    if ablations.get("enabled"):
        sizes = {n for run in runs.values() if run.role == "ablation" for n in run.sizes}
        for i, n in enumerate(analysis.get("sizes") or []):
            if n not in sizes:
                problems.append(
                    f"ablations.analysis.sizes[{i}]: {n} is not a transfer sample size of the "
                    f"ablation runs; they use: {', '.join(map(str, sorted(sizes))) or 'none'}"
                )
    return problems


def check_study(config: dict[str, Any], schema: dict[str, Any], config_files=(), results="results") -> dict:
    """Everything the Snakefile checks before any job, in order; returns the runs (see study.expand)
    and fills in the schema's defaults, or raises StudyRefused with the first problem (one line)."""
    try:
        return _check_study(config, schema, config_files, results)
    except StudyRefused as exc:
        raise StudyRefused(one_line(str(exc))) from None


def _check_study(config, schema, config_files, results) -> dict:
    from ..config.specs import ConfigError
    from .runs import expand

    for path in config_files:
        problem = config_file_problem(path)
        if problem:
            raise StudyRefused(f"invalid configuration: {problem}")
    if expanded_size(config) > MAX_CONFIG_NODES:
        raise StudyRefused(
            f"invalid configuration: more than {MAX_CONFIG_NODES} values once YAML aliases "
            "are resolved (an alias bomb?)"
        )
    problem = schema_problem(config, schema)
    if problem:
        raise StudyRefused(f"invalid configuration: {problem}")
    fill_defaults(config, schema)
    try:
        runs = expand(config, checked=True)  # the schema check above is the one check
    except ConfigError as exc:
        raise StudyRefused(f"invalid configuration: {exc}") from None
    problems = reference_problems(config, runs)
    if problems:
        raise StudyRefused(f"invalid configuration: {problems[0]}")
    from ..costs import check_memory  # the fitted cost model: absurd sizes stop here, not in a job

    jobs = config["jobs"]
    problems = check_memory(runs, limit_mb=jobs["max_mem_mb"])
    if problems:
        raise StudyRefused(f"cannot run the study: {problems[0]} (jobs.max_mem_mb)")
    from ..costs import fit_chunks  # seed chunks small enough for jobs.max_runtime_min (same numbers)

    problems = fit_chunks(
        runs,
        config["device"],
        jobs["pretrain_threads"],
        jobs["transfer_threads"],
        jobs["max_runtime_min"],
    )
    if problems:
        raise StudyRefused(f"cannot run the study: {problems[0]}")
    where = lambda r: f"tasks.{r}" if runs[r].role == "task" else f"run {r}"  # noqa: E731
    problems = input_problems(runs, where) + [p for p in [results_problem(results)] if p]
    if problems:
        raise StudyRefused("cannot run the study: " + "; ".join(problems))
    problem = results_owner_problem(results, config_files)
    if problem:
        raise StudyRefused(f"cannot run the study: {problem}")
    return runs


OWNER_FILE = "study_config.json"


def tables_problem(tables: list[tuple[str, str]]) -> str | None:
    """The first of these (kind, path) per-job tables that is unreadable or lacks its columns, as one line
    naming the file (groupsparse.io.tables.check_table: the check_tables job's check), or None."""
    from ..io.files import InputError
    from ..io.tables import check_table

    for kind, path in tables:
        try:
            check_table(path, kind)
        except InputError as exc:
            return str(exc)
    return None


def _shown_paths(config_files) -> list[str]:
    def shown(path) -> str:
        path = Path(path).resolve()
        return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)

    return [shown(p) for p in config_files]


def owner_record(config_files=()) -> str:
    """What results/<study>/study_config.json holds: which config files own the folder (written by
    the workflow's first job, rule results_owner, once every parse-time check has passed)."""
    import json

    return json.dumps({"config_files": _shown_paths(config_files)}, indent=1) + "\n"


def results_owner_problem(results: str | os.PathLike, config_files=()) -> str | None:
    """None if ``results`` belongs to these config files (recorded in results/<study>/study_config.json
    by the study's first job: :func:`owner_record`), else why not: a copied config that kept its study_name
    must never silently replace another config's results. Editing a setting in the same file is fine, and so
    is merging a slice over it (``configs/slices/``): the first config file names the study."""
    import json

    files = _shown_paths(config_files)
    owner = Path(results) / OWNER_FILE
    try:
        recorded = json.loads(owner.read_text())["config_files"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return f"{owner}: unreadable; delete it to let {', '.join(files) or 'this config'} own {results}"
    if recorded[:1] == files[:1]:  # the same study config, a slice merged over it or not: the same study
        return None
    return (
        f"study_name: {Path(results).name!r} already holds the results of {', '.join(recorded) or 'another config'}, "
        f"not of {', '.join(files) or 'this config'}; set another study_name in your config "
        f"(or delete {owner} to hand the folder over)"
    )


STATUS_FLAG = "--slurm-status-command squeue"


def sacct_problem(timeout: float = 20.0) -> str | None:
    """Why the Slurm executor cannot follow its jobs through ``sacct`` here, or None if it can.

    Where accounting is disabled (no slurmdbd), ``sacct`` exits non-zero ("Slurm accounting
    storage is disabled"); the executor plugin then never sees a job finish and waits forever
    without a word. One cheap query (this instant, no jobs) tells."""
    import shutil
    import subprocess

    if shutil.which("sacct") is None:
        return "`sacct` is not installed"
    try:
        probe = subprocess.run(
            ["sacct", "-X", "-n", "-o", "JobID", "-S", "now", "-E", "now"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"`sacct` did not answer within {timeout:.0f} s"
    if probe.returncode != 0:
        lines = [ln.strip() for ln in (probe.stderr or probe.stdout).splitlines() if ln.strip()]
        return f"`sacct` fails here ({lines[-1] if lines else f'exit {probe.returncode}'})"
    return None
