"""`groupsparse aggregate`: concatenate the per-job tables and write the summaries."""

from __future__ import annotations

import json
from pathlib import Path


def register(sub) -> None:
    from ._args import InputFile, JsonObject, OutputFile, OutputFolder

    p = sub.add_parser("aggregate", help="concatenate per-job tables into results/<study>/tables and summarise them")
    p.add_argument(
        "--trajectories", nargs="+", type=InputFile(), required=True, help="per-job pretraining trajectory tables"
    )
    p.add_argument("--attention", nargs="+", type=InputFile(), required=True, help="per-job attention tables")
    p.add_argument("--transfer", nargs="*", type=InputFile(), default=[], help="per-job transfer tables")
    p.add_argument(
        "--study-json",
        type=JsonObject(text=True, bare_files=True),
        required=True,
        help="the validated study config as JSON (for provenance)",
    )
    p.add_argument("--outdir", type=OutputFolder(), required=True, help="folder for the aggregated tables")
    p.add_argument(
        "--provenance-json",
        type=OutputFile(),
        default=None,
        help="also write the provenance here (results/provenance.json)",
    )
    p.set_defaults(func=run)


def _concat(paths, kind):
    import pandas as pd

    from ..io import files as io
    from ..io.tables import PARAMETER_PREFIX, REQUIRED_COLUMNS, check_columns

    frames = []
    for path in paths:
        frames.append(io.read_parquet(path))
        check_columns(frames[-1], REQUIRED_COLUMNS[kind], f"{path}: not a {kind} table of this study")
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    params = sorted(c for c in table.columns if c.startswith(PARAMETER_PREFIX))  # jobs' p_* columns differ
    return table[[c for c in table.columns if c not in params] + params]


def _run_specs(paths) -> dict:
    """Each run's spec, from the provenance of its pretraining tables (for figure titles)."""
    from ..io import files as io

    specs = {}
    for path in paths:
        spec = io.read_provenance(path).get("spec")
        if isinstance(spec, dict):
            specs[spec.get("run_name") or spec.get("task_name")] = spec
    return specs


def _write_both(df, stem: Path, prov) -> None:
    """Parquet for analysis, CSV for the HTML report (which renders CSV as a table)."""
    from ..io import files as io

    io.write_parquet(df, stem.with_suffix(".parquet"), prov)
    io.write_text_atomic(stem.with_suffix(".csv"), df.to_csv(index=False, float_format="%.6g"))


def run(args) -> int:
    from ..analysis import summary
    from ..config.schema import schema_defaults
    from ..config.specs import config_hash
    from ..io import files as io

    study = (
        json.loads(Path(args.study_json).read_text())
        if args.study_json.endswith(".json")
        else json.loads(args.study_json)
    )
    out = Path(args.outdir)
    traj = (
        _concat(args.trajectories, "trajectory")
        .sort_values(["run", "seed", "step"], kind="stable")
        .reset_index(drop=True)
    )
    prov = io.provenance(
        config_hash(study),
        study.get("device", schema_defaults()["device"]),  # a study JSON given by hand may be unfilled
        study=study,
        run_specs=_run_specs(args.trajectories),
        computed_on=io.machines_of([*args.trajectories, *(args.transfer or [])]),
    )  # every table read: their provenance is too
    att = (
        _concat(args.attention, "attention")
        .sort_values(["run", "seed", "step", "key", "query"], kind="stable")
        .reset_index(drop=True)
    )
    tables = {"pretrain_trajectories": traj, "pretrain_attention": att}
    with_csv = {"pretrain_summary": summary.pretrain_summary(traj)}
    if args.transfer:
        tr = _concat(args.transfer, "transfer")
        keys = [k for k in ("run", "task_name", "downstream", "seed", "method", "n") if k in tr]
        tables["transfer"] = tr = tr.sort_values(keys, kind="stable").reset_index(drop=True)
        with_csv |= {"summary": summary.transfer_summary(tr), "sample_complexity": summary.sample_complexity(tr)}
    # written only once every input is read and every summary computed: a corrupt input
    # leaves the earlier tables as they were
    for name, df in tables.items():
        io.write_parquet(df, out / f"{name}.parquet", prov)
    for name, df in with_csv.items():
        _write_both(df, out / name, prov)
    if args.provenance_json:
        io.write_text_atomic(args.provenance_json, json.dumps(prov, indent=2, sort_keys=True, default=str))
    print(f"aggregated {len(args.trajectories)} pretraining and {len(args.transfer)} transfer tables into {out}")
    return 0
