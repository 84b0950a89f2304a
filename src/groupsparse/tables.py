"""The columns every per-job table must carry, checked from the Parquet schema alone (cheap).

The workflow's `check_tables` rule runs this over every per-job table before `aggregate`, so a
corrupt or foreign table is refused before Snakemake removes any earlier aggregated result;
`aggregate` checks again when it reads, for direct use of the command.
"""

from __future__ import annotations

from pathlib import Path

from .io import InputError

REQUIRED_COLUMNS = {
    "trajectory": ("run", "task_name", "d", "D", "seed", "j_star", "step", "train_loss", "eval_loss",
                   "eval_accuracy", "attention_on_relevant", "cos_v1_vstar", "v1_norm", "v2_norm", "status",
                   "diverged_step"),
    "attention": ("run", "task_name", "seed", "step", "key", "query", "mass", "j_star"),
    "transfer": ("run", "task_name", "d", "D", "downstream", "seed", "method", "n", "test_accuracy",
                 "test_loss", "train_accuracy", "status"),
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
        raise InputError(f"{path}: not a readable Parquet table ({type(exc).__name__}); delete it and rerun "
                         "the job that makes it") from None
    missing = [c for c in REQUIRED_COLUMNS[kind] if c not in names]
    if missing:
        raise InputError(f"{path}: not a {kind} table of this study (missing columns {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}); delete it and rerun the job that makes it")


def check_columns(df, kind: str, path) -> None:
    """The same check on a table already read."""
    missing = [c for c in REQUIRED_COLUMNS[kind] if c not in df.columns]
    if missing:
        raise InputError(f"{path}: not a {kind} table of this study (missing columns {', '.join(missing[:5])})")
