"""Settings of the transfer comparison (docs/STUDY.md section 4).

Pure Python (no torch): the Snakefile checks ``transfer:`` at parse time (check_transfer: the
schema's ranges, then the method registry's names and settings), and a job its spec file. Sample sizes
and methods are not part of the spec: they are the job's grid (CLI ``--sizes``,
``--methods``), and splitting the grid across jobs changes no number.
Every error is a ``specs.ConfigError`` naming ``transfer.<key>``.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..config.schema import schema_defaults, section_problem, study_schema
from ..config.specs import ConfigError, config_hash, require, require_one_of
from .methods import method as method_info
from .methods import method_names

# Every default of the transfer section: the schema's (several marked x-filled: false, read here only).
DEFAULTS = schema_defaults("transfer")
DOWNSTREAM = tuple(study_schema()["$defs"]["transfer"]["properties"]["downstream"]["items"]["enum"])
DEFAULT_SIZES = tuple(DEFAULTS["sizes"])
# Keys of a transfer section that plan the jobs (which methods, groups and sizes), not their settings.
GRID_KEYS = ("enabled", "methods", "sizes", "method_groups")


@dataclass(frozen=True)
class TransferSpec:
    max_n: int = DEFAULTS["max_n"]  # largest sample size a job accepts
    test_size: int = DEFAULTS["test_size"]  # fresh test samples per (task, seed), shared by all methods and n
    downstream: tuple = tuple(DEFAULTS["downstream"])  # which downstream tasks to run
    control_methods: tuple | None = DEFAULTS["control_methods"]  # also fitted on negative_control (None: every method)
    angle_deg: float | None = DEFAULTS["angle_deg"]  # None: v~* a fresh uniform unit vector; else at this angle to v*
    sigma_x: float | None = DEFAULTS["sigma_x"]  # None: the pretraining task's sigma_x
    selection: str = DEFAULTS["selection"]  # hyperparameter rule: cv (k-fold CV on the n samples) | fixed
    cv_folds: int = DEFAULTS["cv_folds"]  # k; reduced to floor(n / 2) when n < 2k (runner._select)
    cv_large_n: int = DEFAULTS["cv_large_n"]  # from this n on: one holdout split instead of k fits (cost)
    cv_holdout_folds: int = DEFAULTS["cv_holdout_folds"]  # ... validating on 1/k of the samples (1/2: 50/50)
    online_eval_size: int = DEFAULTS["online_eval_size"]  # test samples scoring each online iterate
    online_points: int = DEFAULTS["online_points"]  # iterates scored per online-SGD fit (log-spaced above)
    hyperparameters: dict = field(default_factory=dict)  # method -> {key: value}, overrides the defaults
    grids: dict = field(default_factory=dict)  # method -> {key: [values]}, replaces the cv grid
    dtype: str = DEFAULTS["dtype"]  # torch methods (the checkpoint is cast to it)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> TransferSpec:
        """The spec of a checked transfer section (check_transfer: at parse time, and by the job)."""
        raw = {k: v for k, v in (raw or {}).items() if k not in GRID_KEYS}
        for key in ("downstream", "control_methods"):
            if raw.get(key) is not None:
                raw[key] = tuple(raw[key])
        for key in ("angle_deg", "sigma_x"):
            if raw.get(key) is not None:
                raw[key] = float(raw[key])
        for key in ("hyperparameters", "grids"):
            raw[key] = copy.deepcopy(raw.get(key) or {})
        return cls(**raw)

    def method_hyperparameters(self, method: str) -> dict[str, Any]:
        """The fixed-rule settings of ``method``: the defaults with this spec's overrides."""
        return method_info(method).defaults | self.hyperparameters.get(method, {})

    def method_grid(self, method: str) -> dict[str, list]:
        return self.grids.get(method, method_info(method).grid)

    def folds(self, n: int) -> tuple[int, int]:
        """(k, fits) of the stratified split at sample size n: k = cv_folds and all k folds fitted
        below cv_large_n; from cv_large_n on k = cv_holdout_folds and only its first fold is fitted
        (one holdout split). k is at most floor(n / 2) (every validation fold holds >= 2 samples);
        k < 2 means no cross-validation (the fixed settings)."""
        if n >= self.cv_large_n:
            return min(self.cv_holdout_folds, n // 2), 1
        k = min(self.cv_folds, n // 2)
        return k, k

    def candidates(self, method: str) -> list[dict[str, Any]]:
        """Hyperparameter settings tried by cross-validation (the product of the grid)."""
        base = self.method_hyperparameters(method)
        grid = self.method_grid(method)
        names = sorted(grid)
        return [base | dict(zip(names, combo)) for combo in itertools.product(*(grid[k] for k in names))]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["downstream"] = list(self.downstream)
        if self.control_methods is None:
            del d["control_methods"]  # absent = every method: a spec that leaves the key out keeps its hash
        else:
            d["control_methods"] = list(self.control_methods)
        return d

    def fits_on(self, downstream: str, method: str) -> bool:
        """Whether ``method`` is fitted on ``downstream`` (the negative control: control_methods only)."""
        return downstream != "negative_control" or self.control_methods is None or method in self.control_methods

    def science_hash(self) -> str:
        return config_hash(self.to_dict())


def check_transfer(raw: Any, where: str = "transfer", checked: bool = False) -> None:
    """ConfigError naming ``<where>.<key>`` unless ``raw`` is a transfer section the jobs can trust:
    the schema's ranges and enums (src/groupsparse/config/config.schema.yaml, the one home of those;
    skipped when ``checked``: a merge of sections the study's schema check passed), then what only
    the method registry knows (method names, each method's own settings)."""
    problem = None if checked else section_problem(raw, "transfer")
    if problem:
        raise ConfigError(f"{where}.{problem}" if not problem.startswith("(top level)") else f"{where}{problem[11:]}")
    raw = raw or {}
    known = method_names()
    allowed = f"unknown method; allowed: {', '.join(known)}"
    for name in raw.get("control_methods") or ():
        require(name in known, f"{where}.control_methods", f"{name!r}: {allowed}")
    for section in ("hyperparameters", "grids"):
        for name in raw.get(section) or {}:
            require(name in known, f"{where}.{section}.{name}", allowed)
    for name, values in (raw.get("hyperparameters") or {}).items():
        for key, value in values.items():
            _check_value(name, key, value, f"{where}.hyperparameters.{name}.{key}")
    for name, grid in (raw.get("grids") or {}).items():
        for key, values in grid.items():
            key_at = f"{where}.grids.{name}.{key}"
            require(isinstance(values, list) and values, key_at, f"must be a non-empty list of values, got {values!r}")
            for value in values:
                _check_value(name, key, value, key_at)
    spec = TransferSpec.from_dict(raw)
    for name in known:  # a method's own cross-setting rules, at every setting it may be fitted with
        for hp in [spec.method_hyperparameters(name)] + (spec.candidates(name) if spec.selection == "cv" else []):
            problem = method_info(name).problem(hp)
            require(problem is None, f"{where}.hyperparameters.{name}.{(problem or '').split(':')[0]}", str(problem))


def check_grid(methods_: list[str], sizes: list[int], spec: TransferSpec, where: str = "transfer") -> None:
    """Refuse an unknown method, a bad or too large sample size (errors name the value): the job's
    command-line grid, which no schema sees."""
    known = method_names()
    require(len(methods_) >= 1, f"{where}.methods", "must list at least one method")
    for m in methods_:
        require(m in known, f"{where}.methods", f"unknown method {m!r}; allowed: {', '.join(known)}")
    require(len(set(methods_)) == len(methods_), f"{where}.methods", f"lists a method twice: {methods_}")
    require(len(sizes) >= 1, f"{where}.sizes", "must list at least one sample size")
    for n in sizes:
        require(_is_int(n) and n >= 2, f"{where}.sizes", f"sample sizes must be integers >= 2, got {n!r}")
        require(n <= spec.max_n, f"{where}.sizes", f"n = {n} exceeds transfer.max_n = {spec.max_n}")
    require(len(set(sizes)) == len(sizes), f"{where}.sizes", f"lists a sample size twice: {sizes}")


def _check_value(name: str, key: str, value: Any, at: str) -> None:
    """A setting of method ``name`` has the type of its default and a value the method declares allowed."""
    info = method_info(name)
    default = info.defaults
    require(key in default, at, f"unknown setting; allowed: {', '.join(sorted(default))}")
    kind = type(default[key])
    if key in info.may_be_null and value is None:
        return
    if kind is type(None):
        kind = float
    if kind is str:
        require(isinstance(value, str), at, f"must be a string, got {value!r}")
        require_one_of(value, info.choices[key], at)
    elif kind is int:
        require(_is_int(value) and value >= 1, at, f"must be an integer >= 1, got {value!r}")
    else:
        require(_is_number(value) and math.isfinite(value), at, f"must be a finite number, got {value!r}")
        low_ok = value >= 0 if key in info.may_be_zero else value > 0
        require(low_ok, at, f"must be {'>= 0' if key in info.may_be_zero else '> 0'}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
