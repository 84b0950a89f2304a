"""Expand a study config into jobs: pretraining runs, seed chunks, transfer jobs.

Torch-free: the Snakefile calls this at parse time. A *run* is one pretraining setting
(task + model + pretraining overrides) trained over several seeds; the base tasks, the
scaling grid and the ablations all become runs, so one pair of rules serves them all.
Every cross-field problem raises ConfigError naming the full key path.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..config.schema import check_study, fill_defaults, study_schema
from ..config.specs import ConfigError, RunSpec, TaskSpec, step_size
from ..transfer.methods import method_names
from ..transfer.spec import DEFAULTS as TRANSFER_DEFAULTS
from ..transfer.spec import GRID_KEYS, check_transfer

# The batch check's runs (scaling.batch_check): the grid's tasks at another batch, and optionally a
# scaled step size. Their variant is batch<b>, or batch<b>_eta<factor> (0.5 -> 0p5); the flow check's
# (scaling.flow_check): the flow's samples<N> (another sample size, the first N of it the grid's) and
# rtol<x> (another tolerance, 1e-07 -> 1em07). The analysis tells them from the grid and the stability
# variants by this name alone.
CHECK_VARIANT = re.compile(r"batch\d+(_eta[0-9p]+)?|samples\d+|rtol[0-9pem]+")


def check_variant(batch: int, eta_factor: float | None = None) -> str:
    return f"batch{batch}" + ("" if eta_factor in (None, 1) else f"_eta{f'{eta_factor:g}'.replace('.', 'p')}")


def flow_check_variant(key: str, value: float) -> str:
    """samples4096, rtol1em07: the flow check's run at another sample size or solver tolerance."""
    return f"samples{int(value)}" if key == "samples" else "rtol" + f"{value:.0e}".replace("-", "m").replace(".", "p")


def is_check_variant(variant: str | None) -> bool:
    return bool(CHECK_VARIANT.fullmatch(variant or ""))


@dataclass
class Run:
    name: str
    spec: dict[str, Any]  # RunSpec dict (validated)
    seeds: list[int]
    chunks: list[str]  # "lo-hi" seed ranges, one pretraining job each
    transfer: dict[str, Any] | None = None  # TransferSpec dict, or None when transfer is off
    methods: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    method_groups: dict[str, list[str]] = field(default_factory=dict)
    role: str = "task"  # task | scaling | ablation

    @property
    def spec_json(self) -> str:
        return json.dumps(self.spec, sort_keys=True, separators=(",", ":"))

    def transfer_json(self) -> str:
        return json.dumps({"run": self.spec, "transfer": self.transfer}, sort_keys=True, separators=(",", ":"))

    def chunk_seeds(self, chunk: str) -> list[int]:
        lo, hi = (int(x) for x in chunk.split("-"))
        return list(range(lo, hi + 1))


def deep_merge(base: dict, override: dict | None) -> dict:
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def chunk_seeds(n_seeds: int, per_job: int) -> list[str]:
    return [f"{lo}-{min(lo + per_job, n_seeds) - 1}" for lo in range(0, n_seeds, per_job)]


def _prefixed(where: str, exc: ConfigError) -> ConfigError:
    return ConfigError(f"{where}.{exc}")


def _check_sizes(sizes: list[int], where: str, max_n: int | None) -> None:
    """The cross-field rules on a sample-size grid (count and range: the schema)."""
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ConfigError(f"{where}.sizes: must be strictly increasing, got {sizes}")
    if max_n is not None and sizes[-1] > max_n:
        raise ConfigError(f"{where}.sizes: {sizes[-1]} exceeds transfer.max_n = {max_n}")


