"""Typed, validated settings for tasks, models and pretraining.

Pure Python (no torch): the Snakefile imports this module at parse time to run the
cross-field checks a JSON schema cannot express (j* < D, even antithetic batches...).
Every error names the offending key path and the allowed values.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any


class ConfigError(ValueError):
    """A setting is impossible; the message names the key and what is allowed."""


FEATURE_LAWS = ("gaussian", "correlated", "student_t")
POSITIONS = ("concat", "add")
ATTENTIONS = ("merged", "separate")
SCORE_SCALES = ("none", "sqrt")
INITS = ("zero", "random")
SAMPLINGS = ("antithetic", "iid")
DTYPES = ("float32", "float64")
DEVICES = ("cpu", "cuda")
ON_DIVERGE = ("record", "fail")
GRADIENTS = ("auto", "closed_form", "autograd")


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def _take(cls, raw: dict[str, Any] | None, where: str):
    """Build dataclass ``cls`` from ``raw``, refusing unknown keys and wrong types."""
    raw = dict(raw or {})
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    _check(not unknown, f"{where}.{unknown[0]}" if unknown else where,
           f"unknown key; allowed keys: {', '.join(sorted(known))}")
    kwargs = {}
    for name, f in known.items():
        if name not in raw:
            continue
        value = raw[name]
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        if kind in ("int",):
            _check(isinstance(value, int) and not isinstance(value, bool), f"{where}.{name}",
                   f"must be an integer, got {value!r}")
        elif kind in ("float",):
            _check(isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}.{name}",
                   f"must be a number, got {value!r}")
            value = float(value)
        elif kind in ("str",):
            _check(isinstance(value, str), f"{where}.{name}", f"must be a string, got {value!r}")
        elif kind in ("bool",):
            _check(isinstance(value, bool), f"{where}.{name}", f"must be true or false, got {value!r}")
        kwargs[name] = value
    obj = cls(**kwargs)
    obj.validate(where)
    return obj


def _choice(value: str, allowed: tuple[str, ...], key: str) -> None:
    _check(value in allowed, key, f"got {value!r}; allowed values: {', '.join(allowed)}")


@dataclass(frozen=True)
class TaskSpec:
    """A synthetic group-sparse task (STUDY.md section 1 and the section 6 variants)."""

    d: int = 10
    D: int = 10
    sigma_x: float = 1.0
    relevant_groups: int = 1          # K: the label is sign(sum_k <v_k, x_{j_k}>)
    j_star: int | None = None         # fix the (first) relevant group; None: drawn from the seed
    label_noise: float = 0.0          # probability of flipping a label
    features: str = "gaussian"        # gaussian | correlated | student_t
    feature_rho: float = 0.5          # within-group correlation for "correlated"
    student_dof: float = 3.0          # degrees of freedom for "student_t"

    def validate(self, where: str = "task") -> None:
        _check(self.d >= 1, f"{where}.d", f"must be >= 1, got {self.d}")
        _check(self.D >= 2, f"{where}.D", f"must be >= 2, got {self.D}")
        _check(self.sigma_x > 0, f"{where}.sigma_x", f"must be > 0, got {self.sigma_x}")
        _check(1 <= self.relevant_groups <= self.D, f"{where}.relevant_groups",
               f"must be in 1..D={self.D}, got {self.relevant_groups}")
        if self.j_star is not None:
            _check(isinstance(self.j_star, int) and 0 <= self.j_star < self.D, f"{where}.j_star",
                   f"must be an integer in 0..{self.D - 1} (D={self.D}), got {self.j_star!r}")
        _check(0.0 <= self.label_noise < 0.5, f"{where}.label_noise",
               f"must be in [0, 0.5), got {self.label_noise}")
        _choice(self.features, FEATURE_LAWS, f"{where}.features")
        _check(-1.0 / max(self.d - 1, 1) < self.feature_rho < 1.0, f"{where}.feature_rho",
               f"must make a positive-definite covariance, in (-1/(d-1), 1), got {self.feature_rho}")
        _check(self.student_dof > 2, f"{where}.student_dof",
               f"must be > 2 (finite variance), got {self.student_dof}")


@dataclass(frozen=True)
class ModelSpec:
    """The paper's one-layer transformer and the section 6 variants."""

    positions: str = "concat"   # concat: z_j = [x_j; p_j] (paper); add: z_j = x_j + p_j
    attention: str = "merged"   # merged W (paper) | separate W_K, W_Q (scores (W_K z_i)^T (W_Q z_j))
    score_scale: str = "none"   # none (paper) | sqrt: scores / sqrt(width)
    init: str = "zero"          # zero (paper) | random: N(0, init_scale^2) entries
    init_scale: float = 0.01
    layers: int = 1             # >1 stacks residual attention layers before the paper's read-out

    def validate(self, where: str = "model") -> None:
        _choice(self.positions, POSITIONS, f"{where}.positions")
        _choice(self.attention, ATTENTIONS, f"{where}.attention")
        _choice(self.score_scale, SCORE_SCALES, f"{where}.score_scale")
        _choice(self.init, INITS, f"{where}.init")
        _check(self.init_scale >= 0, f"{where}.init_scale", f"must be >= 0, got {self.init_scale}")
        _check(1 <= self.layers <= 8, f"{where}.layers", f"must be in 1..8, got {self.layers}")
        _check(not (self.attention == "separate" and self.init == "zero"), f"{where}.init",
               "separate W_K, W_Q at zero init never move (both gradients vanish); use init: random")

    @property
    def is_paper_model(self) -> bool:
        return (self.positions, self.attention, self.layers) == ("concat", "merged", 1)


