"""`groupsparse plot`: the figures of one run from the aggregated tables."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    from ._args import NAME, InputFolder, OutputFolder

    p = sub.add_parser("plot", help="figures of one run (PNG and PDF) from results/<study>/tables")
    p.add_argument("--tables", type=InputFolder(), required=True, help="folder with the aggregated tables")
    p.add_argument("--run", type=NAME, required=True, help="run name, e.g. base")
    p.add_argument("--outdir", type=OutputFolder(), required=True, help="folder for this run's figures")
    p.add_argument(
        "--kind",
        choices=["pretrain", "transfer"],
        default="pretrain",
        help="pretrain: curves, attention heatmaps, parameters; transfer: accuracy against n",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..figures import runs as figures
    from ..io import files as io

    tables = Path(args.tables)
    traj = io.read_parquet(tables / "pretrain_trajectories.parquet")
    if not (traj["run"] == args.run).any():
        raise io.InputError(f"--run {args.run}: no such run in {tables}; runs: {', '.join(sorted(set(traj['run'])))}")
    traj = traj[traj["run"] == args.run]
    run_specs = io.read_provenance(tables / "pretrain_trajectories.parquet").get("run_specs") or {}
    title = figures.describe(run_specs.get(args.run), args.run)
    outdir = Path(args.outdir)
    if args.kind == "pretrain":
        att = io.read_parquet(tables / "pretrain_attention.parquet")
        paths = figures.pretrain_figures(traj, att[att["run"] == args.run], title, outdir)
    else:
        summary = io.read_parquet(tables / "summary.parquet")
        summary = summary[summary["run"] == args.run]
        if summary.empty:
            raise io.InputError(f"--run {args.run}: no transfer rows in {tables / 'summary.parquet'}")
        paths = figures.transfer_accuracy(summary, title, outdir)
    print("\n".join(str(p) for p in paths))
    return 0