def _make_run(config: dict, name: str, entry: dict, role: str, where: str, variant: str = "") -> Run:
    pre = deep_merge(config.get("pretrain", {}), entry.get("pretrain"))
    seeds, per_job = pre.pop("seeds"), pre.pop("seeds_per_job")  # the schema's defaults, filled at the top
    spec_dict = {
        "study_seed": config["study_seed"],
        "task_name": entry.get("data_identity", name),
        "task": copy.deepcopy(entry.get("task", {})),
        "model": deep_merge(config.get("model", {}), entry.get("model")),
        "pretrain": pre,
        "dtype": entry.get("dtype") or config["dtype"],
        "device": config["device"],
        "run_name": name,
        "role": role,
        "variant": variant,
    }
    try:
        spec = RunSpec.from_dict(spec_dict, checked=True)  # its sections passed the study schema
    except ConfigError as exc:
        raise _prefixed(where, exc) from None
    run = Run(name, spec.to_dict(), list(range(seeds)), chunk_seeds(seeds, per_job), role=role)
    tr = deep_merge(config.get("transfer", {}), entry.get("transfer"))
    if "method_groups" in (entry.get("transfer") or {}):  # a run's own grouping replaces the study's
        tr["method_groups"] = copy.deepcopy(entry["transfer"]["method_groups"])
    if tr.get("enabled", TRANSFER_DEFAULTS["enabled"]) and tr.get("methods"):
        run.methods = list(tr["methods"])
        run.sizes = [int(n) for n in tr.get("sizes", TRANSFER_DEFAULTS["sizes"])]
        groups = tr.get("method_groups") or {"all": run.methods}
        known = method_names()
        bad = [m for m in run.methods if m not in known]
        if bad:
            raise ConfigError(f"{where}.transfer.methods: unknown method {bad[0]!r}; allowed: {', '.join(known)}")
        for g, ms in groups.items():  # a subset of a study's methods may drop group members, never typos
            unknown = [m for m in ms if m not in known]
            if unknown:
                raise ConfigError(
                    f"{where}.transfer.method_groups.{g}: unknown method {unknown[0]!r}; allowed: {', '.join(known)}"
                )
        run.method_groups = {g: [m for m in ms if m in run.methods] for g, ms in groups.items()}
        run.method_groups = {g: ms for g, ms in run.method_groups.items() if ms}
        grouped = [m for ms in run.method_groups.values() for m in ms]
        twice = sorted({m for m in grouped if grouped.count(m) > 1})
        if twice:
            raise ConfigError(f"{where}.transfer.method_groups: methods {twice} are in more than one group")
        ungrouped = sorted(set(run.methods) - set(grouped))
        if ungrouped:
            raise ConfigError(f"{where}.transfer.method_groups: methods {ungrouped} are in no group")
        run.transfer = {k: v for k, v in tr.items() if k not in GRID_KEYS}
        _check_sizes(run.sizes, f"{where}.transfer", run.transfer.get("max_n"))
        try:
            # the schema checked each merged section (study.preflight); the registry's rules remain
            check_transfer(run.transfer, checked=True)  # its messages already start with "transfer."
        except ConfigError as exc:
            raise _prefixed(where, exc) from None
    return run


def _step_size(config: dict, pre: dict, D: int) -> float:
    """eta(D) of a run whose pretraining overrides are ``pre`` (``specs.step_size`` of the merged settings)."""
    merged = deep_merge(config.get("pretrain", {}), pre)
    return step_size(merged["eta"], merged.get("eta_D_limit"), D)


def _scaling_pretrain(config: dict, scaling: dict, D: int) -> dict:
    """A scaling run's pretraining settings: steps raised to ceil(scaling.steps_per_D3 * D^3), or to
    ceil(flow_time_per_D3 * D^3 / eta(D)), where that is more, so the steps (or the flow times) kappa D^3
    of the concentration test are reached at every D; records_per_run sets the recording interval."""
    pre = copy.deepcopy(scaling.get("pretrain") or {})
    for entry in scaling.get("batch_by_D") or []:  # the grid's batch at these levels (the check's 4x it)
        if D in entry["D"]:
            pre["batch"] = int(entry["batch"])
    steps = int(pre.get("steps", config["pretrain"]["steps"]))  # the schema filled the study's
    per, flow = float(scaling.get("steps_per_D3") or 0), float(scaling.get("flow_time_per_D3") or 0)
    for entry in scaling.get("flow_time_by_D") or []:  # a longer (or shorter) flow time at these levels
        if D in entry["D"]:
            flow = float(entry["flow_time_per_D3"])
    if per > 0:
        steps = max(steps, math.ceil(per * D**3))
    if flow > 0:
        steps = max(steps, math.ceil(flow * D**3 / _step_size(config, pre, D)))
        if deep_merge(config.get("pretrain", {}), pre).get("solver") == "flow":  # the flow reaches it exactly
            pre["flow"] = deep_merge(pre.get("flow") or {}, {"flow_time": flow * D**3})
    return _with_length(pre, steps, scaling)


