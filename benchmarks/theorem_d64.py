#!/usr/bin/env python
"""The theorem test's D = 64 points, run outside the study's DAG, checked against its fixed predictions.

    python benchmarks/theorem_d64.py --d 10 --kappa-max 1 --out d64/     # hours of one core (see below)
    python benchmarks/theorem_d64.py --d 10 --kappa-max 1 --out d64/ --check-only

configs/theorem.yaml measures D <= 32 and rule ``predict`` fixes prediction intervals at D = 24, 32
and 64 from the D <= 16 runs alone. A D = 64 point costs 1.5-1.6 CPU-hours at kappa <= 2 (float32, one
core: benchmarks/README.md's "Current figures"), so it is run here, one job per d: the spec is the one the study would
write for ``scale_d<d>_D64`` (``study.runs.expand`` of configs/theorem.yaml with 64 added to
``scaling.D_grid``) except its steps (kappa_max D^3: the run is the first part of the study's 2 D^3
run, step for step, the step size being constant) and its recording interval (``--record-every``,
64 by default against the study's 16: the records do not change the training). Then
``groupsparse check-predictions`` gives the claims table's out-of-sample verdicts for it, from the
study's predictions table (run the theorem study first). Needs ``groupsparse`` installed.
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spec_for(d: int, D: int, kappa_max: float, record_every: int) -> dict:
    import yaml

    from groupsparse.study.runs import expand

    config = yaml.safe_load((ROOT / "configs" / "theorem.yaml").read_text())
    config["scaling"]["D_grid"] = sorted(set(config["scaling"]["D_grid"]) | {D})
    spec = json.loads(expand(config)[f"scale_d{d}_D{D}"].spec_json)
    spec["pretrain"]["steps"] = int(round(kappa_max * D**3))
    spec["pretrain"]["record_every"] = record_every
    return spec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, required=True, help="the grid's d (5 or 10 in configs/theorem.yaml)")
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--kappa-max", type=float, default=2.0, help="train kappa_max D^3 steps (the study: 2)")
    ap.add_argument("--record-every", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True, help="folder for the spec, checkpoint, tables and log")
    ap.add_argument("--results", type=Path, default=ROOT / "results" / "theorem", help="the theorem study's results")
    ap.add_argument("--check-only", action="store_true", help="only compare a finished run with the predictions")
    args = ap.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    name = f"scale_d{args.d}_D{args.D}"
    traj = args.out / f"{name}.trajectory.parquet"
    if not args.check_only:
        spec = args.out / f"{name}.json"
        spec.write_text(json.dumps(spec_for(args.d, args.D, args.kappa_max, args.record_every), indent=1))
        cmd = ["groupsparse", "pretrain", "--spec", f"@{spec}", "--seeds", "0-4", "--threads", "1"]
        cmd += ["--checkpoint", str(args.out / f"{name}.safetensors"), "--trajectory", str(traj)]
        cmd += ["--attention", str(args.out / f"{name}.attention.parquet")]
        cmd += ["--resume-state", str(args.out / f".{name}.resume.safetensors"), "--resume-every", "2000"]
        print(" ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode:
            return 1
    (analysis,) = glob.glob(str(args.results / "specs" / "analysis.*.json"))
    cmd = ["groupsparse", "check-predictions", "--predictions", str(args.results / "tables" / "predictions.parquet")]
    cmd += ["--spec", analysis, "--trajectories", str(traj), "--out-csv", str(args.out / f"{name}.verdicts.csv")]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
