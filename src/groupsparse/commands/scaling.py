"""`groupsparse scaling`: fit the theory's rates, tabulate the ablations, judge the claims."""

from __future__ import annotations

import argparse


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"need comma-separated numbers, got {text!r}") from exc
    if not values:
        raise argparse.ArgumentTypeError(f"need at least one number, got {text!r}")
    return values


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"need comma-separated integers, got {text!r}") from exc


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _loss_target(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"need a number or 'none', got {text!r}") from exc


def register(sub) -> None:
    p = sub.add_parser(
        "scaling",
        help="fit convergence time, sample complexity and attention concentration; "
        "tabulate ablations; write the claims table with verdicts",
    )
    p.add_argument(
        "--trajectories",
        nargs="+",
        required=True,
        metavar="[RUN=]PATH",
        help="pretraining trajectory tables; RUN= names the run (else the table's run column, "
        "else its task_name). Each table's role column says which runs are scaling points "
        "and which ablations",
    )
    p.add_argument("--transfer", nargs="*", default=[], metavar="[RUN=]PATH", help="transfer tables, named as above")
    p.add_argument("--out-claims", required=True, help="output Parquet: claim, prediction, measured, interval, verdict")
    p.add_argument("--out-claims-csv", default=None, help="also write the claims as CSV (for the report)")
    p.add_argument("--out-fits", required=True, help="output Parquet: one row per fitted relation")
    p.add_argument("--out-ablations", default=None, help="output Parquet: ablation metrics beside the baseline")
    p.add_argument("--out-points", default=None, help="output Parquet: the observations behind every fit")
    p.add_argument("--out-crossings", default=None, help="output Parquet: per-seed steps to each threshold")
    p.add_argument("--figures", required=True, help="directory for the figures (PNG and PDF)")
    p.add_argument("--thresholds", type=_floats, default=(0.5, 0.9, 0.99), help="attention-mass thresholds")
    p.add_argument("--loss-target", type=_loss_target, default=0.3, help="eval-loss target, or 'none'")
    p.add_argument("--accuracy-targets", type=_floats, default=(0.8, 0.9), help="transfer test-accuracy targets")
    p.add_argument(
        "--methods",
        type=_names,
        default=("pretrained_finetune", "logreg"),
        help="transfer methods for the sample-complexity fits",
    )
    p.add_argument(
        "--downstream",
        type=_names,
        default=("transfer",),
        help="downstream tasks to analyse, comma-separated (default: transfer; the negative control "
        "is not a test of the theory's rates)",
    )
    p.add_argument("--near-one", type=float, default=0.9, help="what 'attention near 1' means")
    p.add_argument("--baseline", default="ablation_none", help="the run the ablations are compared with")
    p.add_argument(
        "--ablation-sizes",
        type=_ints,
        default=None,
        help="transfer sizes n reported per ablation (default: smallest, middle, largest)",
    )
    p.add_argument(
        "--target-c",
        type=_floats,
        default=(0.1, 0.2, 0.3),
        help="constants c of the theorem's targets: min over queries of S[j*, j] >= 1 - exp(-c D)",
    )
    p.add_argument(
        "--kappas",
        type=_floats,
        default=(0.5, 1.0, 2.0),
        help="1 - min attention is compared across D at steps kappa D^3 (exponential vs power law)",
    )
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--study-seed", type=int, default=0, help="seeds the bootstrap (with each fit's identity)")
    p.set_defaults(func=run)


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
    from dataclasses import asdict

    from ..analysis.claims import analyse
    from ..analysis.scaling_laws import Settings
    from ..analysis.stats import CONFIDENCE, VERDICT_RULE
    from ..config.specs import config_hash
    from ..figures import scaling as scaling_figures
    from ..io import files as io

    if args.n_boot < 100:
        raise io.InputError(f"--n-boot: need at least 100 resamples for a {CONFIDENCE:.0%} interval, got {args.n_boot}")
    settings = Settings(
        thresholds=args.thresholds,
        loss_target=args.loss_target,
        accuracy_targets=args.accuracy_targets,
        methods=args.methods,
        downstream=args.downstream,
        near_one=args.near_one,
        baseline=args.baseline,
        ablation_sizes=args.ablation_sizes,
        n_boot=args.n_boot,
        study_seed=args.study_seed,
        target_c=args.target_c,
        kappas=args.kappas,
    )
    traj, traj_inputs = read_named(args.trajectories, "trajectory")
    transfer, transfer_inputs = read_named(args.transfer, "transfer") if args.transfer else (None, {})
    analysis = analyse(traj, transfer, settings)
    prov = io.provenance(
        config_hash(asdict(settings)),
        "cpu",
        settings=asdict(settings),
        inputs=traj_inputs | transfer_inputs,
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
    scaling_figures.write_all(analysis, args.figures)
    counts = analysis.claims["verdict"].value_counts().to_dict()
    print(
        f"scaling: {len(analysis.fits)} fits, {len(analysis.claims)} claims {counts}, "
        f"{len(analysis.ablations)} ablation rows; figures in {args.figures}",
        flush=True,
    )
    return 0
