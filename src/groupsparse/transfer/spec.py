"""Validated settings of the transfer comparison (docs/STUDY.md section 4).

Pure Python (no torch): the Snakefile validates ``transfer:`` at parse time. Sample sizes
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

from ..config.specs import DTYPES, _check, _choice, config_hash

# pretrained_finetune / pretrained_frozen_W start from the pretrained v (the paper's protocol as
# we read it); the _v0 variants reset v to 0 (a fresh read-out) and keep the pretrained W;
# pretrained_probe fits v to convergence by L2 logistic regression on u(X) = Z S 1 with W frozen.
PRETRAINED_METHODS = (
    "pretrained_finetune",
    "pretrained_finetune_v0",
    "pretrained_frozen_W",
    "pretrained_frozen_W_v0",
    "pretrained_probe",
)
# Online SGD (one pass, one sample per step): these rows also record the average online error.
ONLINE_METHODS = (
    "pretrained_finetune",
    "pretrained_finetune_v0",
    "pretrained_frozen_W",
    "pretrained_frozen_W_v0",
    "scratch_transformer",
)
METHODS = PRETRAINED_METHODS + ("scratch_transformer", "logreg", "group_lasso", "mlp", "std_transformer")
DOWNSTREAM = ("transfer", "negative_control")
SELECTIONS = ("fixed", "cv")
DEFAULT_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

# The paper's fine-tuning protocol (online SGD, one sample per step, `passes` passes over
# the n samples), shared by the paper-model methods so that only the start differs.
# Step: eta_rel / mean_i |u(X_i)|^2 when eta_rel is set (scale-free: u(X) = Z S 1 = df/dv at the
# starting parameters, averaged over the samples being fitted; 1 / mean |u|^2 is the per-sample
# stability scale of the step in v), else the absolute eta.
# Rule "fixed" keeps the old protocol: absolute eta = 0.01 at every d, D and n (about the
# per-sample stability limit 2/L in v at d = D = 10 with attention on j*).
_SGD = {"eta": 0.01, "eta_rel": None, "passes": 1}
# Torch nets: AdamW; minibatches of `batch`, steps = clamp(ceil(epochs * n / batch), min_steps, max_steps).
_NET = {"lr": 1e-3, "weight_decay": 1e-2, "batch": 64, "epochs": 20, "min_steps": 200, "max_steps": 1000}
_C = {"C": 1.0, "max_iter": 1000}

# Rule "fixed": these documented defaults, the same at every n (see the README).
DEFAULT_HYPERPARAMETERS: dict[str, dict[str, Any]] = {
    # v_start: "pretrained" (the paper's protocol) | "zero" (a fresh read-out, as in head re-initialisation)
    "pretrained_finetune": dict(_SGD, v_start="pretrained"),
    "pretrained_finetune_v0": dict(_SGD, v_start="zero"),
    "pretrained_frozen_W": dict(_SGD, v_start="pretrained"),
    "pretrained_frozen_W_v0": dict(_SGD, v_start="zero"),
    # scikit-learn LogisticRegression (L2, lbfgs, intercept) on u(X) = Z S 1 at the pretrained W
    "pretrained_probe": dict(_C),
    "scratch_transformer": dict(_SGD),
    # scikit-learn's defaults (C = 1: L2 penalty |w|^2 / 2 against the summed loss), lbfgs given room to converge
    "logreg": dict(_C),
    # alpha = alpha_scale * universal threshold sigma (sqrt(d) + sqrt(2 log D)) / (2 sqrt(n)):
    # the size of the largest pure-noise group gradient at w = 0 (methods.py explains)
    "group_lasso": {"alpha_scale": 1.0, "solver": "GroupProxNewton", "tol": 1e-6, "max_iter": 1000},
    "mlp": {"width": 128, "depth": 2, **_NET},
    "std_transformer": {"width": 32, "heads": 4, "layers": 2, "ff_width": 64, "positions": "learned", **_NET},
}


def _log_grid(low_exp: float, high_exp: float, per_decade: int = 2) -> list[float]:
    """10^low .. 10^high, `per_decade` points a decade (1, 3.16, 10, ... rounded to 1, 3, 10)."""
    k = round((high_exp - low_exp) * per_decade)
    out = []
    for i in range(k + 1):
        e = low_exp + i / per_decade
        base = 10.0 ** math.floor(e + 1e-9)
        frac = e - math.floor(e + 1e-9)
        out.append(float(f"{base * (3.0 if abs(frac - 0.5) < 1e-9 else 10.0**frac):.10g}"))
    return out


# SGD step: 1e-3 .. 1e4 x the stability scale 1/mean|u|^2, 7 decades, 15 points. Large relative steps
# are not unstable for the logistic loss (its gradient is bounded; sign(f) is scale-free): on the
# base task CV picked 3 .. 1e4 from the pretrained v (which must be overridden), 0.03 .. 300 from
# v = 0, and 0.01 at the lower edge for the scratch model at large n (a first grid from 0.01).
# Whole decades: 8 points (a 15-point half-decade grid cost about 2x more and moved n* little).
_ETA_REL = _log_grid(-3, 4, 1)
_C_GRID = _log_grid(-4, 4, 1)  # 1e-4 .. 1e4: 8 decades, 9 points
# AdamW learning rate, whole decades (the nets are the costly fits). With a first grid 1e-4 .. 1e-2
# on the base task the MLP chose the lower edge 1e-4 at n <= 256 and the standard transformer the
# upper edge 1e-2 at every n >= 512 (below n = 512 it is at chance whatever the rate): the MLP's grid
# starts at 1e-5, the transformer's spans 1e-3 .. 1e-1 (three points: its fits dominate the cost).
_LR_MLP = _log_grid(-5, -2, 1)
_LR_STD = _log_grid(-3, -1, 1)

# Rule "cv" (the default): each (seed, n) picks, by stratified k-fold cross-validation on its
# own n samples, the grid point with the best mean validation accuracy (ties: lower mean
# validation loss, then the earlier grid point), then refits on all n; other keys keep their
# defaults. runner._select documents the folds.
DEFAULT_GRIDS: dict[str, dict[str, list]] = {
    "pretrained_finetune": {"eta_rel": _ETA_REL},
    "pretrained_finetune_v0": {"eta_rel": _ETA_REL},
    "pretrained_frozen_W": {"eta_rel": _ETA_REL},
    "pretrained_frozen_W_v0": {"eta_rel": _ETA_REL},
    "pretrained_probe": {"C": _C_GRID},
    "scratch_transformer": {"eta_rel": _ETA_REL},
    "logreg": {"C": _C_GRID},
    "group_lasso": {"alpha_scale": _log_grid(-2, 0.5)},  # 0.01 .. 3 x the universal threshold
    "mlp": {"lr": _LR_MLP},
    "std_transformer": {"lr": _LR_STD},
}

_STRING_CHOICES = {
    "positions": ("learned", "sine"),
    "solver": ("GroupBCD", "GroupProxNewton"),
    "v_start": ("pretrained", "zero"),
}
_MAY_BE_ZERO = {"weight_decay"}
_MAY_BE_NULL = {"eta_rel"}


@dataclass(frozen=True)
class TransferSpec:
    max_n: int = 65536  # largest sample size a job accepts
    test_size: int = 10000  # fresh test samples per (task, seed), shared by all methods and n
    downstream: tuple = DOWNSTREAM  # which downstream tasks to run
    control_methods: tuple | None = None  # methods also fitted on negative_control (None: every method)
    angle_deg: float | None = None  # None: v~* a fresh uniform unit vector; else at this angle to v*
    sigma_x: float | None = None  # None: the pretraining task's sigma_x
    selection: str = "cv"  # hyperparameter rule: cv (k-fold CV on the n samples) | fixed
    cv_folds: int = 3  # k; reduced to floor(n / 2) when n < 2k (runner._select)
    cv_large_n: int = 128  # from this n on: one holdout split instead of k fits (cost)
    cv_holdout_folds: int = 2  # ... validating on 1/cv_holdout_folds of the samples (1/2: 50/50)
    online_eval_size: int = 1000  # test samples (the first of the test set) scoring each online iterate
    online_points: int = 64  # iterates scored per online-SGD fit: all when n <= this, else log-spaced
    hyperparameters: dict = field(default_factory=dict)  # method -> {key: value}, overrides the defaults
    grids: dict = field(default_factory=dict)  # method -> {key: [values]}, replaces the cv grid
    dtype: str = "float32"  # torch methods (the checkpoint is cast to it)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None, where: str = "transfer") -> TransferSpec:
        raw = dict(raw or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        _check(
            not unknown,
            f"{where}.{unknown[0]}" if unknown else where,
            f"unknown key; allowed keys: {', '.join(sorted(known))}",
        )
        for key in (
            "max_n",
            "test_size",
            "cv_folds",
            "cv_holdout_folds",
            "cv_large_n",
            "online_eval_size",
            "online_points",
        ):
            if key in raw:
                _check(_is_int(raw[key]), f"{where}.{key}", f"must be an integer, got {raw[key]!r}")
        for key in ("angle_deg", "sigma_x"):
            if raw.get(key) is not None:
                _check(_is_number(raw[key]), f"{where}.{key}", f"must be a number or null, got {raw[key]!r}")
                raw[key] = float(raw[key])
        if "downstream" in raw:
            value = raw["downstream"]
            _check(
                isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value),
                f"{where}.downstream",
                f"must be a list of names from {', '.join(DOWNSTREAM)}, got {value!r}",
            )
            raw["downstream"] = tuple(value)
        if raw.get("control_methods") is not None:
            value = raw["control_methods"]
            _check(
                isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value),
                f"{where}.control_methods",
                f"must be null or a list of method names, got {value!r}",
            )
            raw["control_methods"] = tuple(value)
        for key in ("selection", "dtype"):
            if key in raw:
                _check(isinstance(raw[key], str), f"{where}.{key}", f"must be a string, got {raw[key]!r}")
        for key in ("hyperparameters", "grids"):
            if key in raw:
                _check(
                    isinstance(raw[key], dict),
                    f"{where}.{key}",
                    f"must be a mapping method -> settings, got {raw[key]!r}",
                )
                raw[key] = copy.deepcopy(raw[key])
        spec = cls(**raw)
        spec.validate(where)
        return spec

    def validate(self, where: str = "transfer") -> None:
        _check(self.max_n >= 2, f"{where}.max_n", f"must be >= 2, got {self.max_n}")
        _check(self.test_size >= 2, f"{where}.test_size", f"must be >= 2, got {self.test_size}")
        _check(
            len(self.downstream) >= 1 and len(set(self.downstream)) == len(self.downstream),
            f"{where}.downstream",
            f"must list distinct names, got {list(self.downstream)}",
        )
        for name in self.downstream:
            _choice(name, DOWNSTREAM, f"{where}.downstream")
        for name in self.control_methods or ():
            _choice(name, METHODS, f"{where}.control_methods")
        if self.angle_deg is not None:
            _check(
                0.0 <= self.angle_deg <= 180.0,
                f"{where}.angle_deg",
                f"must be in [0, 180] degrees or null, got {self.angle_deg}",
            )
        if self.sigma_x is not None:
            _check(self.sigma_x > 0, f"{where}.sigma_x", f"must be > 0 or null, got {self.sigma_x}")
        _choice(self.selection, SELECTIONS, f"{where}.selection")
        _check(self.cv_folds >= 2, f"{where}.cv_folds", f"must be >= 2, got {self.cv_folds}")
        _check(self.cv_holdout_folds >= 2, f"{where}.cv_holdout_folds", f"must be >= 2, got {self.cv_holdout_folds}")
        _check(self.cv_large_n >= 2, f"{where}.cv_large_n", f"must be >= 2, got {self.cv_large_n}")
        _check(self.online_eval_size >= 1, f"{where}.online_eval_size", f"must be >= 1, got {self.online_eval_size}")
        _check(self.online_points >= 2, f"{where}.online_points", f"must be >= 2, got {self.online_points}")
        _choice(self.dtype, DTYPES, f"{where}.dtype")
        for method, values in self.hyperparameters.items():
            key = f"{where}.hyperparameters.{method}"
            _check(method in METHODS, key, f"unknown method; allowed: {', '.join(METHODS)}")
            _check(isinstance(values, dict), key, f"must be a mapping setting -> value, got {values!r}")
            for name, value in values.items():
                _check_value(method, name, value, f"{key}.{name}")
        for method, grid in self.grids.items():
            key = f"{where}.grids.{method}"
            _check(method in METHODS, key, f"unknown method; allowed: {', '.join(METHODS)}")
            _check(
                isinstance(grid, dict) and grid, key, f"must be a non-empty mapping setting -> [values], got {grid!r}"
            )
            for name, values in grid.items():
                _check(
                    isinstance(values, list) and values,
                    f"{key}.{name}",
                    f"must be a non-empty list of values, got {values!r}",
                )
                for value in values:
                    _check_value(method, name, value, f"{key}.{name}")
        for method in METHODS:
            hp = self.method_hyperparameters(method)
            if method == "std_transformer":
                for width, heads in itertools.product(*(self.grid_values(method, k) for k in ("width", "heads"))):
                    _check(
                        width % heads == 0,
                        f"{where}.hyperparameters.std_transformer.heads",
                        f"must divide width, got width {width}, heads {heads}",
                    )
            if "min_steps" in hp:
                _check(
                    hp["min_steps"] <= hp["max_steps"],
                    f"{where}.hyperparameters.{method}.min_steps",
                    f"must be <= max_steps ({hp['max_steps']}), got {hp['min_steps']}",
                )

    def method_hyperparameters(self, method: str) -> dict[str, Any]:
        """The fixed-rule settings of ``method``: the defaults with this spec's overrides."""
        return DEFAULT_HYPERPARAMETERS[method] | self.hyperparameters.get(method, {})

    def method_grid(self, method: str) -> dict[str, list]:
        return self.grids.get(method, DEFAULT_GRIDS[method])

    def grid_values(self, method: str, name: str) -> list:
        grid = self.method_grid(method) if self.selection == "cv" else {}
        return grid.get(name, [self.method_hyperparameters(method)[name]])

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
            del d["control_methods"]  # absent = every method: specs written before the key keep their hash
        else:
            d["control_methods"] = list(self.control_methods)
        return d

    def fits_on(self, downstream: str, method: str) -> bool:
        """Whether ``method`` is fitted on ``downstream`` (the negative control: control_methods only)."""
        return downstream != "negative_control" or self.control_methods is None or method in self.control_methods

    def science_hash(self) -> str:
        return config_hash(self.to_dict())


