"""`groupsparse snapshot`: a finished run's results into the docs: its main figures to docs/results/,
its tables and claims as Markdown to docs/results.md (opening on the answers its tables give, worded
by the findings' templates), its CSV tables to docs/results/tables/ (the committed tables), and, for a
shipped study, docs/findings.md and the README's answers table regenerated from the committed tables
(see :mod:`groupsparse.io.report` and :mod:`groupsparse.findings`). `--findings-only` regenerates
those alone."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import POSITIVE, POSITIVE_INT, InputFolder, OutputFile, OutputFolder

    p = sub.add_parser("snapshot", help="write a finished study's results to the docs, the findings and the README")
    p.add_argument(
        "--results",
        type=InputFolder(missing_ok=True),
        default="results/default",
        help="a finished study's results folder",
    )
    p.add_argument(
        "--docs",
        type=OutputFolder(),
        default="docs/results",
        help="where the figure copies go (the tables in <docs>/tables)",
    )
    p.add_argument(
        "--out", type=OutputFile(), default="docs/results.md", help="the Markdown file written (whole, generated)"
    )
    p.add_argument(
        "--wall-seconds",
        type=POSITIVE,
        default=None,
        help="wall time of the snakemake run, to report beside the sum of the job times",
    )
    p.add_argument("--cores", type=POSITIVE_INT, default=2, help="cores the run used (for the overhead ratio)")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write numbers computed from uncommitted code or from another commit than HEAD (refused by default)",
    )
    p.add_argument(
        "--findings-only",
        action="store_true",
        help="only rewrite docs/findings.md and README.md's answers table from the committed tables (docs/*/tables/)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    from pathlib import Path

    from ..findings import readme
    from ..findings.tables import SHIPPED, commit_tables

    if args.findings_only:
        changed = readme.write(".")
        done = "rewritten" if changed else "unchanged"
        print(f"docs/findings.md and README.md's answers {done} from the committed tables")
        return 0

    from ..io.report import results_commit_problem, write_snapshot

    problem = results_commit_problem(args.results)
    if problem and not args.allow_dirty:
        from ..io.files import InputError

        raise InputError(f"{problem}; commit, rerun the study, then snapshot (or --allow-dirty)")

    from ..findings.render import one_study, render
    from ..findings.tables import of_results

    answers = render("page_answers.j2", one_study(of_results(args.results)), at=readme.in_docs)
    from ..study.jobstate import study_benchmarks

    benchmarks = study_benchmarks(args.results)
    count = write_snapshot(args.results, args.docs, args.out, args.wall_seconds, args.cores, answers, benchmarks)
    tables = commit_tables(args.results, Path(args.docs) / "tables")
    print(f"wrote {args.out}, {count} figures to {args.docs} and {len(tables)} tables to {args.docs}/tables")
    study = (json.loads((Path(args.results) / "provenance.json").read_text()).get("study") or {}).get("study_name")
    if any(s.name == study and Path(s.page) == Path(args.docs) for s in SHIPPED) and Path("README.md").is_file():
        changed = readme.write(".")
        print(f"docs/findings.md and README.md's answers {'rewritten' if changed else 'unchanged'}")
    return 0
