"""`groupsparse scaling`: fit the theory's rates, tabulate the ablations, judge the claims."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import NAME, InputFile, OutputFile, OutputFolder

    p = sub.add_parser(
        "scaling",
        help="fit convergence time, sample complexity and attention concentration; "
        "tabulate ablations; write the claims table with verdicts",
    )
    p.add_argument(
        "--trajectories",
        nargs="+",
        type=InputFile(named=True),
        required=True,
        metavar="[RUN=]PATH",
        help="pretraining trajectory tables; RUN= names the run (else the table's run column, "
        "else its task_name). Each table's role column says which runs are scaling points "
        "and which ablations",
    )
    p.add_argument(
        "--transfer",
        nargs="*",
        type=InputFile(named=True),
        default=[],
        metavar="[RUN=]PATH",
        help="transfer tables, named as above",
    )
    p.add_argument(
        "--out-claims",
        type=OutputFile(),
        required=True,
        help="output Parquet: claim, prediction, measured, interval, verdict",
    )
    p.add_argument(
        "--out-claims-csv", type=OutputFile(), default=None, help="also write the claims as CSV (for the report)"
    )
    p.add_argument("--out-fits", type=OutputFile(), required=True, help="output Parquet: one row per fitted relation")
    p.add_argument(
        "--out-ablations", type=OutputFile(), default=None, help="output Parquet: ablation metrics beside the baseline"
    )
    p.add_argument(
        "--out-points", type=OutputFile(), default=None, help="output Parquet: the observations behind every fit"
    )
    p.add_argument(
        "--out-crossings", type=OutputFile(), default=None, help="output Parquet: per-seed steps to each threshold"
    )
    p.add_argument(
        "--out-by-D",
        type=OutputFile(),
        default=None,
        help="output CSV: per run group and D, side by side, the flow time to each theorem target and "
        "1 - min attention at each kappa (geometric means over seeds, t intervals)",
    )
    p.add_argument("--figures", type=OutputFolder(), required=True, help="directory for the figures (PNG and PDF)")
    p.add_argument(
        "--figure-names",
        nargs="*",
        type=NAME,
        default=None,
        help="the scaling figures to draw (default: every one; the workflow names those its study has data for)",
    )
    p.add_argument(
        "--spec",
        type=InputFile(),
        required=True,
        help="analysis spec (JSON): the config's scaling.analysis and ablations.analysis, defaults filled",
    )
    p.add_argument(
        "--references",
        nargs="*",
        type=InputFile(),
        default=None,
        metavar="CSV",
        help="population gradient descent's committed by-D tables (scaling.analysis.reference_by_D, resolved): "
        "the flow's check where both ran",
    )
    p.add_argument(
        "--predictions",
        type=InputFile(),
        default=None,
        help="the predictions table of `groupsparse predict` (D <= fit_D_max): larger-D runs are judged against it",
    )
    p.set_defaults(func=run)


def study_config(specs: list[str]) -> dict | None:
    """The study's config, from the provenance of the first trajectory table that records it (the
    aggregated table does); None for tables written outside a study."""
    from ..io import files as io

    for spec in specs:
        path = spec.partition("=")[2] if "=" in spec and "/" not in spec.partition("=")[0] else spec
        try:
            study = io.read_provenance(path).get("study")
        except io.InputError:
            continue
        if isinstance(study, dict):
            return study
    return None


def read_named(specs: list[str], what: str):
    """Concatenate tables given as PATH or RUN=PATH, with a ``run`` column."""
    import pandas as pd

    from ..io import files as io

    frames, inputs = [], {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or "/" in name:
            name, path = None, spec
        df = io.read_parquet(path)
        if name:
            df = df.assign(run=name)
        elif "run" not in df.columns:
            if "task_name" not in df.columns:
                raise io.InputError(f"{path}: {what} table has neither a run nor a task_name column")
            df = df.assign(run=df["task_name"])
        try:
            inputs[path] = io.read_provenance(path).get("config_hash")
        except io.InputError:
            inputs[path] = None
        frames.append(df)
    return (pd.concat(frames, ignore_index=True) if frames else None), inputs


def run(args) -> int:
    from dataclasses import asdict, replace

    import pandas as pd

    from ..analysis.bound import BY_D_COLUMNS
    from ..analysis.claims import analyse
    from ..analysis.settings import Settings
    from ..analysis.stats import VERDICT_RULE
    from ..config.specs import config_hash
    from ..figures import scaling as scaling_figures
    from ..figures import theorem as theorem_figures
    from ..io import files as io

    settings = Settings.read(args.spec)
    if args.references is not None:  # the workflow's resolved paths of the spec's reference_by_D
        settings = replace(settings, reference_by_D=tuple(args.references))
    traj, traj_inputs = read_named(args.trajectories, "trajectory")
    transfer, transfer_inputs = read_named(args.transfer, "transfer") if args.transfer else (None, {})
    predictions = io.read_parquet(args.predictions) if args.predictions else None
    analysis = analyse(traj, transfer, settings, predictions)
    prov = io.provenance(
        config_hash(asdict(settings)),
        "cpu",
        settings=asdict(settings),
        inputs=traj_inputs | transfer_inputs | ({args.predictions: None} if args.predictions else {}),
        verdict_rule=VERDICT_RULE,
    )
    io.write_parquet(analysis.claims, args.out_claims, prov)
    if args.out_claims_csv:  # the HTML report renders CSV as a table
        io.write_text_atomic(args.out_claims_csv, analysis.claims.to_csv(index=False, float_format="%.6g"))
    io.write_parquet(analysis.fits_table(), args.out_fits, prov)
    if args.out_ablations:
        io.write_parquet(analysis.ablations, args.out_ablations, prov)
    if args.out_points:
        io.write_parquet(analysis.points_table(), args.out_points, prov)
    if args.out_crossings:
        io.write_parquet(analysis.crossings, args.out_crossings, prov)
    if args.out_by_D:
        from ..analysis.bound import by_D

        scaled = traj[traj["role"] == "scaling"]
        table = by_D(scaled, analysis.crossings, settings) if len(scaled) else pd.DataFrame(columns=BY_D_COLUMNS)
        io.write_text_atomic(args.out_by_D, table.to_csv(index=False, float_format="%.6g"))
    config = study_config(args.trajectories)  # the variants' settings, which name them in the figures
    scaling_figures.write_all(analysis, args.figures, args.figure_names, config)
    theorem_figures.write(traj[traj["role"] == "scaling"], predictions, settings, args.figures, config)
    counts = analysis.claims["verdict"].value_counts().to_dict()
    print(
        f"scaling: {len(analysis.fits)} fits, {len(analysis.claims)} claims {counts}, "
        f"{len(analysis.ablations)} ablation rows; figures in {args.figures}",
        flush=True,
    )
    return 0
