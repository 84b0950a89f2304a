"""`groupsparse transfer`: one pretrained checkpoint against methods x sample sizes."""

from __future__ import annotations

from ._args import set_threads


def validated_specs(args) -> tuple:
    """(RunSpec, TransferSpec) of --spec: {"run": <RunSpec dict>, "transfer": <TransferSpec dict>}, each
    validated as the workflow's are (ConfigError naming the key); once: check() leaves them in args."""
    from ..config.specs import ConfigError, RunSpec
    from ..transfer.spec import TransferSpec, check_transfer

    raw = args.spec
    if isinstance(raw, tuple):
        return raw
    if "run" not in raw:
        raise ConfigError('--spec: must be {"run": <RunSpec dict>, "transfer": <TransferSpec dict>}')
    unknown = sorted(set(raw) - {"run", "transfer"})
    if unknown:
        raise ConfigError(f"--spec.{unknown[0]}: unknown key; allowed: run, transfer")
    run_spec = RunSpec.from_dict(raw["run"])
    check_transfer(raw.get("transfer"))
    return run_spec, TransferSpec.from_dict(raw.get("transfer"))


def check(args) -> None:
    """Before any work: the methods and sizes against the spec's grid, and the job's memory by the cost model
    (the workflow's checks of the same job)."""
    from ..config.specs import ConfigError
    from ..costs import transfer_cost
    from ..transfer.spec import check_grid
    from ._specs import machine_memory_mb

    try:
        args.spec = run_spec, spec = validated_specs(args)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (in --spec)") from None
    check_grid(args.methods, args.sizes, spec)
    need = transfer_cost(run_spec.to_dict(), spec.to_dict(), args.methods, args.sizes, 1, "cpu").mem_mb
    machine = machine_memory_mb()
    if machine is not None and need > machine:
        raise ConfigError(
            f"--sizes, --spec: the job needs about {need:,.0f} MB (the cost model's estimate), over this machine's "
            f"memory of {machine:,.0f} MB"
        )


def register(sub) -> None:
    from ..transfer.methods import method_names
    from ..transfer.spec import DEFAULT_SIZES
    from ._args import POSITIVE_INT, Choice, InputFile, JsonObject, Listed, OutputFile, OutputFolder, threads

    methods = Listed(Choice(method_names(), "method"), f"comma-separated, from: {','.join(method_names())}")

    p = sub.add_parser("transfer", help="fine-tune a pretrained checkpoint and fit baselines at many sample sizes")
    p.add_argument(
        "--spec",
        type=JsonObject(checked_later=True),
        required=True,
        help='{"run": <RunSpec of the pretraining run>, "transfer": <TransferSpec>} as JSON, or @file',
    )
    p.add_argument(
        "--checkpoint", type=InputFile(), required=True, help="pretraining checkpoint (.safetensors) of that run"
    )
    p.add_argument(
        "--methods",
        type=methods,
        default=list(method_names()),
        help=f"comma-separated, from: {','.join(method_names())} (default: all)",
    )
    p.add_argument(
        "--sizes",
        type=Listed(POSITIVE_INT, "comma-separated sample sizes (positive integers)"),
        default=list(DEFAULT_SIZES),
        help=f"training sample sizes n, comma-separated (default {','.join(map(str, DEFAULT_SIZES))})",
    )
    p.add_argument(
        "--out", type=OutputFile(), required=True, help="output Parquet, one row per (downstream, seed, method, n)"
    )
    p.add_argument(
        "--kept",
        type=OutputFolder(none_allowed=True),
        default=None,
        help="folder keeping links to the finished outputs with their key, so that a rerun of the same job returns "
        "them at once (default: .<NAME>.kept beside the output NAME; 'none': keep nothing)",
    )
    p.add_argument("--threads", type=threads(), default=1, help="torch threads (the job's thread count)")
    p.set_defaults(func=run, check=check)


def run(args) -> int:
    from ..io import files as io
    from ..transfer.spec import check_grid

    # validated whoever wrote the file, with the methods and sizes, before torch is imported (check)
    run_spec, spec = validated_specs(args)
    check_grid(args.methods, args.sizes, spec)
    device = run_spec.device  # the spec is the one channel of the device
    from ..study.finished import Kept, file_sha256, job_key, kept_folder

    key = job_key(
        "transfer",
        run=run_spec.to_dict(),
        transfer=spec.to_dict(),
        methods=args.methods,
        sizes=args.sizes,
        checkpoint=file_sha256(args.checkpoint),
    )
    kept = Kept(kept_folder(args.kept, args.out), [args.out], key) if args.kept != "none" else None
    if kept is not None and kept.restore():
        print(
            f"transfer {run_spec.task_name}: finished before with this spec, checkpoint and code; its table is "
            f"back from {kept.folder} (nothing recomputed)",
            flush=True,
        )
        return 0
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
    if kept is not None:
        kept.keep()
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
