#!/usr/bin/env python
"""The run's time estimates beside what a finished run recorded.

    python benchmarks/estimate_vs_recorded.py                      # the default study (config.yaml, results/default)
    python benchmarks/estimate_vs_recorded.py --configfile configs/theorem.yaml --runs 'scale_d.*_D(24|32)'

1. The start-of-run estimate ("estimate: about X on this machine ...", written per job to
   results/<study>/estimate.json, calibrated on the machine at the start): per kind of job its
   predicted wall time against the jobs' recorded `s` (results/<study>/benchmarks/**/*.tsv), and the
   whole study's predicted wall time on the run's cores against the recorded one (--wall-seconds, or
   from the first job's start to the last job's end as the benchmark files date them).
   Every snakemake call rewrites estimate.json (the script says when it was rewritten after the run
   began): check a run from an empty results folder before calling snakemake on it again.
2. The cost model itself, uncalibrated: per pretraining run, `groupsparse estimate`'s one-thread CPU
   minutes against the `cpu_time` its job benchmarks recorded (a job killed and resumed counts its
   last attempt only). Runs without a benchmark are left out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from groupsparse import costs  # noqa: E402
from groupsparse.commands.estimate import load_study  # noqa: E402
from groupsparse.costs.calibrate import ESTIMATE_FILE, job_predictions, rescaled, study_seconds  # noqa: E402
from groupsparse.study.preflight import study_name  # noqa: E402

LOADED = (
    "The estimate is calibrated on this machine at the run's start: a machine loaded by other work during "
    "the run runs longer than it says (and one that was loaded only while it calibrated, shorter)."
)


def table(configfile: str, results: Path, runs: str = ".*") -> pd.DataFrame:
    """Per pretraining run: the cost model's one-thread CPU minutes against the recorded `cpu_time`."""
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


def start_estimate(results: Path, wall_seconds: float | None = None, recompute: tuple | None = None) -> dict | None:
    """The start-of-run estimate (estimate.json) against the recorded jobs: {"kinds": DataFrame per kind of
    job, "predicted_s", "recorded_s", "cores", "calibrated_at", "first_start"}; None without an estimate.
    ``recompute`` = (config, runs): the jobs' predictions made anew by the current cost model from the
    run's calibration (its measured probe seconds)."""
    try:
        estimate = json.loads((results / ESTIMATE_FILE).read_text())
        predicted = estimate["jobs"]
    except (OSError, ValueError, KeyError):
        return None
    if recompute is not None:
        config, runs = recompute
        predicted = job_predictions(runs, config, rescaled(estimate["calibration"]))
    rows = []
    for job, seconds in predicted.items():
        tsv = results / "benchmarks" / f"{job}.tsv"
        if tsv.is_file():
            took = float(pd.read_csv(tsv, sep="\t")["s"].iloc[0])
            end = tsv.stat().st_mtime
            rows.append({"kind": job.split("/")[0], "predicted_s": seconds, "recorded_s": took, "start": end - took})
            rows[-1]["end"] = end
    if not rows:
        return None
    jobs = pd.DataFrame(rows)
    kinds = jobs.groupby("kind", sort=True).agg(
        jobs=("kind", "size"), predicted_min=("predicted_s", "sum"), recorded_min=("recorded_s", "sum")
    )
    kinds[["predicted_min", "recorded_min"]] /= 60
    kinds["predicted_over_recorded"] = kinds["predicted_min"] / kinds["recorded_min"]
    done = {job: s for job, s in predicted.items() if (results / "benchmarks" / f"{job}.tsv").is_file()}
    return {
        "kinds": kinds.reset_index(),
        "predicted_s": study_seconds(done, estimate.get("cores", 1), estimate.get("threads", 1)),
        "recorded_s": wall_seconds if wall_seconds else float(jobs["end"].max() - jobs["start"].min()),
        "measured_by": "--wall-seconds" if wall_seconds else "first job start to last job end",
        "cores": estimate.get("cores", 1),
        "jobs": len(jobs),
        "of": len(predicted),
        "written_at": estimate.get("written"),
        "first_start": float(jobs["start"].min()),
        "recomputed": recompute is not None,
    }


def start_estimate_text(check: dict) -> str:
    from groupsparse.io.progress import duration

    kinds = check["kinds"].to_string(index=False, float_format=lambda x: f"{x:.2f}")
    ratio = check["predicted_s"] / check["recorded_s"]
    which = (
        "recomputed by the current cost model from the run's calibration" if check.get("recomputed") else "as printed"
    )
    lines = [
        f"start-of-run estimate ({which}) against the run: {check['jobs']} of its {check['of']} jobs recorded",
        kinds,
        f"\nstudy on {check['cores']} cores: estimated {duration(check['predicted_s'])}, recorded "
        f"{duration(check['recorded_s'])} ({check['measured_by']}): estimate / recorded = {ratio:.2f}",
        LOADED,
    ]
    if check["written_at"] and check["written_at"] > check["first_start"] + 60:
        lines.append(
            "Note: estimate.json was written after the run's first job started: a later snakemake call rewrote "
            "it (with its own --cores), so this is not the estimate the run started with; rerun the study from "
            "an empty results folder and call this script before any other snakemake command."
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configfile", default="config.yaml", help="the study config the run was made from")
    ap.add_argument("--results", default=None, help="its results folder (default: results/<study name>)")
    ap.add_argument("--runs", default=".*", help="a regular expression the pretraining run names must match")
    ap.add_argument("--wall-seconds", type=float, default=None, help="the run's wall time, if measured")
    ap.add_argument(
        "--recompute", action="store_true", help="predict the jobs again with the current cost model (same probe times)"
    )
    args = ap.parse_args(argv)
    config, planned = load_study(args.configfile)
    results = Path(args.results or f"results/{study_name(config, [args.configfile])}")
    check = start_estimate(results, args.wall_seconds, (config, planned) if args.recompute else None)
    df = table(args.configfile, results, args.runs)
    if check is None and df.empty:
        print(f"estimate_vs_recorded: no estimate.json and no benchmarked run matching {args.runs!r} under {results}/",
              file=sys.stderr)  # fmt: skip
        return 2
    if check is not None:
        print(start_estimate_text(check) + "\n")
    else:
        print(f"no start-of-run estimate ({results / ESTIMATE_FILE}): the run started without calibration\n")
    if not df.empty:
        print("the cost model (uncalibrated, one thread) per pretraining run, CPU minutes:")
        print(
            df.sort_values("recorded_cpu_min", ascending=False).to_string(
                index=False, float_format=lambda x: f"{x:.2f}"
            )
        )
        total = df[["predicted_cpu_min", "recorded_cpu_min"]].sum()
        print(
            f"\n{len(df)} runs: predicted {total['predicted_cpu_min']:.1f} CPU-min, recorded "
            f"{total['recorded_cpu_min']:.1f}; per run {df['predicted_over_recorded'].min():.2f}-"
            f"{df['predicted_over_recorded'].max():.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
