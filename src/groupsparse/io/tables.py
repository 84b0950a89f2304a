"""The columns every per-job table must carry, checked from the Parquet schema alone (cheap).

The workflow's `check_tables` rule runs this over every per-job table before `aggregate`, so a
corrupt or foreign table is refused before Snakemake removes any earlier aggregated result;
`aggregate` checks again when it reads, for direct use of the command.
"""

from __future__ import annotations

from pathlib import Path

from .files import InputError

# --- the study's output file names (stems), imported by the rules (workflow/rules/*.smk), the
# figures and the report; each figure is written in every FIGURE_FORMATS, each table as .parquet.
FIGURE_FORMATS = ("png", "pdf")
RUN_FIGURES = ("pretrain_curves", "attention_heatmaps", "parameters")  # every named task
TRANSFER_FIGURE = "transfer_accuracy"  # a task with transfer
IMAGE_FIGURES = ("image_attention", "image_examples")  # an image task
SCALING_FIGURES = (
    "convergence_time",
    "convergence_thresholds",
    "out_of_sample",
    "population_and_batch",
    "attention_concentration",
    "sample_complexity",
    "online_error",
    "ablations",
)
# the scaling figures that need a section of the study: without it they would be panels saying "no data"
FIGURES_NEED = {"sample_complexity": "transfer", "online_error": "transfer", "ablations": "ablations"}


def scaling_figures(runs) -> list[str]:
    """The scaling figures a study has data for (``runs``: study.runs.expand's Run objects): sample
    complexity and online error need transfer at the scaling grid's levels, the ablations figure ablation runs."""
    has = {
        "transfer": any(r.role == "scaling" and r.transfer is not None for r in runs.values()),
        "ablations": any(r.role == "ablation" for r in runs.values()),
    }
    return [f for f in SCALING_FIGURES if has.get(FIGURES_NEED.get(f), True)]


PRETRAIN_TABLES = ("pretrain_trajectories", "pretrain_attention", "pretrain_summary")
TRANSFER_TABLES = ("transfer", "summary", "sample_complexity")
# written as .csv (beside a .parquet, or alone: theorem_by_D); the tables a snapshot commits
CSV_TABLES = ("pretrain_summary", "summary", "sample_complexity", "claims", "predictions", "theorem_by_D")
SCALING_TABLES = ("claims", "predictions", "scaling_fits", "ablations", "scaling_points", "scaling_crossings")


# What a pretraining run records per seed at its last step (summaries report each with an interval).
FINAL_METRICS = (
    "eval_loss",
    "eval_accuracy",
    "attention_on_relevant",
    "attention_min_on_relevant",
    "cos_v1_vstar",
    "v1_norm",
    "v2_norm",
    "W_ff_norm",
    "W_fp_norm",
    "W_pf_norm",
    "W_pp_norm",
)

# A transfer row's fitted settings are columns p_<setting> (benchopt's parameter columns), one per
# setting any method of the table has, after TRANSFER_COLUMNS.
PARAMETER_PREFIX = "p_"

# Every column of a transfer job's table, in order, before its parameter columns (transfer.runner writes them).
TRANSFER_COLUMNS = (
    "run",
    "task_name",
    "d",
    "D",
    "downstream",
    "seed",
    "j_star",
    "pretrain_j_star",
    "method",
    "n",
    "test_accuracy",
    "test_loss",
    "train_accuracy",
    "train_loss",
    "fit_seconds",
    "status",
    "error",
    "cos_direction",
    "selection",
    "hp_at_edge",
    "hp_edge",
    "cv_accuracy",
    "cv_loss",
    "online_error",
    # the paper's model: cos of the read-out's feature block v1 with the downstream v* at the start and
    # fitted, and fitted with the pretraining v* (transfer.runner; NaN for the other methods)
    "cos_v1_new_start",
    "cos_v1_new",
    "cos_v1_old",
)

# Columns every job's command adds to its tables from the run spec (commands/pretrain.py, commands/transfer.py).
RUN_COLUMNS = ("role",)

# The columns the analysis reads (analysis.inputs.require_columns), by table kind: every table that
# passes REQUIRED_COLUMNS has them.
ANALYSED_COLUMNS = {
    "trajectory": (
        "run",
        "role",
        "d",
        "D",
        "seed",
        "step",
        "status",
        "eval_loss",
        "attention_on_relevant",
        "cos_v1_vstar",
    ),
    "transfer": ("run", "role", "d", "D", "seed", "downstream", "method", "n", "status", "test_accuracy"),
}

# Transfer columns a table may lack and still be read (bookkeeping, or added after the first tables).
_TRANSFER_OPTIONAL = {
    "j_star",
    "pretrain_j_star",
    "train_loss",
    "fit_seconds",
    "error",
    "cos_direction",
    "cos_v1_new_start",
    "cos_v1_new",
    "cos_v1_old",
}
_TRANSFER_OPTIONAL |= {"selection", "hp_at_edge", "hp_edge", "cv_accuracy", "cv_loss", "online_error"}

# What a table must have to be read at all (older tables may lack the newer columns).
REQUIRED_COLUMNS = {
    "trajectory": (
        "run",
        *RUN_COLUMNS,
        "task_name",
        "d",
        "D",
        "seed",
        "j_star",
        "step",
        "train_loss",
        *(m for m in FINAL_METRICS if not m.startswith("W_")),
        "status",
        "diverged_step",
    ),
    "attention": ("run", "task_name", "seed", "step", "key", "query", "mass", "j_star"),
    "transfer": (*RUN_COLUMNS, *(c for c in TRANSFER_COLUMNS if c not in _TRANSFER_OPTIONAL)),
}


def check_table(path, kind: str) -> None:
    """Raise InputError (one line naming the file) unless ``path`` is a readable Parquet table that
    has every column a ``kind`` table must have."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such table")
    try:
        names = set(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise InputError(
            f"{path}: not a readable Parquet table ({type(exc).__name__}); delete it and rerun the job that makes it"
        ) from None
    missing = [c for c in REQUIRED_COLUMNS[kind] if c not in names]
    if missing:
        raise InputError(
            f"{path}: not a {kind} table of this study (missing columns {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}); delete it and rerun the job that makes it"
        )


def check_columns(df, needed, what: str) -> None:
    """InputError naming ``what`` and the missing columns unless the table ``df`` has every column of ``needed``."""
    missing = [c for c in needed if c not in df.columns]
    if missing:
        has = ", ".join(map(str, df.columns[:12])) + (" ..." if len(df.columns) > 12 else "")
        raise InputError(
            f"{what}: missing column(s) {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; has {has}"
        )
