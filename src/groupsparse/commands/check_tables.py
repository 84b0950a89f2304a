"""`groupsparse check-tables`: refuse a corrupt or foreign per-job table before aggregation."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import InputFile, OutputFile

    p = sub.add_parser("check-tables", help="check every per-job table before aggregation (schema only, fast)")
    p.add_argument(
        "--trajectories", nargs="*", type=InputFile(), default=[], help="per-job pretraining trajectory tables"
    )
    p.add_argument("--attention", nargs="*", type=InputFile(), default=[], help="per-job attention tables")
    p.add_argument("--transfer", nargs="*", type=InputFile(), default=[], help="per-job transfer tables")
    p.add_argument("--out", type=OutputFile(), required=True, help="a marker file written when every table passes")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..io import files as io
    from ..io.tables import check_table

    checked = []
    for kind, paths in (("trajectory", args.trajectories), ("attention", args.attention), ("transfer", args.transfer)):
        for path in paths:
            check_table(path, kind)
            checked.append(path)
    io.write_text_atomic(args.out, "".join(f"{p}\n" for p in checked))
    print(f"checked {len(checked)} per-job tables")
    return 0
