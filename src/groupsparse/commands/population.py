"""`groupsparse population`: one trajectory of population gradient descent, for exploring by hand.

The same code path as the workflow's runs with ``pretrain.gradient: population`` (a RunSpec, the
Trainer, the closed-form kernel chosen by ``dispatch.plan``, its gradient projected onto the
invariant subspace); the result is a CSV, one row per recorded step.
"""

from __future__ import annotations

STUDY_SEED = 20250411  # the shipped studies' root seed (config.yaml, configs/population.yaml)

COLUMNS = {  # CSV column <- trajectory column
    "step": "step",
    "flow_time": "flow_time",
    "eta": "eta",
    "min_attention": "attention_min_on_relevant",
    "min_attention_pooled": "attention_min_pooled",
    "mean_attention": "attention_on_relevant",
    "loss": "train_loss",
    "eval_loss": "eval_loss",
    "eval_accuracy": "eval_accuracy",
}


def register(sub) -> None:
    from ._args import NONNEGATIVE_INT, OutputFile, threads

    p = sub.add_parser(
        "population",
        help="one trajectory of population gradient descent from the zero start (the closed-form batch "
        "gradient projected onto the subspace the data law's symmetries fix), written as CSV",
        description="Columns: step, flow_time (eta x step), eta, batch, min_attention (the minimum over queries of "
        "the evaluation-sample mean of S[j*, j]), min_attention_pooled (the smaller of S[j*, j*] and the mean "
        "over the other queries of S[j*, j]: every query j != j* has the same expected value on the subspace), "
        "mean_attention, loss (the step's batch loss), eval_loss, eval_accuracy, and the subspace's "
        "coefficients pop_* (docs/STUDY.md section 3.3).",
    )
    p.add_argument("--d", type=int, required=True, help="group dimension")
    p.add_argument("--D", type=int, required=True, help="number of groups")
    p.add_argument("--eta", type=float, default=0.5, help="step size (default 0.5)")
    p.add_argument("--eta-D-limit", type=float, default=None, help="step size min(eta, this / D) (default: eta)")
    p.add_argument("--steps", type=int, required=True, help="gradient steps")
    p.add_argument("--batch", type=int, default=512, help="samples per step, drawn with their mirror images (even)")
    p.add_argument("--seed", type=NONNEGATIVE_INT, default=0, help="repetition: its own task (j*, v*) and data stream")
    p.add_argument("--study-seed", type=int, default=STUDY_SEED, help="root of the hashed seeds (the studies' own)")
    p.add_argument("--eval-size", type=int, default=2048, help="evaluation samples (even)")
    p.add_argument("--record-every", type=int, default=None, help="steps between records (default steps / 256)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--threads", type=threads(), default=1, help="torch threads")
    p.add_argument("--out", type=OutputFile(), required=True, help="output CSV")
    # every other argument reaches the run spec: checked as a job's spec, with its memory (_specs.check_specs)
    p.set_defaults(func=run, specs_of=lambda args: [spec_dict(args)])


def spec_dict(args) -> dict:
    """The run spec of the trajectory (validated by RunSpec.from_dict: every bad value names its key)."""
    pretrain = {
        "gradient": "population",
        "steps": args.steps,
        "eta": args.eta,
        "eta_D_limit": args.eta_D_limit,
        "batch": args.batch,
        "eval_size": args.eval_size,
        "record_every": max(1, args.steps // 256) if args.record_every is None else args.record_every,
        "attention_checkpoints": 1,
    }
    return {
        "study_seed": args.study_seed,
        "task_name": f"population_d{args.d}_D{args.D}",
        "task": {"d": args.d, "D": args.D},
        "pretrain": pretrain,
        "dtype": args.dtype,
    }


def run(args) -> int:
    from ..config.specs import RunSpec

    spec = RunSpec.from_dict(spec_dict(args))
    from ..io import files as io
    from ..model.population import COEFFICIENTS
    from ..training.pretrain import Trainer
    from ._args import set_threads

    set_threads(args.threads)
    trainer = Trainer(spec, [args.seed])
    print(
        f"population d = {args.d}, D = {args.D}: {args.steps} steps at eta {trainer.eta:g}, batch {args.batch}, "
        f"seed {args.seed}, kernel {trainer.plan.kernel}, {args.dtype}",
        flush=True,
    )
    res = trainer.run()
    traj = res.trajectory
    columns = COLUMNS | {f"pop_{c}": f"pop_{c}" for c in COEFFICIENTS}
    table = traj[list(columns.values())].rename(columns={v: k for k, v in columns.items()})
    table.insert(3, "batch", args.batch)
    io.write_text_atomic(args.out, table.to_csv(index=False, float_format="%.9g"))
    last = table.iloc[-1]
    print(
        f"step {int(last['step'])}: min attention {last['min_attention']:.6g}, loss {last['loss']:.6g}; "
        f"{len(table)} rows in {args.out} ({res.wall_seconds:.1f} s)",
        flush=True,
    )
    return 0
