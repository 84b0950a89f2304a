"""`groupsparse summary`: print any result table as an aligned text table."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import POSITIVE_INT, InputFile, Text

    WHERE = Text(r"[^=,\s]+=.*", "COL=VALUE")
    COLUMNS = Text(r"[^,\s]+(,[^,\s]+)*", "comma-separated column names")
    p = sub.add_parser("summary", help="print a result table (Parquet) as an aligned text table")
    p.add_argument(
        "table",
        type=InputFile(),
        help="a table of a study: results/<study>/tables/<name>.parquet, e.g. results/default/tables/summary.parquet",
    )
    p.add_argument(
        "--where",
        action="append",
        type=WHERE,
        default=[],
        metavar="COL=VALUE",
        help="keep rows where COL equals VALUE (repeatable)",
    )
    p.add_argument("--columns", type=COLUMNS, default=None, help="comma-separated columns to show")
    p.add_argument("--max-rows", type=POSITIVE_INT, default=200, help="rows shown at most")
    p.set_defaults(func=run)


def run(args) -> int:
    import pandas as pd

    from ..io import files as io

    df = io.read_parquet(args.table)
    for cond in args.where:
        col, _, value = cond.partition("=")
        if col not in df:
            raise io.InputError(f"--where {cond}: no column {col!r}; columns: {', '.join(df.columns)}")
        kept = df[df[col].astype(str) == value]
        if kept.empty:  # say what the column holds rather than print an empty frame
            values = sorted(df[col].astype(str).unique())
            shown = ", ".join(values[:20]) + (f", ... ({len(values)} values)" if len(values) > 20 else "")
            print(f"no rows of {args.table} where {col} = {value!r}; {col} takes: {shown or 'no values'}")
            return 1
        df = kept
    if args.columns:
        cols = args.columns.split(",")
        missing = [c for c in cols if c not in df]
        if missing:
            raise io.InputError(f"--columns: no column {missing[0]!r}; columns: {', '.join(df.columns)}")
        df = df[cols]
    with pd.option_context(
        "display.width",
        250,
        "display.max_columns",
        50,
        "display.max_rows",
        args.max_rows,
        "display.float_format",
        "{:.4g}".format,
    ):
        print(df.head(args.max_rows).to_string(index=False))
    if len(df) > args.max_rows:
        print(f"... {len(df) - args.max_rows} more rows")
    return 0