def check_grid(methods: list[str], sizes: list[int], spec: TransferSpec, where: str = "transfer") -> None:
    """Refuse an unknown method, a bad or too large sample size (errors name the value)."""
    _check(len(methods) >= 1, f"{where}.methods", "must list at least one method")
    for m in methods:
        _check(m in METHODS, f"{where}.methods", f"unknown method {m!r}; allowed: {', '.join(METHODS)}")
    _check(len(set(methods)) == len(methods), f"{where}.methods", f"lists a method twice: {methods}")
    _check(len(sizes) >= 1, f"{where}.sizes", "must list at least one sample size")
    for n in sizes:
        _check(_is_int(n) and n >= 2, f"{where}.sizes", f"sample sizes must be integers >= 2, got {n!r}")
        _check(n <= spec.max_n, f"{where}.sizes", f"n = {n} exceeds transfer.max_n = {spec.max_n}")
    _check(len(set(sizes)) == len(sizes), f"{where}.sizes", f"lists a sample size twice: {sizes}")


def _check_value(method: str, name: str, value: Any, key: str) -> None:
    default = DEFAULT_HYPERPARAMETERS[method]
    _check(name in default, key, f"unknown setting; allowed: {', '.join(sorted(default))}")
    kind = type(default[name])
    if name in _MAY_BE_NULL and value is None:
        return
    if kind is type(None):
        kind = float
    if kind is str:
        _check(isinstance(value, str), key, f"must be a string, got {value!r}")
        _choice(value, _STRING_CHOICES[name], key)
    elif kind is int:
        _check(_is_int(value) and value >= 1, key, f"must be an integer >= 1, got {value!r}")
    else:
        _check(_is_number(value) and math.isfinite(value), key, f"must be a finite number, got {value!r}")
        low_ok = value >= 0 if name in _MAY_BE_ZERO else value > 0
        _check(low_ok, key, f"must be {'>= 0' if name in _MAY_BE_ZERO else '> 0'}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
