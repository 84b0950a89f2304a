"""`groupsparse check-predictions`: a fixed predictions table against runs made outside the study's DAG.

The theorem test's rule ``predict`` fixes, from the D <= fit_D_max runs alone, prediction intervals
at D = predict_D (24, 32, 64). The study measures D = 24 and 32 itself; a D = 64 point costs hours
of CPU and can be run as a separate pretraining job (``groupsparse pretrain`` with the study's spec
for that point). This command reads such runs' trajectory tables and the study's predictions and
prints (and writes) the same out-of-sample verdicts the claims table gives the study's own runs.
"""

from __future__ import annotations


def register(sub) -> None:
    from ._args import InputFile, OutputFile

    p = sub.add_parser(
        "check-predictions",
        help="test a study's fixed predictions (rule predict) against pretraining runs made outside its DAG",
    )
    p.add_argument("--predictions", type=InputFile(), required=True, help="the study's predictions table (Parquet)")
    p.add_argument(
        "--spec", type=InputFile(), required=True, help="the study's analysis spec (JSON), as rule predict read it"
    )
    p.add_argument(
        "--trajectories",
        nargs="+",
        type=InputFile(),
        required=True,
        metavar="PATH",
        help="trajectory tables of the runs",
    )
    p.add_argument("--out-csv", type=OutputFile(), default=None, help="write the verdict rows as CSV")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.predict import prediction_claims
    from ..analysis.settings import Settings
    from ..io import files as io
    from .scaling import read_named

    settings = Settings.read(args.spec)
    traj, _ = read_named(args.trajectories, "trajectory")
    preds = io.read_parquet(args.predictions)
    rows = prediction_claims(traj, preds, settings)
    if not rows:
        raise io.InputError(
            f"{', '.join(args.trajectories)}: no run at a D with predictions in {args.predictions} "
            f"(predicted D: {sorted(set(preds['D'].astype(int)))})"
        )
    import pandas as pd

    table = pd.DataFrame(rows)
    for _, r in table.iterrows():
        print(
            f"{r['claim']}: measured {r['measured']:.4g} [{r['low']:.4g}, {r['high']:.4g}]: {r['verdict']}; {r['why']}"
        )
    if args.out_csv:
        io.write_text_atomic(args.out_csv, table.to_csv(index=False, float_format="%.6g"))
    return 0
