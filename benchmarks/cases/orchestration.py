"""A finished study (only with ``--orchestration``): its wall time against the sum of its jobs' seconds
(``results/<study>/benchmarks/**/*.tsv``, column ``s``) over the cores, and the largest ``max_rss``."""

from __future__ import annotations

import csv
import os
import statistics

NAME = "orchestration"
OVERHEAD, PEAK_GIB, STUDY_MINUTES = 1.3, 2.0, 15.0  # <= 1.3x the ideal, <= 2 GiB a job, <= 15 min


def run(ctx) -> list:
    """A finished study (``--orchestration RESULTS --wall-seconds N [--cores N]``)."""
    table, results, wall = ctx.table, ctx.args.orchestration, ctx.args.wall_seconds
    cores = ctx.args.cores or os.cpu_count() or 1
    files = sorted(results.glob("benchmarks/**/*.tsv"))
    if not files:
        raise SystemExit(
            f"--orchestration: no Snakemake benchmark files under {results}/benchmarks/ "
            "(run the workflow first; every rule writes benchmarks/<rule>/...tsv)"
        )
    jobs = []
    for path in files:
        with path.open() as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows or "s" not in rows[0]:
            raise SystemExit(f"--orchestration: {path} is not a Snakemake benchmark file (no 's' column)")
        # a rule run with benchmark repeats has several rows: its mean is the job's time
        jobs.append(
            (
                path,
                statistics.mean(float(r["s"]) for r in rows),
                max(number(r.get("max_rss")) for r in rows),
                sum(number(r.get("cpu_time")) for r in rows),
            )
        )
    total = sum(s for _, s, _, _ in jobs)
    ideal = total / cores
    overhead = wall / ideal
    peak_path, _, peak_mb, _ = max(jobs, key=lambda j: j[2])
    cpu = sum(c for *_, c in jobs)
    ok = [overhead <= OVERHEAD, peak_mb / 1024 <= PEAK_GIB, wall / 60 <= STUDY_MINUTES]
    table.add(
        "orchestration",
        f"{len(jobs)} jobs: sum of job seconds / {cores} cores",
        ideal,
        "s",
        note=f"sum {total:.1f} s; CPU time sum / cores {cpu / cores:.1f} s",
    )
    judged = (
        ("wall time of the study", wall, "s", ok[2], f"target <= {STUDY_MINUTES:g} min"),
        ("overhead: wall / (sum of job seconds / cores)", overhead, "x", ok[0], f"target <= {OVERHEAD:g}x"),
        (
            "peak memory of the largest job (max_rss)",
            peak_mb / 1024,
            "GiB",
            ok[1],
            f"{peak_path.relative_to(results)}; target <= {PEAK_GIB:g} GiB",
        ),
    )
    for case, value, unit, passed, note in judged:
        table.add("orchestration", case, value, unit, ratio="PASS" if passed else "FAIL", note=note)
    return []


def number(x) -> float:
    """A benchmark file's cell as a number (Snakemake writes NA where it could not measure)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0  # Snakemake writes NA where it could not measure
