"""docs/STUDY.md section 9, "Our choices at a glance": each choice, its keys, the schema's default and
the default study's value, generated (``groupsparse choices``) so that neither column can drift
from config.schema.yaml or config.yaml; tests/unit/test_schema_defaults.py checks that it is in step.

Torch-free. A row names the keys a choice is set by; its defaults are read, never written here,
except for the few choices that are not a setting of the schema (a fixed construction, a
method's own declaration), which say where they live instead.
"""

from __future__ import annotations

import re
from typing import Any

from .schema import schema_property

START, END = "<!-- choices:start -->", "<!-- choices:end -->"

# (choice, keys, where its default lives when the schema holds none). A key is a dotted path of the
# study config; `task.` keys are those of a task entry (tasks.<name>.task, scaling.task, ...).
ROWS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    (
        "j* and v* drawn per seed from a hash (j* uniform, v* uniform on the sphere); null: drawn",
        ("task.j_star",),
        None,
    ),
    ("feature scale", ("task.sigma_x",), None),
    ("positional matrix: orthonormal symmetric DST-I", (), "fixed (model/transformer.py)"),
    ("precision of pretraining (per run: `tasks.<name>.dtype`)", ("dtype", "scaling.dtype"), None),
    ("gradient computation (auto: the closed form for the paper model)", ("pretrain.gradient",), None),
    ("antithetic batches (X with -X; image tasks must set iid)", ("pretrain.sampling",), None),
    ("batch, steps, step size", ("pretrain.batch", "pretrain.steps", "pretrain.eta"), None),
    (
        "evaluation set (i.i.d.; attention measured on it, per query, minimum over queries)",
        ("pretrain.eval_size",),
        None,
    ),
    ("diverged seeds recorded and frozen", ("pretrain.on_diverge",), None),
    (
        "theorem's target constants c and multiples kappa of D^3",
        ("scaling.analysis.target_c", "scaling.analysis.kappas"),
        None,
    ),
    (
        "fixed thresholds and loss target (descriptive)",
        ("scaling.analysis.thresholds", "scaling.analysis.loss_target"),
        None,
    ),
    ("downstream direction fresh uniform (null), or at an angle to v*", ("transfer.angle_deg",), None),
    ("downstream feature scale (null: pretraining's)", ("transfer.sigma_x",), None),
    ("downstream tasks run", ("transfer.downstream",), None),
    ("test set shared by all methods and n", ("transfer.test_size",), None),
    ("sample sizes", ("transfer.sizes", "transfer.max_n"), None),
    ("tuning rule", ("transfer.selection",), None),
    ("folds", ("transfer.cv_folds",), None),
    (
        "grids (wide, log; SGD steps relative to 1/mean\\|u\\|^2)",
        ("transfer.grids.<method>",),
        "`GRID` of `transfer/methods/<method>.py`",
    ),
    ("fixed settings of every method", ("transfer.hyperparameters.<method>",), "section 4.3"),
    (
        "fine-tuning from the checkpoint: one method, its grid's points named (what is trained x where v starts)",
        (
            "transfer.hyperparameters.<method>.train",
            "transfer.hyperparameters.<method>.v_start",
            "transfer.hyperparameters.<method>.passes",
        ),
        "`VARIANTS` of `transfer/methods/pretrained_sgd.py`: W_and_v or v x pretrained or zero (`_v0`); 1 pass",
    ),
    ("converged probe", (), "method `pretrained_probe`, named in `transfer.methods`"),
    ("precision of the torch methods", ("transfer.dtype",), None),
    (
        "image slots construction, split and features (`task.kind: images`)",
        ("task.reduce", "task.test_fraction", "task.images_per_class"),
        None,
    ),
    (
        "image class pairs (digits; configs/cifar10.yaml: frog/airplane -> cat/ship)",
        ("task.classes", "task.transfer_classes"),
        None,
    ),
    ("added positions use the first d coordinates of p_j", ("model.positions",), None),
    ("random initialisation scale", ("model.init", "model.init_scale"), None),
    ("extra layers are residual attention layers before the read-out", ("model.layers",), None),
    ("correlated features: equicorrelated within a group", ("task.features", "task.feature_rho"), None),
    ("heavy tails: multivariate t per group, unit variance", ("task.student_dof",), None),
    (
        "scaling grid (D_grid required when scaling is on; no d_grid: the d of scaling.task)",
        ("scaling.d_grid", "scaling.D_grid"),
        None,
    ),
    ("near-one level of the final-state claims", ("scaling.analysis.near_one",), None),
    ("sample sizes of the scaling grid's transfer", ("scaling.transfer.sizes",), None),
    ("accuracy targets of n*", ("scaling.analysis.accuracy_targets",), None),
    ("the one target every method's transfer verdict is quoted at", ("scaling.analysis.verdict_target",), None),
    (
        "power by simulation of the pipeline: studies per verdict, bootstrap resamples in each (0: plug-in only)",
        ("scaling.analysis.pipeline_power_simulations", "scaling.analysis.pipeline_power_boot"),
        None,
    ),
    ("cross-machine spread guard (pretraining verdicts only)", ("scaling.analysis.machine_spread",), None),
)


def shown(value: Any) -> str:
    """A value as the table shows it: lists comma-separated, null as null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def _study_value(config: dict[str, Any], key: str) -> str:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return ""
        node = node[part]
    return shown(node)


def _schema_value(key: str) -> str:
    prop = schema_property(key)  # KeyError for a key the schema does not have
    return shown(prop["default"]) if "default" in prop else "none"


def table(config: dict[str, Any]) -> str:
    """The Markdown table: each choice, its keys, the schema's default(s), the value(s) ``config``
    (the default study) gives at the same keys, blank where it leaves them to the schema."""
    lines = ["| choice | key | default (schema) | default study (config.yaml) |", "|---|---|---|---|"]
    for choice, keys, elsewhere in ROWS:
        named = ", ".join(f"`{k}`" for k in keys) or "-"
        if elsewhere is not None:
            default, study = elsewhere, ""
        else:
            default = "; ".join(_schema_value(k) for k in keys)
            values = [_study_value(config, k) for k in keys]
            study = "; ".join(v or "-" for v in values) if any(values) else ""
        lines.append(f"| {choice} | {named} | {default} | {study} |".replace("|  |", "| |"))
    return "\n".join(lines) + "\n"


def rewritten(text: str, config: dict[str, Any]) -> str:
    """``text`` (docs/STUDY.md) with the lines between its choices markers replaced by :func:`table`."""
    pattern = re.compile(re.escape(START) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"no table between {START} and {END}")
    return pattern.sub(lambda _: f"{START}\n{table(config)}{END}", text, count=1)
