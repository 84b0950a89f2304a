"""`groupsparse transfer`: one pretrained checkpoint against methods x sample sizes."""

from __future__ import annotations

import argparse

from ._args import load_spec_arg, set_threads


def parse_names(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"--methods: need a comma-separated list of methods, got {text!r}")
    return names


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--sizes: need comma-separated integers, got {text!r}") from exc
    if not sizes:
        raise argparse.ArgumentTypeError(f"--sizes: need at least one sample size, got {text!r}")
    return sizes


def register(sub) -> None:
    from ..transfer.methods import method_names
    from ..transfer.spec import DEFAULT_SIZES

    p = sub.add_parser("transfer", help="fine-tune a pretrained checkpoint and fit baselines at many sample sizes")
    p.add_argument(
        "--spec",
        type=load_spec_arg,
        required=True,
        help='{"run": <RunSpec of the pretraining run>, "transfer": <TransferSpec>} as JSON, or @file',
    )
    p.add_argument("--checkpoint", required=True, help="pretraining checkpoint (.safetensors) of that run")
    p.add_argument(
        "--methods",
        type=parse_names,
        default=list(method_names()),
        help=f"comma-separated, from: {','.join(method_names())} (default: all)",
    )
    p.add_argument(
        "--sizes",
        type=parse_sizes,
        default=list(DEFAULT_SIZES),
        help=f"training sample sizes n, comma-separated (default {','.join(map(str, DEFAULT_SIZES))})",
    )
    p.add_argument("--out", required=True, help="output Parquet, one row per (downstream, seed, method, n)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the job's thread count)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..config.specs import ConfigError, RunSpec
    from ..io import files as io
    from ..transfer.spec import TransferSpec, check_grid, check_transfer

    raw = args.spec
    if not isinstance(raw, dict) or "run" not in raw:
        raise ConfigError('--spec: must be {"run": <RunSpec dict>, "transfer": <TransferSpec dict>}')
    unknown = sorted(set(raw) - {"run", "transfer"})
    if unknown:
        raise ConfigError(f"--spec.{unknown[0]}: unknown key; allowed: run, transfer")
    # validated whoever wrote the file (a few milliseconds, before torch is imported)
    run_spec = RunSpec.from_dict(raw["run"])
    check_transfer(raw.get("transfer"))
    spec = TransferSpec.from_dict(raw.get("transfer"))
    check_grid(args.methods, args.sizes, spec)  # before any heavy import or work
    device = run_spec.device  # the spec is the one channel of the device
    set_threads(args.threads)

    from ..transfer.runner import run_transfer, transfer_hash

    print(
        f"transfer {run_spec.task_name}: methods {','.join(args.methods)}, sizes {args.sizes}, "
        f"downstream {','.join(spec.downstream)}, rule {spec.selection}, on {device}, {args.threads} thread(s)",
        flush=True,
    )
    res = run_transfer(
        run_spec,
        spec,
        args.checkpoint,
        args.methods,
        args.sizes,
        progress=progress_printer(fits_total(spec, args.methods, args.sizes)),
    )
    prov = io.provenance(
        transfer_hash(run_spec, spec),
        device,
        seeds=res.seeds,
        methods=args.methods,
        sizes=args.sizes,
        run_spec=run_spec.to_dict(),
        transfer_spec=spec.to_dict(),
        run_science_hash=run_spec.science_hash(),
        wall_seconds=res.wall_seconds,
        seconds_per_method=res.seconds_per_method,
        group_lasso_compile_seconds=res.group_lasso_compile_seconds,
        threads=args.threads,
    )
    res.table.insert(1 if "run" in res.table else 0, "role", run_spec.role)  # the run's role and variant, as columns
    res.table.insert(2 if "run" in res.table else 1, "variant", run_spec.variant)
    io.write_parquet(res.table, args.out, prov)
    summary = res.table.groupby(["downstream", "method", "n"])["test_accuracy"].mean().unstack("n")
    print(summary.round(3).to_string(), flush=True)
    counts = res.table["status"].value_counts().to_dict()
    print(
        f"status counts {counts}; seconds per method "
        f"{ {m: round(s, 1) for m, s in res.seconds_per_method.items()} }; wall time {res.wall_seconds:.1f} s",
        flush=True,
    )
    return 0


def fits_total(spec, methods, sizes) -> int:
    """The sample-fits a job performs: sum(sizes) for each (downstream task, method) the method fits on
    (a method kept off the negative control, as the control_methods leave it, does none there)."""
    return sum(sum(sizes) for down in spec.downstream for m in methods if spec.fits_on(down, m))


def progress_printer(total: int):
    """Print each fit's line, and a progress line with the time left counted in sample-fits (the
    work of a fit grows with its n): `progress: 1200/8000 sample-fits (15%), ... left`."""
    import re

    from ..io.progress import Progress

    bar, done = Progress(total, "sample-fits"), [0]
    bar.update(0)  # the pace starts here, before the first fit

    def say(msg: str) -> None:
        print("  " + msg, flush=True)
        fitted = re.search(r" n=(\d+) ", msg)
        if fitted:
            done[0] += int(fitted.group(1))
            bar.update(done[0])

    return say
