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
``THEORY = True`` (held to the theory's sample-complexity claim), ``CHOICES`` ({setting: allowed
strings}), ``MAY_BE_ZERO`` and ``MAY_BE_NULL`` (settings allowed 0 / null) and
``problem(hp) -> str | None`` (a cross-setting rule, e.g. heads dividing width).
Modules whose name starts with "_" are helpers, not methods. The order of the registry: the
pretrained family first, then the baselines, each by name.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
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


def _load(module: ModuleType) -> Method:
    name = module.__name__.rsplit(".", 1)[1]
    missing = [key for key in _REQUIRED if not hasattr(module, key)]
    if missing:
        raise TypeError(f"{module.__file__}: a method module must declare {', '.join(missing)}")
    if module.FAMILY not in FAMILIES:
        raise TypeError(f"{module.__file__}: FAMILY {module.FAMILY!r} is not one of {', '.join(FAMILIES)}")
    if module.LIBRARY not in LIBRARIES:
        raise TypeError(f"{module.__file__}: LIBRARY {module.LIBRARY!r} is not one of {', '.join(LIBRARIES)}")
    return Method(
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


@functools.cache
def registry() -> dict[str, Method]:
    """Every method module of this package, by name, in registry order."""
    found = [
        _load(importlib.import_module(f"{__name__}.{info.name}"))
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    ]
    found.sort(key=lambda m: (FAMILIES.index(m.family), m.name))
    return {m.name: m for m in found}


def method(name: str) -> Method:
    return registry()[name]


def method_names() -> tuple[str, ...]:
    return tuple(registry())


def names_where(**wanted) -> tuple[str, ...]:
    """The methods whose attributes equal ``wanted``: names_where(family="pretrained"), names_where(online=True)."""
    return tuple(n for n, m in registry().items() if all(getattr(m, k) == v for k, v in wanted.items()))
