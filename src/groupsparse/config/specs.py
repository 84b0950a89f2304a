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

from .errors import ConfigError, require  # noqa: F401 (ConfigError: re-exported, the error of every spec)
from .schema import check_run_spec, schema_defaults
from .subspace import FLOW_DEFAULTS, FlowSpec, check_flow, check_population

# Ranges, enums and defaults of the settings live in src/groupsparse/config/config.schema.yaml (see schema.py);
# this module keeps the rules that tie several settings together.
DTYPES = ("float32", "float64")  # also the transfer methods' precisions
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
# dataset -> (channels, height, width, class names); digits is scikit-learn's bundled 8x8 set
IMAGE_DATASETS = {
    "digits": (1, 8, 8, tuple(str(k) for k in range(10))),
    "cifar10": (3, 32, 32, CIFAR10_CLASSES),
}


# Every default of a setting: the schema's (see schema_defaults).
_TASK = schema_defaults("task")
_IMAGE_TASK = schema_defaults("task", kind="images")
_MODEL = schema_defaults("model")
_PRETRAIN = schema_defaults("pretrain")
_TOP = schema_defaults()
_LABELS = schema_defaults("run_labels")


# Settings added after runs existed (see RunSpec.to_dict), by section.
ADDED_SETTINGS = {"pretrain": ("eta_D_limit", "optimizer", "solver")}
_SECTION_DEFAULTS = {"pretrain": _PRETRAIN}


def _take(cls, raw: dict[str, Any] | None, where: str):
    """Build dataclass ``cls`` from ``raw`` (keys, types and ranges: the schema, checked before),
    numbers made floats where the field is one, then its cross-field rules (``validate``)."""
    raw = dict(raw or {})
    known = {f.name for f in fields(cls)}  # a task's keys depend on its kind (synthetic or images)
    unknown = sorted(set(raw) - known)
    require(
        not unknown,
        f"{where}.{unknown[0]}" if unknown else where,
        f"unknown key; allowed keys: {', '.join(sorted(known))}",
    )
    floats = {f.name for f in fields(cls) if (f.type if isinstance(f.type, str) else f.type.__name__) == "float"}
    obj = cls(**{name: float(v) if name in floats else v for name, v in raw.items()})
    obj.validate(where)
    return obj


def require_one_of(value: str, allowed: tuple[str, ...], key: str) -> None:
    require(value in allowed, key, f"got {value!r}; allowed values: {', '.join(allowed)}")


@dataclass(frozen=True)
class TaskSpec:
    """A synthetic group-sparse task (docs/STUDY.md section 1 and the section 6 variants)."""

    kind: str = _TASK["kind"]  # synthetic (this class) | images (ImageTaskSpec): TASK_SPECS
    NOT_ANTITHETIC = None  # why antithetic batches do not exist for the kind; None: its law is symmetric
    KNOWN_LAW = True  # its data law is known in closed form: population mode and the flow integrate over it
    d: int = _TASK["d"]
    D: int = _TASK["D"]
    sigma_x: float = _TASK["sigma_x"]
    relevant_groups: int = _TASK["relevant_groups"]  # K: the label is sign(sum_k <v_k, x_{j_k}>)
    j_star: int | None = _TASK["j_star"]  # fix the (first) relevant group; None: drawn from the seed
    label_noise: float = _TASK["label_noise"]  # probability of flipping a label
    features: str = _TASK["features"]  # gaussian | correlated | student_t
    feature_rho: float = _TASK["feature_rho"]  # within-group correlation for "correlated"
    student_dof: float = _TASK["student_dof"]  # degrees of freedom for "student_t"

    def validate(self, where: str = "task") -> None:
        require_one_of(self.kind, ("synthetic",), f"{where}.kind")
        require(
            1 <= self.relevant_groups <= self.D,
            f"{where}.relevant_groups",
            f"must be in 1..D={self.D}, got {self.relevant_groups}",
        )
        if self.j_star is not None:
            require(
                isinstance(self.j_star, int) and 0 <= self.j_star < self.D,
                f"{where}.j_star",
                f"must be an integer in 0..{self.D - 1} (D={self.D}), got {self.j_star!r}",
            )
        require(
            -1.0 / max(self.d - 1, 1) < self.feature_rho < 1.0,
            f"{where}.feature_rho",
            f"must make a positive-definite covariance, in (-1/(d-1), 1), got {self.feature_rho}",
        )


