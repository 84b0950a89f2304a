"""`groupsparse image-figures`: attention over image slots and example inputs of a real-image run."""

from __future__ import annotations

from ._args import set_threads


def register(sub) -> None:
    from ..config.specs import RunSpec
    from ._args import NONNEGATIVE_INT, POSITIVE_INT, InputFile, JsonObject, OutputFolder, threads

    p = sub.add_parser("image-figures", help="figures of a real-image run (PNG and PDF)")
    p.add_argument(
        "--spec",
        type=JsonObject(RunSpec.from_dict),
        required=True,
        help="the run spec (task.kind: images) as JSON, or @file.json/@file.yaml",
    )
    p.add_argument(
        "--checkpoint", type=InputFile(), required=True, help="pretraining checkpoint (.safetensors) of this spec"
    )
    p.add_argument(
        "--attention", type=InputFile(), required=True, help="pretraining attention table (Parquet) of this spec"
    )
    p.add_argument("--outdir", type=OutputFolder(), required=True, help="folder for the figures")
    p.add_argument("--examples", type=POSITIVE_INT, default=4, help="example inputs to show (test split)")
    p.add_argument(
        "--seed", type=NONNEGATIVE_INT, default=None, help="repetition whose examples are shown (default: first ok)"
    )
    p.add_argument("--threads", type=threads(), default=1, help="torch threads")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from ..config.specs import ConfigError, ImageTaskSpec, RunSpec
    from ..figures.images import attention_figure, describe, examples_figure
    from ..io import files as io

    spec = RunSpec.from_dict(args.spec)
    if not isinstance(spec.task, ImageTaskSpec):
        raise ConfigError(f"task.kind: image-figures needs an image task, got {spec.task.kind!r}")
    if args.examples < 1:
        raise ConfigError(f"--examples: must be >= 1, got {args.examples}")
    set_threads(args.threads)
    outdir = Path(args.outdir)
    title = describe(spec)
    tensors, meta = io.load_checkpoint(args.checkpoint)
    if meta.get("science_hash") != spec.science_hash():
        raise io.InputError(
            f"{args.checkpoint}: science_hash {meta.get('science_hash')} does not match the spec's "
            f"{spec.science_hash()}: it was pretrained with another configuration"
        )
    att = io.read_parquet(args.attention)
    if "run" in att:  # the aggregated table holds every run
        att = att[att["run"] == spec.run]
    if att.empty:
        raise io.InputError(f"{args.attention}: no attention rows for run {spec.run!r}")
    paths = attention_figure(att, title, outdir)
    paths += examples_figure(spec, tensors, meta, title, outdir, args.examples, args.seed)
    print("\n".join(str(p) for p in paths))
    return 0
