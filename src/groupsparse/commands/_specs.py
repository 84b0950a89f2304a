"""Run specs built from a command's arguments, checked as the workflow checks a job's: the schema, the
cross-field rules and the cost model's memory estimate, with the argument behind a refused key named."""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any


def check_specs(args: argparse.Namespace) -> None:
    """The run specs ``args.specs_of(args)`` builds (a command's hand-run form of a workflow job), checked
    as the workflow checks a job's: each against the schema and the cross-field rules (RunSpec), then its
    memory, by the cost model, against the workflow's limit (jobs.max_mem_mb's default) and this machine's
    memory. A refusal is a ConfigError naming the argument(s) whose value reached the refused key."""
    from ..config.errors import ConfigError
    from ..config.specs import RunSpec

    specs = []
    for spec in args.specs_of(args):
        try:
            specs.append(RunSpec.from_dict(spec))
        except ConfigError as exc:
            key = str(exc).split(":", 1)[0].strip()
            named = arguments_reaching(args, key)
            raise ConfigError(f"{', '.join(named) or 'the arguments'}: {exc}") from None
    problem = memory_problem(specs, len(getattr(args, "seeds", None) or [0]))
    if problem:
        keys = ("task.D", "task.d", "pretrain.batch", "pretrain.eval_size")
        named = [name for key in keys for name in arguments_reaching(args, key)]
        raise ConfigError(f"{', '.join(dict.fromkeys(named)) or 'the arguments'}: {problem}")


def _value_at(spec: dict, key: str):
    value: Any = spec
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _perturbed(value):
    if isinstance(value, bool) or value is None:
        return 3
    if isinstance(value, int | float):
        return value * 2 + 3
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [_perturbed(v) for v in value]
    return value


def arguments_reaching(args: argparse.Namespace, key: str) -> list[str]:
    """The options whose value reaches ``key`` of the specs ``args.specs_of`` builds (found by changing
    each argument in turn: nothing to declare, so an argument added later is found the same way)."""
    return [option_of(args, dest) for dest in vars(args) if key in keys_reached_by(args, dest)]


def spec_keys(spec: dict, prefix: str = "") -> list[str]:
    """The dotted keys of a spec's values (``task.D``, ``pretrain.eta``, ...)."""
    keys = []
    for name, value in spec.items():
        keys += spec_keys(value, f"{prefix}{name}.") if isinstance(value, dict) else [f"{prefix}{name}"]
    return keys


def keys_reached_by(args: argparse.Namespace, dest: str) -> list[str]:
    """The keys of the specs ``args.specs_of`` builds that change when argument ``dest`` does."""
    import copy

    value = getattr(args, dest)
    if dest in ("func", "specs_of", "check", "command", "debug") or callable(value):
        return []
    base = args.specs_of(args)
    changed = copy.copy(args)
    setattr(changed, dest, _perturbed(value))
    try:
        other = args.specs_of(changed)
    except Exception:  # noqa: BLE001  (a value the spec builder cannot take: it reaches the spec somewhere)
        return sorted({k for s in base for k in spec_keys(s)})
    keys = sorted({k for s in base + other for k in spec_keys(s)})
    return [k for k in keys if [_value_at(s, k) for s in base] != [_value_at(s, k) for s in other]]


def option_of(args: argparse.Namespace, dest: str) -> str:
    options = getattr(args, "options_of", {})
    return options.get(dest, "--" + dest.replace("_", "-"))


def machine_memory_mb() -> float | None:
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    return None


def memory_problem(specs: list, seeds: int = 1) -> str | None:
    """Why the cost model's memory estimate refuses one of these runs (validated RunSpecs), or None."""
    from ..config.schema import default_of
    from ..costs import pretrain_cost

    limit = float(default_of("jobs.max_mem_mb"))
    machine = machine_memory_mb()
    for spec in specs:
        full = spec.to_dict()  # the schema's defaults filled in, as a job's spec has them
        need = pretrain_cost(full, seeds, "cpu").mem_mb
        for bound, what in (
            (limit, "the workflow's limit (jobs.max_mem_mb's default)"),
            (machine, "this machine's memory"),
        ):
            if bound is not None and need > bound:
                t, p = full["task"], full["pretrain"]
                sizes = f"task.D = {t['D']}, task.d = {t['d']}, pretrain.batch = {p['batch']}"
                return (
                    f"needs about {need:,.0f} MB (the cost model's estimate from {sizes}, pretrain.eval_size = "
                    f"{p['eval_size']}), over {what} of {bound:,.0f} MB"
                )
    return None