def _with_length(pre: dict, steps: int, scaling: dict) -> dict:
    """``pre`` training ``steps`` steps, recorded every steps / scaling.records_per_run where that is set."""
    pre["steps"] = steps
    if scaling.get("records_per_run"):
        pre["record_every"] = max(1, steps // int(scaling["records_per_run"]))
    return pre


def expand(config: dict, checked: bool = False) -> dict[str, Run]:
    """All pretraining runs of the study, by name, after the cross-field rules. ``checked``: ``config``
    passed the schema and holds its defaults (study.preflight.check_study, the Snakefile's one check);
    else both are done here, the defaults filled in ``config`` in place."""
    if not checked:
        check_study(config)
        fill_defaults(config, study_schema())
    runs: dict[str, Run] = {}
    for name, entry in config["tasks"].items():
        runs[name] = _make_run(config, name, entry or {}, "task", f"tasks.{name}")
    scaling = config["scaling"]  # filled: the schema's {enabled: false} where absent
    if scaling["enabled"]:
        runs |= _grid_runs(config, scaling) | _batch_runs(config, scaling) | _stability_runs(config, scaling)
        runs |= _flow_check_runs(config, scaling)
    if config["ablations"]["enabled"]:  # filled, as scaling
        runs |= _ablation_runs(config, config["ablations"])
    return runs


def _outside_grid(Ds: list[int], scaling: dict, where: str) -> None:
    stray = sorted(set(Ds) - set(scaling["D_grid"]))
    if stray:
        raise ConfigError(f"{where}: {stray} not in scaling.D_grid {scaling['D_grid']}")


def _grid_runs(config: dict, scaling: dict) -> dict[str, Run]:
    """The scaling grid (section 6.3): scale_d<d>_D<D>, with transfer at the levels of transfer_D_grid."""
    base = scaling.get("task", {})
    _outside_grid(scaling.get("transfer_D_grid", []), scaling, "scaling.transfer_D_grid")
    seen: dict[int, int] = {}
    for i, entry in enumerate(scaling.get("flow_time_by_D") or []):
        _outside_grid(entry["D"], scaling, f"scaling.flow_time_by_D[{i}].D")
    for i, entry in enumerate(scaling.get("batch_by_D") or []):
        _outside_grid(entry["D"], scaling, f"scaling.batch_by_D[{i}].D")
        for D in entry["D"]:
            if D in seen:
                where = f"scaling.batch_by_D[{i}].D"
                raise ConfigError(f"{where}: D = {D} already has a batch in scaling.batch_by_D[{seen[D]}]")
            seen[D] = i
    runs = {}
    for d in scaling.get("d_grid", [base.get("d", TaskSpec.d)]):
        for D in scaling["D_grid"]:
            name = f"scale_d{d}_D{D}"
            with_transfer = D in scaling.get("transfer_D_grid", scaling["D_grid"])
            entry = {
                "task": base | {"d": d, "D": D},
                "pretrain": _scaling_pretrain(config, scaling, D),
                "transfer": scaling.get("transfer", {"enabled": False}) if with_transfer else {"enabled": False},
                "dtype": scaling.get("dtype"),
            }
            runs[name] = _make_run(config, name, entry, "scaling", f"scaling[{name}]")
    return runs


def _batch_runs(config: dict, scaling: dict) -> dict[str, Run]:
    """The grid's tasks at other batches, pretraining only, paired by seed (section 6.4)."""
    base = scaling.get("task", {})
    checks = scaling.get("batch_check") or []
    listed = isinstance(checks, list)
    runs = {}
    for i, check in enumerate(checks if listed else [checks]):
        where = "scaling.batch_check" + (f"[{i}]" if listed else "")
        d = check["d"]
        Ds = check["D"] if isinstance(check["D"], list) else [check["D"]]
        _outside_grid(Ds, scaling, f"{where}.D")
        factor = check.get("eta_factor")
        for D in Ds:
            for b in check["batches"]:
                variant = check_variant(b, factor)
                name = f"scale_d{d}_D{D}_{variant}"
                pre = _scaling_pretrain(config, scaling, D) | {"batch": b}
                flow = check.get("flow_time_per_D3") or scaling.get("flow_time_per_D3")
                if factor not in (None, 1):
                    grid_eta = _step_size(config, pre, D)
                    pre["eta"], pre["eta_D_limit"] = grid_eta * factor, None  # the grid's eta(D) x factor
                    if not flow:  # the grid's length in steps at its eta: the same flow time at this one
                        pre = _with_length(pre, math.ceil(pre["steps"] / factor), scaling)
                if flow:
                    pre = _with_length(pre, math.ceil(float(flow) * D**3 / _step_size(config, pre, D)), scaling)
                entry = {
                    "data_identity": f"scale_d{d}_D{D}",  # the grid run's tasks: a paired comparison
                    "task": base | {"d": d, "D": D},
                    "pretrain": pre,
                    "transfer": {"enabled": False},
                    "dtype": scaling.get("dtype"),
                }
                runs[name] = _make_run(config, name, entry, "scaling", f"{where}.batches[{b}]", variant)
    return runs


def _flow_check_runs(config: dict, scaling: dict) -> dict[str, Run]:
    """The grid's flow runs at other sample sizes and solver tolerances, paired by seed (the same tasks and
    scrambled sequences: a larger sample begins with the grid's), to the grid's flow time."""
    base = scaling.get("task", {})
    runs = {}
    for i, check in enumerate(scaling.get("flow_check") or []):
        where = f"scaling.flow_check[{i}]"
        _outside_grid(check["D"], scaling, f"{where}.D")
        for D in check["D"]:
            grid = _scaling_pretrain(config, scaling, D)
            if deep_merge(config.get("pretrain", {}), grid).get("solver") != "flow":
                raise ConfigError(f"{where}: checks the flow's samples and tolerance; the grid runs solver: gd")
            for key in ("samples", "rtol"):
                for value in check.get(key) or []:
                    variant = flow_check_variant(key, value)
                    pre = copy.deepcopy(grid)
                    pre["flow"] = deep_merge(pre.get("flow") or {}, {key: value})
                    if check.get("flow_time_per_D3"):  # a shorter check where the full length costs too much
                        pre["flow"]["flow_time"] = float(check["flow_time_per_D3"]) * D**3
                    if check.get("seeds"):  # the grid's first seeds only (paired with theirs)
                        pre["seeds"] = min(int(check["seeds"]), int(pre.get("seeds", config["pretrain"]["seeds"])))
                    entry = {
                        "data_identity": f"scale_d{check['d']}_D{D}",  # the grid run's tasks and samples
                        "task": base | {"d": check["d"], "D": D},
                        "pretrain": pre,
                        "transfer": {"enabled": False},
                        "dtype": scaling.get("dtype"),
                    }
                    name = f"scale_d{check['d']}_D{D}_{variant}"
                    runs[name] = _make_run(config, name, entry, "scaling", f"{where}.{key}[{value}]", variant)
    return runs


def _stability_runs(config: dict, scaling: dict) -> dict[str, Run]:
    """Ordinary training (autograd, a perturbed start) at every D of the grid (section 6.4)."""
    stability = scaling.get("stability")
    if not stability:
        return {}
    base, d = scaling.get("task", {}), stability["d"]
    runs = {}
    for vname, variant in stability["variants"].items():
        Ds = variant.get("D_grid", scaling["D_grid"])
        _outside_grid(Ds, scaling, f"scaling.stability.variants.{vname}.D_grid")
        for D in Ds:
            name = f"stab_{vname}_d{d}_D{D}"
            pre = deep_merge(scaling.get("pretrain") or {}, variant.get("pretrain"))
            pre |= {"seeds": stability["seeds"], "seeds_per_job": stability["seeds"]}
            if variant.get("steps_per_D3"):  # the variant's own length (adam: its step size is no flow time)
                steps = math.ceil(float(variant["steps_per_D3"]) * D**3)
            elif stability.get("flow_time_per_D3"):
                steps = math.ceil(float(stability["flow_time_per_D3"]) * D**3 / _step_size(config, pre, D))
            else:
                steps = math.ceil(float(stability["steps_per_D3"]) * D**3)
            pre = _with_length(pre, steps, scaling)
            entry = {
                "data_identity": f"scale_d{d}_D{D}",  # the grid run's tasks: a paired comparison
                "task": base | {"d": d, "D": D},
                "model": variant.get("model"),
                "pretrain": pre,
                "transfer": {"enabled": False},
                "dtype": variant.get("dtype") or scaling.get("dtype"),
            }
            runs[name] = _make_run(config, name, entry, "scaling", f"scaling.stability.variants.{vname}", vname)
    return runs


def _ablation_runs(config: dict, ablations: dict) -> dict[str, Run]:
    """ablation_<variant> for each variant of the base task, and the reference ablation_none (section 6)."""
    tasks, base_name = config["tasks"], ablations["base_task"]
    if base_name not in tasks:
        raise ConfigError(f"ablations.base_task: {base_name!r} is not a task; tasks: {', '.join(tasks)}")
    base_entry = tasks[base_name] or {}
    runs = {}
    for vname, variant in (ablations.get("variants") or {}).items():
        name = f"ablation_{vname}"
        entry = {
            "data_identity": base_name,  # same data stream as the base task where the law allows
            "task": deep_merge(base_entry.get("task", {}), (variant or {}).get("task")),
            "model": (variant or {}).get("model"),
            "pretrain": deep_merge(ablations.get("pretrain", {}), (variant or {}).get("pretrain")),
            "transfer": ablations.get("transfer", {"enabled": False}),
            "dtype": (variant or {}).get("dtype") or ablations.get("dtype"),
        }
        runs[name] = _make_run(config, name, entry, "ablation", f"ablations.variants.{vname}", vname)
    # the reference point of the ablations: the base task under the ablations' own budget
    ref = {
        "data_identity": base_name,
        "task": base_entry.get("task", {}),
        "pretrain": ablations.get("pretrain"),
        "transfer": ablations.get("transfer", {"enabled": False}),
        "dtype": ablations.get("dtype"),
    }
    runs["ablation_none"] = _make_run(config, "ablation_none", ref, "ablation", "ablations", "none")
    return runs
