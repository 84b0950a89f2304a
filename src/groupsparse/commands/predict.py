"""`groupsparse predict`: the out-of-sample test's predictions, fitted on the D <= fit_D_max runs alone."""

from __future__ import annotations


def register(sub) -> None:
    from ._args import InputFile, OutputFile

    p = sub.add_parser(
        "predict",
        help="fit 1 - min attention at kappa D^3 on the grid runs with D <= fit_D_max (power and exponential "
        "law) and predict it at larger D with prediction intervals",
    )
    p.add_argument(
        "--trajectories",
        nargs="*",
        type=InputFile(),
        default=[],
        metavar="PATH",
        help="per-run pretraining trajectory tables of the grid runs with D <= scaling.analysis.fit_D_max "
        "(none: a study without such runs gets an empty predictions table)",
    )
    p.add_argument(
        "--external",
        nargs="*",
        type=InputFile(),
        default=[],
        metavar="CSV",
        help="other studies' committed predictions tables (scaling.analysis.external_predictions), added as they are",
    )
    p.add_argument(
        "--spec", type=InputFile(), required=True, help="analysis spec (JSON): scaling.analysis and ablations.analysis"
    )
    p.add_argument("--out", type=OutputFile(), required=True, help="output Parquet: the predictions table")
    p.add_argument("--out-csv", type=OutputFile(), required=True, help="the predictions table as CSV")
    p.add_argument(
        "--kappa-c-out",
        type=OutputFile(),
        default=None,
        help="CSV: kappa_c(D) at each scaling.analysis.target_c that each law's predictions imply "
        "(analysis/kappa_prediction.py; no new fit)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from dataclasses import asdict

    import pandas as pd

    from ..analysis.predict import PREDICTION_COLUMNS, predictions
    from ..analysis.settings import Settings
    from ..config.specs import config_hash
    from ..io import files as io
    from .scaling import read_named

    settings = Settings.read(args.spec)
    traj, inputs = read_named(args.trajectories, "trajectory")
    try:
        table = predictions(traj, settings) if traj is not None else pd.DataFrame(columns=PREDICTION_COLUMNS)
    except ValueError as exc:
        raise io.InputError(str(exc)) from None
    external = [io.read_csv_table(path, PREDICTION_COLUMNS, "predictions table") for path in args.external]
    if external:  # another study's laws, fitted on its own runs: its algorithm and fit_D_max name it
        table = pd.concat([table, *external], ignore_index=True)[PREDICTION_COLUMNS]
        table["group"] = table["group"].fillna("")
        table["blocker"] = table["blocker"].fillna("")
        inputs |= {path: None for path in args.external}
    prov = io.provenance(config_hash(asdict(settings)), "cpu", settings=asdict(settings), inputs=inputs)
    io.write_parquet(table, args.out, prov)
    io.write_text_atomic(args.out_csv, table.to_csv(index=False, float_format="%.6g"))
    if args.kappa_c_out:
        from ..analysis.kappa_prediction import kappa_c_predictions

        kappa_c = kappa_c_predictions(table, settings.target_c)
        io.write_text_atomic(args.kappa_c_out, kappa_c.to_csv(index=False, float_format="%.6g"))
    usable = table[table["blocker"] == ""]
    print(
        f"predict: {len(table)} predictions ({len(usable)} usable) from {len(args.trajectories)} run table(s), "
        f"D <= {settings.fit_D_max}, at D = {', '.join(map(str, settings.predict_D))}",
        flush=True,
    )
    return 0