def pool_dims(dataset: str) -> dict[int, int]:
    """Average-pooling factor k -> group width d = C (H/k) (W/k), for every k dividing H and W."""
    C, H, W, _ = IMAGE_DATASETS[dataset]
    return {k: C * (H // k) * (W // k) for k in range(1, min(H, W) + 1) if H % k == 0 and W % k == 0}


@dataclass(frozen=True)
class ImageTaskSpec:
    """A real-image group-sparse task (docs/STUDY.md section 5).

    Each input has D slots; slot j* holds an image of one of the two ``classes`` (its class
    is the label: classes[0] -> -1, classes[1] -> +1), every other slot an image of a class
    drawn independently from the same two. Transfer uses ``transfer_classes`` at the same j*.
    """

    kind: str = "images"  # the class's kind (TaskSpec: the schema's default kind)
    KNOWN_LAW = False  # a dataset's law: only samples of it
    NOT_ANTITHETIC = (
        "image tasks (an antithetic pair X, -X with label -y needs a symmetric data law; "
        "a negated image is not an image of the other class)"
    )
    dataset: str = _IMAGE_TASK["dataset"]  # digits (bundled with scikit-learn) | cifar10 (user-provided files)
    path: str = _IMAGE_TASK["path"]  # cifar10: the cifar-10-batches-py folder or its parent; never downloaded
    classes: tuple = tuple(_IMAGE_TASK["classes"])  # pretraining pair (class names; digits accept integers)
    transfer_classes: tuple = tuple(_IMAGE_TASK["transfer_classes"])
    images_per_class: int | None = _IMAGE_TASK["images_per_class"]  # from each class before the split; None: all
    D: int = _IMAGE_TASK["D"]  # slots per input
    d: int = _IMAGE_TASK["d"]  # group width after reduction
    j_star: int | None = _IMAGE_TASK["j_star"]  # the labelled slot; None: drawn from the seed
    reduce: str = _IMAGE_TASK["reduce"]  # none | pool (k x k average pooling) | pca (fitted on the train split)
    test_fraction: float = _IMAGE_TASK["test_fraction"]  # share of each class's images held out for testing

    def __post_init__(self) -> None:
        for name in ("classes", "transfer_classes"):  # YAML lists and digit integers -> tuple of names
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                object.__setattr__(
                    self, name, tuple(str(c) if isinstance(c, int) and not isinstance(c, bool) else c for c in value)
                )

    @property
    def relevant_groups(self) -> int:
        return 1

    def validate(self, where: str = "task") -> None:
        require_one_of(self.kind, ("images",), f"{where}.kind")
        require(
            self.dataset in IMAGE_DATASETS,
            f"{where}.dataset",
            f"got {self.dataset!r}; allowed values: {', '.join(IMAGE_DATASETS)}",
        )
        names = IMAGE_DATASETS[self.dataset][3]
        require(isinstance(self.path, str), f"{where}.path", f"must be a string, got {self.path!r}")
        if self.dataset == "cifar10":
            require(
                self.path != "",
                f"{where}.path",
                "cifar10 needs the folder holding the python batches (cifar-10-batches-py), downloaded "
                "(the workflow fetches it there if it does not exist yet: see `groupsparse fetch cifar10 --help`)",
            )
        else:
            require(
                self.path == "",
                f"{where}.path",
                f"{self.dataset} is bundled with scikit-learn and reads no files; leave path empty",
            )
        for key in ("classes", "transfer_classes"):
            pair = getattr(self, key)
            require(
                isinstance(pair, tuple) and len(pair) == 2,
                f"{where}.{key}",
                f"must be a pair of class names, got {pair!r}",
            )
            for c in pair:
                require(
                    c in names, f"{where}.{key}", f"{c!r} is not a {self.dataset} class; classes: {', '.join(names)}"
                )
            require(pair[0] != pair[1], f"{where}.{key}", f"needs two different classes, got {list(pair)}")
        require(isinstance(self.D, int) and self.D >= 2, f"{where}.D", f"must be an integer >= 2, got {self.D!r}")
        if self.j_star is not None:
            require(
                isinstance(self.j_star, int) and 0 <= self.j_star < self.D,
                f"{where}.j_star",
                f"must be an integer in 0..{self.D - 1} (D={self.D}), got {self.j_star!r}",
            )
        if self.images_per_class is not None:
            n = self.images_per_class
            require(
                isinstance(n, int) and not isinstance(n, bool) and n >= 2,
                f"{where}.images_per_class",
                f"must be an integer >= 2 or null (all images), got {n!r}",
            )
            n_test = round(self.test_fraction * n)
            require(
                1 <= n_test < n,
                f"{where}.test_fraction",
                f"leaves {n_test} of {n} images per class for testing; both splits need at least one",
            )
        C, H, W, _ = IMAGE_DATASETS[self.dataset]
        full = C * H * W
        require(isinstance(self.d, int) and self.d >= 1, f"{where}.d", f"must be an integer >= 1, got {self.d!r}")
        if self.reduce == "none":
            require(
                self.d == full,
                f"{where}.d",
                f"with reduce: none, d is the image size {C}x{H}x{W} = {full}, got {self.d}",
            )
        elif self.reduce == "pool":
            dims = pool_dims(self.dataset)
            require(
                self.d in dims.values(),
                f"{where}.d",
                f"with reduce: pool on {self.dataset} ({C}x{H}x{W}), d must be one of "
                f"{', '.join(f'{v} (k={k})' for k, v in sorted(dims.items(), key=lambda kv: -kv[1]))}, got {self.d}",
            )
        else:
            require(
                self.d <= full, f"{where}.d", f"with reduce: pca, d must be <= {full} (the image size), got {self.d}"
            )


@dataclass(frozen=True)
class ModelSpec:
    """The paper's one-layer transformer and the section 6 variants (defaults: the schema's)."""

    positions: str = _MODEL["positions"]  # concat: z_j = [x_j; p_j] (paper); add: z_j = x_j + p_j
    attention: str = _MODEL["attention"]  # merged W (paper) | separate W_K, W_Q (scores (W_K z_i)^T (W_Q z_j))
    score_scale: str = _MODEL["score_scale"]  # none (paper) | sqrt: scores / sqrt(width)
    init: str = _MODEL["init"]  # zero (paper) | random: N(0, init_scale^2) entries
    init_scale: float = _MODEL["init_scale"]
    layers: int = _MODEL["layers"]  # >1 stacks residual attention layers before the paper's read-out

    def validate(self, where: str = "model") -> None:
        require(
            not (self.attention == "separate" and self.init == "zero"),
            f"{where}.init",
            "separate W_K, W_Q at zero init never move (both gradients vanish); use init: random",
        )

    @property
    def is_paper_model(self) -> bool:
        return (self.positions, self.attention, self.layers) == ("concat", "merged", 1)


def step_size(eta: float, eta_D_limit: float | None, D: int) -> float:
    """The step size at D: eta, or eta(D) = min(eta, eta_D_limit / D) with the D-dependent rule. The one
    definition: the run spec, the study's planner, the commands and the cost model call it."""
    return eta if eta_D_limit is None else min(eta, eta_D_limit / D)


@dataclass(frozen=True)
class PretrainSpec:
    """Population gradient descent (defaults and their meaning: the schema's $defs/pretrain)."""

    steps: int = _PRETRAIN["steps"]
    eta: float = _PRETRAIN["eta"]
    batch: int = _PRETRAIN["batch"]
    sampling: str = _PRETRAIN["sampling"]
    eval_size: int = _PRETRAIN["eval_size"]
    record_every: int = _PRETRAIN["record_every"]
    attention_checkpoints: int = _PRETRAIN["attention_checkpoints"]
    on_diverge: str = _PRETRAIN["on_diverge"]
    eta_D_limit: float | None = _PRETRAIN["eta_D_limit"]
    gradient: str = _PRETRAIN["gradient"]
    optimizer: str = _PRETRAIN["optimizer"]
    solver: str = _PRETRAIN["solver"]
    flow: FlowSpec = field(default_factory=FlowSpec)

    def validate(self, where: str = "pretrain") -> None:
        require(
            self.sampling != "antithetic" or self.batch % 2 == 0,
            f"{where}.batch",
            f"must be even with sampling: antithetic (X is drawn with -X), got {self.batch}",
        )
        require(self.eval_size % 2 == 0, f"{where}.eval_size", f"must be even, got {self.eval_size}")
        require(
            self.gradient != "population" or self.optimizer == "gd",
            f"{where}.optimizer",
            "population mode is plain gradient descent on its subspace; use optimizer: gd",
        )
        require(
            self.solver != "flow" or self.gradient == "population",
            f"{where}.gradient",
            f"solver: flow is population gradient descent's flow; set gradient: population, got {self.gradient}",
        )

    def step_size(self, D: int) -> float:
        """The step size at D (:func:`step_size`)."""
        return step_size(self.eta, self.eta_D_limit, D)


@dataclass(frozen=True)
class RunSpec:
    """Everything one pretraining job needs; its hash identifies the checkpoint."""

    study_seed: int
    task_name: str  # data identity: runs with the same task_name see the same data
    task: TaskSpec | ImageTaskSpec = field(default_factory=TaskSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    pretrain: PretrainSpec = field(default_factory=PretrainSpec)
    dtype: str = _TOP["dtype"]
    device: str = _TOP["device"]
    run_name: str = _LABELS["run_name"]  # the run (task, scaling point or ablation); empty: task_name
    role: str = _LABELS["role"]  # task | scaling | ablation: written to every table the run's jobs write
    variant: str = _LABELS["variant"]  # the ablation variant's name ("none" for the ablations' baseline)

    @property
    def run(self) -> str:
        return self.run_name or self.task_name

    @classmethod
    def from_dict(cls, raw: dict[str, Any], checked: bool = False) -> RunSpec:
        """A validated spec: keys, ranges, enums and types by the study's schema (skipped when
        ``checked``: the Snakefile's parse-time check already validated every section), then the
        cross-field rules here."""
        if not checked:
            check_run_spec(raw)
        raw = dict(raw)
        spec = cls(
            study_seed=raw["study_seed"],
            task_name=raw["task_name"],
            task=_take(_task_class(raw.get("task")), raw.get("task"), "task"),
            model=_take(ModelSpec, raw.get("model"), "model"),
            pretrain=_pretrain(raw.get("pretrain")),
            **{key: raw[key] for key in ("dtype", "device", "run_name", "role", "variant") if key in raw},
        )
        if spec.pretrain.gradient == "population":
            check_population(spec)
        if spec.pretrain.solver == "flow":
            check_flow(spec)
        require(
            spec.task.NOT_ANTITHETIC is None or spec.pretrain.sampling == "iid",
            "pretrain.sampling",
            f"must be iid for {spec.task.NOT_ANTITHETIC}; set pretrain.sampling: iid",
        )
        return spec

    def to_dict(self) -> dict[str, Any]:
        """The spec as a dict: what spec files hold and the science hash reads. A setting added after
        runs existed is left out at its default, so earlier spec files keep their bytes and their
        runs' checkpoints stay theirs (tests/unit/test_config_frozen_specs.py); the flow's settings
        are left out of every run that does not use the flow, and at their defaults from those that do."""
        out = asdict(self)
        flow = out["pretrain"].pop("flow")
        if self.pretrain.solver == "flow":  # the flow's settings where they differ from their defaults
            flow["targets_c"] = list(flow["targets_c"])
            out["pretrain"]["flow"] = {k: v for k, v in flow.items() if v != FLOW_DEFAULTS[k]}
        for section, keys in ADDED_SETTINGS.items():
            for key in keys:
                if out[section][key] == _SECTION_DEFAULTS[section][key]:
                    del out[section][key]
        return out

    def science_hash(self) -> str:
        """Hash of what determines the numbers (device excluded: the same run on cuda is comparable;
        role and variant excluded: labels, implied by the run name)."""
        d = self.to_dict()
        for key in ("device", "role", "variant"):
            d.pop(key)
        return config_hash(d)


def _pretrain(raw: dict[str, Any] | None) -> PretrainSpec:
    """The pretraining section, its flow settings (a nested section) taken first."""
    raw = dict(raw or {})
    flow = _take(FlowSpec, raw.pop("flow", None), "pretrain.flow")
    return _take(PretrainSpec, raw | {"flow": flow}, "pretrain")


# The spec class of each task kind (the kind's other declarations: data/kinds.py).
TASK_SPECS = {"synthetic": TaskSpec, "images": ImageTaskSpec}


def _task_class(raw: Any):
    """The spec class of ``task.kind`` (default: the schema's)."""
    kind = raw.get("kind", _TASK["kind"]) if isinstance(raw, dict) else _TASK["kind"]
    return TASK_SPECS.get(kind, TaskSpec)  # an unknown kind: TaskSpec refuses it, naming the key


def config_hash(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
