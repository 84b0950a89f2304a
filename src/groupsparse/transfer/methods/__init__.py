"""The transfer methods: one module each in this package, found by listing it, so adding a method
is adding one file here (no list to extend elsewhere).

A method module is torch-free at import (the Snakefile reads the registry at parse time; its fit
imports torch when called) and declares:

- ``FAMILY``: "pretrained" (starts from the pretraining checkpoint) or "baseline";
- ``DESCRIPTION``: one line;
- ``DEFAULTS``: its hyperparameters under the rule "fixed" (also the settings CV does not tune);
- ``GRID``: {setting: [values]} tried by the rule "cv" (the product of the lists);
- ``LIBRARY``: what fits it, for the cost model: "torch" (the paper's model), "torch_net" (an
  AdamW-trained net), "sklearn" or "skglm" (CPU-only libraries, whatever the device);
- ``COSTS_LIKE``: the method whose fitted cost coefficients (costs/costs.yaml) it uses;
- ``work(n, n_eval, seeds, d, D, m, hp)``: (steps, train_work, eval_work) of one fit, the cost model's
  features;
- ``fit(ctx, X, y, evals, hps, gens, start=None, online=None)``: the batched fit (see fitting.py);

and may declare ``ONLINE = True`` (online SGD: rows record the average online error),
``VARIANTS`` ({name: {"settings": {...}, "description": ..., and optionally "theory", "costs_like"}}:
named points of its settings, each a method of the registry under that name, with those settings
as its defaults; the module itself is then no method, benchopt's solver with a parameter grid),
``THEORY = True`` (held to the theory's sample-complexity claim), ``CHOICES`` ({setting: allowed
strings}), ``MAY_BE_ZERO`` and ``MAY_BE_NULL`` (settings allowed 0 / null) and
``problem(hp) -> str | None`` (a cross-setting rule, e.g. heads dividing width),
``warm_up(settings: list[dict])`` (one-time work per job, timed apart from the fits, e.g. numba
compilation) and ``recorded(n, hp) -> dict`` (settings the fit derives from n, recorded in the rows).
Modules whose name starts with "_" are helpers, not methods. The order of the registry: the
pretrained family first, then the baselines, each by name.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

FAMILIES = ("pretrained", "baseline")
LIBRARIES = ("torch", "torch_net", "sklearn", "skglm")
_REQUIRED = ("FAMILY", "DESCRIPTION", "DEFAULTS", "GRID", "LIBRARY", "COSTS_LIKE", "work", "fit")


@dataclass(frozen=True)
class Method:
    name: str
    family: str
    description: str
    defaults: dict[str, Any]
    grid: dict[str, list]
    library: str
    costs_like: str
    module: ModuleType = field(repr=False)
    online: bool = False
    theory: bool = False
    choices: dict[str, tuple] = field(default_factory=dict)
    may_be_zero: frozenset = frozenset()
    may_be_null: frozenset = frozenset()

    @property
    def uses_pretrained(self) -> bool:
        return self.family == "pretrained"

    def fit(self, *args, **kwargs):
        return self.module.fit(*args, **kwargs)

    def work(self, n: int, n_eval: int, seeds: int, d: int, D: int, m: int, hp: dict | None = None) -> tuple:
        return self.module.work(n, n_eval, seeds, d, D, m, self.defaults | (hp or {}))

    def problem(self, hp: dict) -> str | None:
        check = getattr(self.module, "problem", None)
        return check(hp) if check is not None else None

    @property
    def needs_warm_up(self) -> bool:
        return hasattr(self.module, "warm_up")

    def warm_up(self, settings: list[dict]) -> None:
        self.module.warm_up(settings)

    def recorded(self, n: int, hp: dict) -> dict:
        derive = getattr(self.module, "recorded", None)
        return derive(n, hp) if derive is not None else {}


def _load(module: ModuleType) -> list[Method]:
    name = module.__name__.rsplit(".", 1)[1]
    missing = [key for key in _REQUIRED if not hasattr(module, key)]
    if missing:
        raise TypeError(f"{module.__file__}: a method module must declare {', '.join(missing)}")
    if module.FAMILY not in FAMILIES:
        raise TypeError(f"{module.__file__}: FAMILY {module.FAMILY!r} is not one of {', '.join(FAMILIES)}")
    if module.LIBRARY not in LIBRARIES:
        raise TypeError(f"{module.__file__}: LIBRARY {module.LIBRARY!r} is not one of {', '.join(LIBRARIES)}")
    base = Method(
        name=name,
        family=module.FAMILY,
        description=module.DESCRIPTION,
        defaults=dict(module.DEFAULTS),
        grid={k: list(v) for k, v in module.GRID.items()},
        library=module.LIBRARY,
        costs_like=module.COSTS_LIKE,
        module=module,
        online=bool(getattr(module, "ONLINE", False)),
        theory=bool(getattr(module, "THEORY", False)),
        choices=dict(getattr(module, "CHOICES", {})),
        may_be_zero=frozenset(getattr(module, "MAY_BE_ZERO", ())),
        may_be_null=frozenset(getattr(module, "MAY_BE_NULL", ())),
    )
    variants = getattr(module, "VARIANTS", None)
    if variants is None:
        return [base]
    return [_variant(base, variant, entry) for variant, entry in variants.items()]


def _variant(base: Method, name: str, entry: dict) -> Method:
    """The method ``name``: ``base`` with the variant's settings as defaults (checked against CHOICES)."""
    where = f"{base.module.__file__}: VARIANTS[{name!r}]"
    unknown = sorted(set(entry["settings"]) - set(base.defaults))
    if unknown:
        raise TypeError(f"{where}: settings {', '.join(unknown)} are not in DEFAULTS")
    for key, value in entry["settings"].items():
        if key in base.choices and value not in base.choices[key]:
            raise TypeError(f"{where}: {key} = {value!r} is not one of {', '.join(base.choices[key])}")
    return replace(
        base,
        name=name,
        description=entry["description"],
        defaults=base.defaults | entry["settings"],
        theory=bool(entry.get("theory", base.theory)),
        costs_like=entry.get("costs_like", base.costs_like),
    )


@functools.cache
def registry() -> dict[str, Method]:
    """Every method module of this package, by name, in registry order."""
    found = [
        entry
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
        for entry in _load(importlib.import_module(f"{__name__}.{info.name}"))
    ]
    names = [m.name for m in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TypeError(f"transfer methods: {', '.join(twice)} declared twice (a module and a VARIANTS entry?)")
    found.sort(key=lambda m: (FAMILIES.index(m.family), m.name))
    return {m.name: m for m in found}


def method(name: str) -> Method:
    return registry()[name]


def method_names() -> tuple[str, ...]:
    return tuple(registry())


def names_where(**wanted) -> tuple[str, ...]:
    """The methods whose attributes equal ``wanted``: names_where(family="pretrained"), names_where(online=True)."""
    return tuple(n for n, m in registry().items() if all(getattr(m, k) == v for k, v in wanted.items()))