@dataclass(frozen=True)
class PretrainSpec:
    steps: int = 3000
    eta: float = 0.5
    batch: int = 2048
    sampling: str = "antithetic"   # antithetic: X drawn with -X (label -y); iid: plain batches
    eval_size: int = 4096
    record_every: int = 50         # regular recording grid (plus log-spaced steps)
    attention_checkpoints: int = 6 # log-spaced steps at which the whole mean S is stored
    on_diverge: str = "record"     # record: keep going, mark the seed diverged | fail: exit non-zero
    gradient: str = "auto"         # auto: closed form for the paper model, autograd otherwise

    def validate(self, where: str = "pretrain") -> None:
        _check(self.steps >= 1, f"{where}.steps", f"must be >= 1, got {self.steps}")
        _check(self.eta > 0, f"{where}.eta", f"must be > 0, got {self.eta}")
        _check(self.batch >= 2, f"{where}.batch", f"must be >= 2, got {self.batch}")
        _choice(self.sampling, SAMPLINGS, f"{where}.sampling")
        _check(self.sampling != "antithetic" or self.batch % 2 == 0, f"{where}.batch",
               f"must be even with sampling: antithetic (X is drawn with -X), got {self.batch}")
        _check(self.eval_size >= 2 and self.eval_size % 2 == 0, f"{where}.eval_size",
               f"must be an even number >= 2, got {self.eval_size}")
        _check(self.record_every >= 1, f"{where}.record_every", f"must be >= 1, got {self.record_every}")
        _check(self.attention_checkpoints >= 1, f"{where}.attention_checkpoints",
               f"must be >= 1, got {self.attention_checkpoints}")
        _choice(self.on_diverge, ON_DIVERGE, f"{where}.on_diverge")
        _choice(self.gradient, GRADIENTS, f"{where}.gradient")


@dataclass(frozen=True)
class RunSpec:
    """Everything one pretraining job needs; its hash identifies the checkpoint."""

    study_seed: int
    task_name: str
    task: TaskSpec = field(default_factory=TaskSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    pretrain: PretrainSpec = field(default_factory=PretrainSpec)
    dtype: str = "float32"
    device: str = "cpu"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "RunSpec":
        raw = dict(raw)
        allowed = {"study_seed", "task_name", "task", "model", "pretrain", "dtype", "device"}
        unknown = sorted(set(raw) - allowed)
        _check(not unknown, unknown[0] if unknown else "", f"unknown key; allowed: {', '.join(sorted(allowed))}")
        _check(isinstance(raw.get("study_seed"), int), "study_seed", "must be an integer")
        _check(isinstance(raw.get("task_name"), str) and raw["task_name"] != "", "task_name",
               "must be a non-empty string")
        spec = cls(
            study_seed=raw["study_seed"],
            task_name=raw["task_name"],
            task=_take(TaskSpec, raw.get("task"), "task"),
            model=_take(ModelSpec, raw.get("model"), "model"),
            pretrain=_take(PretrainSpec, raw.get("pretrain"), "pretrain"),
            dtype=raw.get("dtype", "float32"),
            device=raw.get("device", "cpu"),
        )
        _choice(spec.dtype, DTYPES, "dtype")
        _choice(spec.device, DEVICES, "device")
        return spec

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def science_hash(self) -> str:
        """Hash of what determines the numbers (device excluded: the same run on cuda is comparable)."""
        d = self.to_dict()
        d.pop("device")
        return config_hash(d)


def config_hash(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
