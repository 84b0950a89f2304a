"""`groupsparse aggregate`: concatenate the per-job tables and write the summaries."""

from __future__ import annotations

import json
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("aggregate", help="concatenate per-job tables into results/tables and summarise them")
    p.add_argument("--trajectories", nargs="+", required=True, help="per-job pretraining trajectory tables")
    p.add_argument("--attention", nargs="+", required=True, help="per-job attention tables")
    p.add_argument("--transfer", nargs="*", default=[], help="per-job transfer tables")
    p.add_argument("--study-json", required=True, help="the validated study config as JSON (for provenance)")
    p.add_argument("--outdir", required=True, help="folder for the aggregated tables")
    p.add_argument("--provenance-json", default=None, help="also write the provenance here (results/provenance.json)")
    p.set_defaults(func=run)


def _concat(paths):
    import pandas as pd

    from .. import io
    frames = [io.read_parquet(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _write_both(df, stem: Path, prov) -> None:
    """Parquet for analysis, CSV for the HTML report (which renders CSV as a table)."""
    from .. import io
    io.write_parquet(df, stem.with_suffix(".parquet"), prov)
    io.write_text_atomic(stem.with_suffix(".csv"), df.to_csv(index=False, float_format="%.6g"))


def run(args) -> int:
    from .. import aggregate, io
    from ..specs import config_hash

    study = json.loads(Path(args.study_json).read_text()) if args.study_json.endswith(".json") else json.loads(args.study_json)
    prov = io.provenance(config_hash(study), study.get("device", "cpu"), study=study)
    out = Path(args.outdir)
    traj = _concat(args.trajectories).sort_values(["run", "seed", "step"], kind="stable").reset_index(drop=True)
    att = _concat(args.attention).sort_values(["run", "seed", "step", "key", "query"], kind="stable").reset_index(drop=True)
    io.write_parquet(traj, out / "pretrain_trajectories.parquet", prov)
    io.write_parquet(att, out / "pretrain_attention.parquet", prov)
    _write_both(aggregate.pretrain_summary(traj), out / "pretrain_summary", prov)
    if args.transfer:
        tr = _concat(args.transfer)
        keys = [k for k in ("run", "task_name", "downstream", "seed", "method", "n") if k in tr]
        tr = tr.sort_values(keys, kind="stable").reset_index(drop=True)
        io.write_parquet(tr, out / "transfer.parquet", prov)
        _write_both(aggregate.transfer_summary(tr), out / "summary", prov)
        _write_both(aggregate.sample_complexity(tr), out / "sample_complexity", prov)
    if args.provenance_json:
        io.write_text_atomic(args.provenance_json, json.dumps(prov, indent=2, sort_keys=True, default=str))
    print(f"aggregated {len(args.trajectories)} pretraining and {len(args.transfer)} transfer tables into {out}")
    return 0
