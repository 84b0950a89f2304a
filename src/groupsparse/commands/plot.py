"""`groupsparse plot`: the figures of one run from the aggregated tables, or (``--headline``) the
README's one figure per question from the committed tables (docs/<study>/tables)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    from ._args import NAME, InputFolder, OutputFolder, Text

    # a committed study's folder name under --docs (population, results) or a path to one
    STUDY_FOLDER = Text(r"[A-Za-z0-9_.][A-Za-z0-9_./-]*", "a study folder: a name under --docs or a path")

    p = sub.add_parser(
        "plot",
        help="figures of one run (PNG and PDF) from results/<study>/tables, or --headline: one figure per "
        "question (docs/figures/question1.png ...) from the committed tables",
    )
    p.add_argument(
        "--tables",
        type=InputFolder(),
        help="folder with the aggregated tables (results/<study>/tables; a committed docs/<study>/tables "
        "serves --kind transfer from its CSV)",
    )
    p.add_argument("--run", type=NAME, help="run name, e.g. base")
    p.add_argument(
        "--outdir", type=OutputFolder(), help="folder for this run's figures (--headline: default <docs>/figures)"
    )
    p.add_argument(
        "--kind",
        choices=["pretrain", "transfer"],
        default="pretrain",
        help="pretrain: curves, attention heatmaps, parameters; transfer: accuracy against n",
    )
    p.add_argument(
        "--headline",
        action="store_true",
        help="write question1.png ... question4.png from the committed tables under --docs",
    )
    p.add_argument(
        "--redraw-committed",
        action="store_true",
        help="with --headline: also redraw, in place, the committed study figures the committed tables determine "
        "(each study's scaling_out_of_sample.png and <task>_transfer_accuracy.png)",
    )
    p.add_argument(
        "--docs",
        type=InputFolder(missing_ok=True),
        default="docs",
        help="with --headline: the folder of the committed studies",
    )
    for q, what in (
        ("question1", "population gradient descent against the theorem's rate"),
        ("question2", "ordinary training over D"),
        ("question3", "samples needed against d and D"),
        ("question4", "real images"),
    ):
        p.add_argument(
            f"--{q}",
            nargs="+",
            type=STUDY_FOLDER,
            metavar="STUDY",
            help=f"with --headline: the study folders (under --docs, or paths) of {what}, in precedence order",
        )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..io import files as io

    if args.headline:
        from ..figures import headline

        sources = {q: getattr(args, q) for q in headline.SOURCES if getattr(args, q)}
        paths = headline.write_all(args.docs, args.outdir, sources)
        if args.redraw_committed:
            paths += headline.redraw_committed(args.docs)
        print("\n".join(str(p) for p in paths))
        return 0
    missing = [f"--{a}" for a in ("tables", "run", "outdir") if not getattr(args, a)]
    if missing:
        raise io.InputError(f"{', '.join(missing)}: needed for one run's figures (or give --headline)")
    from ..figures import runs as figures

    tables = Path(args.tables)
    specs, study = figures.run_specs(tables)
    title = figures.describe(specs.get(args.run), args.run, study)
    outdir = Path(args.outdir)
    if args.kind == "pretrain":
        traj = io.read_parquet(tables / "pretrain_trajectories.parquet")
        if not (traj["run"] == args.run).any():
            runs = ", ".join(sorted(set(traj["run"])))
            raise io.InputError(f"--run {args.run}: no such run in {tables}; runs: {runs}")
        traj = traj[traj["run"] == args.run]
        att = io.read_parquet(tables / "pretrain_attention.parquet")
        paths = figures.pretrain_figures(traj, att[att["run"] == args.run], title, outdir)
    else:
        summary = figures.read_table(tables, "summary")
        summary = summary[summary["run"] == args.run]
        if summary.empty:
            raise io.InputError(f"--run {args.run}: no transfer rows in {tables}/summary")
        paths = figures.transfer_accuracy(summary, title, outdir)
    print("\n".join(str(p) for p in paths))
    return 0
