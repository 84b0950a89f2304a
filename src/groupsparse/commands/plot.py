"""`groupsparse plot`: the figures of one run from the aggregated tables."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("plot", help="figures of one run (PNG and PDF) from results/tables")
    p.add_argument("--tables", required=True, help="folder with the aggregated tables")
    p.add_argument("--run", required=True, help="run name, e.g. base")
    p.add_argument("--outdir", required=True, help="folder for this run's figures")
    p.add_argument("--kind", choices=["pretrain", "transfer"], default="pretrain",
                   help="pretrain: curves, attention heatmaps, parameters; transfer: accuracy against n")
    p.set_defaults(func=run)


def run(args) -> int:
    from .. import aggregate, io, plots
    tables = Path(args.tables)
    traj = io.read_parquet(tables / "pretrain_trajectories.parquet")
    att = io.read_parquet(tables / "pretrain_attention.parquet")
    traj, att = traj[traj["run"] == args.run], att[att["run"] == args.run]
    if traj.empty:
        raise io.InputError(f"--run {args.run}: no such run in {tables}; runs: {', '.join(sorted(set(io.read_parquet(tables / 'pretrain_trajectories.parquet')['run'])))}")
    spec = io.read_provenance(tables / "pretrain_trajectories.parquet").get("study")
    run_spec = None
    if spec:
        from ..study import expand
        runs = expand(spec)
        run_spec = runs[args.run].spec if args.run in runs else None
    title = plots.describe(run_spec, args.run)
    outdir = Path(args.outdir)
    if args.kind == "pretrain":
        paths = plots.pretrain_figures(traj, att, title, outdir)
    else:
        tr = io.read_parquet(tables / "transfer.parquet")
        tr = tr[tr["run"] == args.run] if "run" in tr else tr[tr["task_name"] == args.run]
        if tr.empty:
            raise io.InputError(f"--run {args.run}: no transfer rows in {tables / 'transfer.parquet'}")
        paths = plots.transfer_accuracy(aggregate.transfer_summary(tr), title, outdir)
    print("\n".join(str(p) for p in paths))
    return 0
