"""`groupsparse estimate`: how long a planned study takes, from the fitted cost model.

Expands the study exactly as the Snakefile does (study.preflight.check_study: the schema, its
defaults, the cross-field and reference checks, then groupsparse.study.runs.expand) and prints,
per rule and run, the job count, the predicted CPU time, wall time and memory per job, the
scheduler request (with the safety margins of groupsparse.costs), and the totals. Nothing is
run; torch is not imported.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def register(sub) -> None:
    from ._args import POSITIVE_INT, InputFile

    p = sub.add_parser("estimate", help="estimate the time and memory of a planned study (no job is run)")
    p.add_argument(
        "--configfile",
        nargs="+",
        type=InputFile(),
        default=["config.yaml"],
        help="study config (default: config.yaml); several are merged in order, as snakemake merges them",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="override the config's device")
    p.add_argument(
        "--cores",
        type=POSITIVE_INT,
        default=os.cpu_count() or 1,
        help="cores of the run (default: all of this machine's, as the local profile's cores: all): the last line "
        "is the run's own start line for them, calibrated here (a few seconds; results/<study>/calibration.json)",
    )
    p.add_argument("--no-calibration", action="store_true", help="skip the calibrated line (a cluster's login node)")
    p.add_argument("--brief", action="store_true", help="only the totals per rule, not one line per (rule, run)")
    p.set_defaults(func=run)


def load_study(paths) -> tuple[dict, dict]:
    """(config with the schema's defaults, runs): the Snakefile's own parse-time check
    (study.preflight.check_study), so the two never disagree on a setting or a default. ``paths``: one
    config file or several, merged in order as snakemake merges its --configfile arguments (dicts key by
    key, anything else replaced)."""
    import yaml

    from ..config.schema import study_schema
    from ..config.specs import ConfigError
    from ..study import preflight
    from ..study.runs import deep_merge

    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    config: dict = {}
    for path in paths:
        problem = preflight.config_file_problem(path)
        if problem:
            raise ConfigError(f"--configfile: {problem}")
        config = deep_merge(config, yaml.safe_load(Path(path).read_text()))
    try:
        name = preflight.study_name(config, paths)
        runs = preflight.check_study(config, study_schema(), config_files=paths, results=f"results/{name}")
    except preflight.StudyRefused as exc:
        raise ConfigError(str(exc)) from None
    return config, runs


def preflight_name(config: dict, paths) -> str:
    from ..study import preflight

    return preflight.study_name(config, paths)


def study_job_keys(jobs: dict[str, list[dict]]) -> list[str]:
    """The jobs' keys as their logs name them (pretrain/<run>/seeds<chunk>, transfer/<run>/seeds<chunk>/<group>,
    figures/<run>, ...): those the cost model predicts; the rest (specs, the owner) take no modelled time."""
    keys = []
    for rule, each in jobs.items():
        for w in each:
            if rule == "pretrain":
                keys.append(f"pretrain/{w['run']}/seeds{w['chunk']}")
            elif rule == "transfer":
                keys.append(f"transfer/{w['run']}/seeds{w['chunk']}/{w['group']}")
            elif rule == "figures":
                keys.append(f"figures/{w['run']}")
            elif rule == "transfer_figure":
                keys.append(f"figures/{w['run']}.transfer")
            elif "run" in w:
                keys.append(f"figures/{w['run']}.{rule}")
            elif rule in ("check_tables", "aggregate", "scaling", "review"):
                keys.append(rule)
    return keys


def run(args) -> int:
    from .. import costs
    from ..study.jobs import job_count

    config, runs = load_study(args.configfile)
    device = args.device or config["device"]  # --device: what the same study would cost on the other device
    jobs = config["jobs"]
    rows = costs.estimate_study(runs, device, jobs["pretrain_threads"], jobs["transfer_threads"])
    out = sys.stdout
    gpu = device == "cuda"
    dev_col = "GPU-h*" if gpu else "wall-h"
    print(
        f"study {' + '.join(args.configfile)}: {len(runs)} runs, device {device}; times are predictions of "
        f"groupsparse.costs (fitted to benchmarks/costs/*.tsv), requests add the margins "
        f"({costs.TIME_MARGIN}x one-thread CPU time, {costs.GPU_TIME_MARGIN}x a GPU estimate, "
        f"+ {costs.TIME_FLOOR_MIN} min; "
        f"{costs.MEM_MARGIN}x memory + {costs.MEM_FLOOR_MB} MB)",
        file=out,
    )
    by: dict = {}
    for r in rows:
        by.setdefault((r["rule"].split(":")[0], None), []).append(r)
    groups = ([] if args.brief else [((r["rule"], r["run"]), [r]) for r in rows]) + list(by.items())
    head = (
        f"{'rule':<22} {'run':<26} {'jobs':>5} {'CPU min/job':>11} {'wall min/job':>12} {'MB/job':>8} "
        f"{'request min':>11} {'request MB':>10} {'CPU-h':>8} {dev_col:>8}"
    )
    print(head, file=out)
    for (rule, run_name), rs in groups:
        worst = max(rs, key=lambda r: r["wall_min_per_job"])
        label = run_name or f"all {len({r['run'] for r in rs})} runs"
        rule = rule if run_name else f"{rule} total"
        print(
            f"{rule:<22} {label:<26} {sum(r['jobs'] for r in rs):>5} "
            f"{max(r['cpu_min_per_job'] for r in rs):>11.1f} {worst['wall_min_per_job']:>12.1f} "
            f"{max(r['mem_mb_per_job'] for r in rs):>8.0f} {worst['request']['runtime']:>11} "
            f"{max(r['request']['mem_mb'] for r in rs):>10} {sum(r['cpu_hours'] for r in rs):>8.2f} "
            f"{sum(r['device_hours'] for r in rs):>8.2f}",
            file=out,
        )
    cpu_h = sum(r["cpu_hours"] for r in rows)
    dev_h = sum(r["device_hours"] for r in rows)
    small = costs.SMALL_JOBS
    n_small = 1 + 1 + len([r for r in runs.values() if r.role == "task"])
    small_h = (small["aggregate"][0] * 2 + small["figures"][0] * n_small + small["scaling"][0]) / 3600
    long_jobs = sum(r["jobs"] for r in rows)
    total = job_count(runs)  # as snakemake counts its steps: specs, tables, figures and the target too
    print(
        f"total: {total} jobs ({long_jobs} pretraining and transfer, {total - long_jobs} others: specs, tables, "
        f"figures, the target), {cpu_h:.1f} CPU-hours on one thread by the cost model (its reference machine; "
        f"+ about {small_h:.2f} h of table and figure jobs, stated constants, not measured)",
        file=out,
    )
    if gpu:
        print(f"GPU: {dev_h:.1f} GPU-hours, {costs.GPU_NOTE}: assumed {costs.GPU_ASSUMPTIONS}", file=out)
        print("* GPU-h: " + costs.GPU_NOTE, file=out)
    else:
        print(
            f"wall: {dev_h:.1f} job-hours with the config's threads (thread speed-up assumed, not measured)", file=out
        )
    if not args.no_calibration:  # the run's start line, in its words, for a fresh run on --cores
        from ..costs import calibrate
        from ..study.jobs import study_jobs

        name = preflight_name(config, args.configfile)
        keys = study_job_keys(study_jobs(runs))
        line = calibrate.study_estimate_line(
            runs, config | {"device": device}, args.cores, f"results/{name}", keys, total
        )
        print(line, file=out)
    return 0
