"""`groupsparse snapshot`: copy a finished run's main figures to docs/ and write its
tables as Markdown into the README (between the RESULTS markers); see :mod:`groupsparse.io.report`."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("snapshot", help="copy main figures to docs/ and write the result tables into the README")
    p.add_argument("--results", default="results/default", help="a finished study's results folder")
    p.add_argument("--docs", default="docs/results", help="where the figure copies go")
    p.add_argument("--readme", default="README.md", help="README whose RESULTS section is replaced")
    p.add_argument(
        "--wall-seconds",
        type=float,
        default=None,
        help="wall time of the snakemake run, to report beside the sum of the job times",
    )
    p.add_argument("--cores", type=int, default=2, help="cores the run used (for the overhead ratio)")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write numbers computed from uncommitted code or from another commit than HEAD (refused by default)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..io.report import results_commit_problem, write_snapshot

    problem = results_commit_problem(args.results)
    if problem and not args.allow_dirty:
        from ..io.files import InputError

        raise InputError(f"{problem}; commit, rerun the study, then snapshot (or --allow-dirty)")

    count = write_snapshot(args.results, args.docs, args.readme, args.wall_seconds, args.cores)
    print(f"wrote {count} figures to {args.docs} and the results section of {args.readme}")
    return 0
