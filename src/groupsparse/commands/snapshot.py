"""`groupsparse snapshot`: copy a finished run's main figures to docs/results/ and write its
tables and claims as Markdown to docs/results.md (the README links it); see :mod:`groupsparse.io.report`."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("snapshot", help="write a finished study's results and claims to docs/results.md")
    p.add_argument("--results", default="results/default", help="a finished study's results folder")
    p.add_argument("--docs", default="docs/results", help="where the figure copies go")
    p.add_argument("--out", default="docs/results.md", help="the Markdown file written (whole, generated)")
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

    count = write_snapshot(args.results, args.docs, args.out, args.wall_seconds, args.cores)
    print(f"wrote {args.out} and {count} figures to {args.docs}")
    return 0
