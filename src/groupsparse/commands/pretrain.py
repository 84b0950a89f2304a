"""`groupsparse pretrain`: pretrain the paper's transformer for a chunk of seeds."""

from __future__ import annotations

import sys

from ._args import EXIT_DIVERGED, set_threads


def register(sub) -> None:
    from ..config.schema import default_of
    from ._args import JsonObject, OutputFile, OutputFolder, Seeds, setting, threads

    p = sub.add_parser("pretrain", help="pretrain the paper's transformer for a chunk of seeds")
    p.add_argument(
        "--spec",
        type=JsonObject(checked_later=True),
        required=True,
        help="run spec as JSON, or @file.json/@file.yaml "
        "(keys: study_seed, task_name, task, model, pretrain, dtype, device, run_name, role, variant)",
    )
    p.add_argument("--seeds", type=Seeds(), required=True, help="repetitions, e.g. 0-4 or 0,3")
    p.add_argument(
        "--checkpoint", type=OutputFile(), required=True, help="output .safetensors with final parameters and tasks"
    )
    p.add_argument(
        "--trajectory", type=OutputFile(), required=True, help="output Parquet, one row per seed and recorded step"
    )
    p.add_argument(
        "--attention", type=OutputFile(), required=True, help="output Parquet, mean attention matrix at checkpoints"
    )
    p.add_argument(
        "--resume-state", type=OutputFile(), default=None, help="side file for resumable training (deleted when done)"
    )
    p.add_argument(
        "--kept",
        type=OutputFolder(none_allowed=True),
        default=None,
        help="folder keeping links to the finished outputs with their key, so that a rerun of the same job returns "
        "them at once (default: .<NAME>.kept beside the output NAME; 'none': keep nothing)",
    )
    every = default_of("jobs.pretrain_resume_every")  # the schema's, as for the workflow's jobs
    p.add_argument(
        "--resume-every",
        type=setting("jobs.pretrain_resume_every"),
        default=every,
        help="steps between saved resume states",
    )
    p.add_argument("--threads", type=threads(), default=1, help="torch threads (the job's thread count)")
    # SIGINT or SIGTERM: the training stops at its next step with its state saved (--resume-state)
    p.set_defaults(func=run, stops_at_a_step=True, check=check)


def check(args) -> None:
    """Before any work: the spec validated as the workflow's jobs validate theirs (the schema, the cross-field
    rules), then the job's memory by the cost model, as the workflow checks it at parse time."""
    from ..config.errors import ConfigError
    from ._specs import memory_problem

    try:
        args.spec = validated_spec(args)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (in --spec)") from None
    problem = memory_problem([args.spec], len(args.seeds))
    if problem:
        raise ConfigError(f"--spec, --seeds: {problem}")


def validated_spec(args):
    """The run spec of --spec, validated (once: check() leaves the validated spec in args)."""
    from ..config.specs import RunSpec

    return args.spec if isinstance(args.spec, RunSpec) else RunSpec.from_dict(args.spec)


def run(args) -> int:
    # validated whoever wrote the file, before torch is imported: a bad setting fails in milliseconds
    spec = validated_spec(args)
    from ..io import files as io
    from ..io.progress import Progress
    from ..study.finished import Kept, job_key, kept_folder

    outputs = [args.checkpoint, args.trajectory, args.attention]
    kept = (
        Kept(
            kept_folder(args.kept, args.checkpoint), outputs, job_key("pretrain", spec=spec.to_dict(), seeds=args.seeds)
        )
        if args.kept != "none"
        else None
    )
    if kept is not None and kept.restore():
        print(
            f"pretrain {spec.task_name}: seeds {args.seeds} finished before with this spec and code; its outputs "
            f"are back from {kept.folder} (nothing recomputed)",
            flush=True,
        )
        return 0
    from ..training.divergence import DIVERGE_FACTOR, DIVERGE_PATIENCE
    from ..training.pretrain import Trainer, checkpoint_payload

    set_threads(args.threads)
    print(
        f"pretrain {spec.task_name}: seeds {args.seeds}, {spec.pretrain.steps} steps, "
        f"batch {spec.pretrain.batch}, eta {spec.pretrain.step_size(spec.task.D):g}, {spec.dtype} on {spec.device}, "
        f"{args.threads} thread(s)",
        flush=True,
    )
    if spec.pretrain.solver == "flow":
        from ..training.flow import FlowRun

        flow = FlowRun(spec, args.seeds, resume_path=args.resume_state)
        fs = spec.pretrain.flow
        print(
            f"  population gradient flow to flow time {flow.T:g}, {fs.samples} {fs.sampler} samples, {fs.method} "
            f"rtol {fs.rtol:g}, {flow.kernel}",
            flush=True,
        )
        bar = Progress(len(args.seeds) * len(flow.ends), "octaves")
        res = flow.run(progress=lambda i, segment: bar.update(i * len(flow.ends) + segment))
    else:
        trainer = Trainer(spec, args.seeds, resume_path=args.resume_state, resume_every=args.resume_every)
        print(f"  {trainer.algorithm} gradient descent, kernel {trainer.plan.kernel}", flush=True)
        bar = Progress(spec.pretrain.steps, "steps")

        def progress(step, loss):
            if bar.first is None and step > 0:  # the first step of this process: a saved state was loaded
                print(f"  continuing from its saved state at step {step}", flush=True)
            bar.update(step)

        res = trainer.run(progress=progress)
    if res.resumed_from_step:
        print(f"  resumed from saved state at step {res.resumed_from_step}", flush=True)
    prov = io.provenance(
        spec.science_hash(),
        spec.device,
        seeds=args.seeds,
        resumed_from_step=res.resumed_from_step,
        wall_seconds=res.wall_seconds,
        spec=spec.to_dict(),
    )
    res.trajectory["wall_seconds"] = res.wall_seconds
    for table in (res.trajectory, res.attention):  # the run's role and varied settings, as columns
        table.insert(1, "role", spec.role)
        table.insert(2, "variant", spec.variant)
    # a measured factor of the times (docs/STUDY.md section 6.4); the flow has none: its samples are its own column
    res.trajectory["batch"] = spec.pretrain.batch if spec.pretrain.solver == "gd" else 0
    io.write_parquet(res.trajectory, args.trajectory, prov)
    io.write_parquet(res.attention, args.attention, prov)
    diverged = [(s, st) for s, st in zip(args.seeds, res.diverged_step) if st >= 0]
    if diverged and spec.pretrain.on_diverge == "fail":
        print(
            f"groupsparse pretrain: diverged (loss non-finite, or above {DIVERGE_FACTOR:g}x its start for "
            f"{DIVERGE_PATIENCE} steps in a row) "
            f"at (seed, step): {diverged}; "
            f"lower pretrain.eta (now {spec.pretrain.step_size(spec.task.D):g} at D = {spec.task.D}) or set "
            "pretrain.on_diverge: record",
            file=sys.stderr,
        )
        return EXIT_DIVERGED
    tensors, meta = checkpoint_payload(spec, res, args.seeds)
    io.save_checkpoint(args.checkpoint, tensors, meta | {"provenance": prov})
    final = res.trajectory.sort_values("step").groupby("seed").tail(1)
    print(
        final[["seed", "step", "eval_loss", "attention_on_relevant", "cos_v1_vstar", "v2_norm", "status"]].to_string(
            index=False
        ),
        flush=True,
    )
    if diverged:
        print(f"warning: diverged (seed, step): {diverged}; recorded with status 'diverged'", flush=True)
    if kept is not None:
        kept.keep()
    print(f"wall time {res.wall_seconds:.1f} s", flush=True)
    return 0
