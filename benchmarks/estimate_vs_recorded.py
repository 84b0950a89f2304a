#!/usr/bin/env python
"""The cost model's prediction beside what a finished run recorded: per pretraining run, CPU minutes.

    python benchmarks/estimate_vs_recorded.py --configfile configs/theorem.yaml
    python benchmarks/estimate_vs_recorded.py --configfile configs/theorem.yaml --runs 'scale_d.*_D(24|32)'

Predicted: `groupsparse estimate`'s CPU time (groupsparse.costs, uncalibrated, one thread). Recorded: the
`cpu_time` column of the run's job benchmarks (`results/<study>/benchmarks/pretrain/<run>/*.tsv`; a job
killed and resumed counts its last attempt only). Runs without a benchmark are left out.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from groupsparse import costs  # noqa: E402
from groupsparse.commands.estimate import load_study  # noqa: E402
from groupsparse.study.preflight import study_name  # noqa: E402


def table(configfile: str, results: Path, runs: str = ".*") -> pd.DataFrame:
    config, planned = load_study(configfile)
    jobs = config["jobs"]
    rows = costs.estimate_study(planned, config["device"], jobs["pretrain_threads"], jobs["transfer_threads"])
    out = []
    for r in (r for r in rows if r["rule"] == "pretrain" and re.fullmatch(runs, r["run"])):
        tsvs = sorted((results / "benchmarks" / "pretrain" / r["run"]).glob("*.tsv"))
        if tsvs:
            recorded = sum(pd.read_csv(f, sep="\t")["cpu_time"].sum() for f in tsvs) / 60
            out.append({"run": r["run"], "predicted_cpu_min": r["cpu_hours"] * 60, "recorded_cpu_min": recorded})
    df = pd.DataFrame(out, columns=["run", "predicted_cpu_min", "recorded_cpu_min"])
    df["predicted_over_recorded"] = df["predicted_cpu_min"] / df["recorded_cpu_min"]
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configfile", default="config.yaml", help="the study config the run was made from")
    ap.add_argument("--results", default=None, help="its results folder (default: results/<study name>)")
    ap.add_argument("--runs", default=".*", help="a regular expression the run names must match")
    args = ap.parse_args(argv)
    config, _ = load_study(args.configfile)
    results = Path(args.results or f"results/{study_name(config, [args.configfile])}")
    df = table(args.configfile, results, args.runs)
    if df.empty:
        print(f"estimate_vs_recorded: no run matching {args.runs!r} has a benchmark under {results}/", file=sys.stderr)
        return 2
    print(df.sort_values("recorded_cpu_min", ascending=False).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    total = df[["predicted_cpu_min", "recorded_cpu_min"]].sum()
    print(
        f"\n{len(df)} runs: predicted {total['predicted_cpu_min']:.1f} CPU-min, recorded "
        f"{total['recorded_cpu_min']:.1f}; per run {df['predicted_over_recorded'].min():.2f}-"
        f"{df['predicted_over_recorded'].max():.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
