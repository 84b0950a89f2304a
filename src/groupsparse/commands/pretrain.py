"""`groupsparse pretrain`: pretrain the paper's transformer for a chunk of seeds."""

from __future__ import annotations

import sys

from ._args import EXIT_DIVERGED, load_spec_arg, parse_seeds, set_threads


def register(sub) -> None:
    from ..config.schema import default_of

    p = sub.add_parser("pretrain", help="pretrain the paper's transformer for a chunk of seeds")
    p.add_argument(
        "--spec",
        type=load_spec_arg,
        required=True,
        help="run spec as JSON, or @file.json/@file.yaml "
        "(keys: study_seed, task_name, task, model, pretrain, dtype, device, run_name, role, variant)",
    )
    p.add_argument("--seeds", type=parse_seeds, required=True, help="repetitions, e.g. 0-4 or 0,3")
    p.add_argument("--checkpoint", required=True, help="output .safetensors with final parameters and tasks")
    p.add_argument("--trajectory", required=True, help="output Parquet, one row per seed and recorded step")
    p.add_argument("--attention", required=True, help="output Parquet, mean attention matrix at checkpoints")
    p.add_argument("--resume-state", default=None, help="side file for resumable training (deleted when done)")
    every = default_of("jobs.pretrain_resume_every")  # the schema's, as for the workflow's jobs
    p.add_argument("--resume-every", type=int, default=every, help="steps between saved resume states")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the job's thread count)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..config.specs import RunSpec

    # validated whoever wrote the file, before torch is imported: a bad setting fails in milliseconds
    spec = RunSpec.from_dict(args.spec)
    from ..io import files as io
    from ..io.progress import Progress
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
        res = trainer.run(progress=lambda step, loss: bar.update(step))
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
    print(f"wall time {res.wall_seconds:.1f} s", flush=True)
    return 0
