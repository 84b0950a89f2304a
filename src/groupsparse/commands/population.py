"""`groupsparse population`: one trajectory of population gradient descent, or of its flow, by hand.

The same code path as the workflow's runs with ``pretrain.gradient: population`` (a RunSpec, then the
Trainer, the closed-form kernel chosen by ``dispatch.plan``, its gradient projected onto the invariant
subspace; or with ``--solver flow`` the flow solver of ``pretrain.solver: flow``); the result is a CSV,
one row per record.
"""

from __future__ import annotations

import math

STUDY_SEED = 20250411  # the shipped studies' root seed (config.yaml, configs/population_gd.yaml)

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
FLOW_COLUMNS = ("record", "r_own", "r_other", "solver_steps", "field_evaluations", "cpu_seconds")


def register(sub) -> None:
    from ._args import NONNEGATIVE_INT, OutputFile, setting, threads

    p = sub.add_parser(
        "population",
        help="one trajectory of population gradient descent from the zero start (the closed-form batch "
        "gradient projected onto the subspace the data law's symmetries fix), written as CSV",
        description="Columns: step (gd: the step; flow: the gradient-descent steps at eta(D) to the same flow "
        "time), flow_time (eta x step), eta, batch (gd) or samples (flow), min_attention (gd: the minimum over "
        "queries of the evaluation-sample mean of S[j*, j]; flow: the minimum over the two query kinds of its "
        "expectation), min_attention_pooled (gd: the smaller of S[j*, j*] and the mean over the other queries "
        "of S[j*, j]: every query j != j* has the same expected value on the subspace), mean_attention, loss "
        "(gd: the step's batch loss; flow: the loss over its sample), eval_loss, eval_accuracy, the subspace's "
        "coefficients pop_* (docs/STUDY.md section 3), and for the flow record (start, grid, crossing of a "
        "target 1 - exp(-c D), final), r_own, r_other, solver_steps, field_evaluations, cpu_seconds.",
    )
    p.add_argument(
        "--solver",
        choices=("gd", "flow"),
        default="gd",
        help="gd: population gradient descent at --eta (default); flow: its gradient flow, an ODE of the "
        "subspace's eight coefficients (docs/STUDY.md section 3), to --flow-time",
    )
    p.add_argument("--d", type=int, required=True, help="group dimension")
    p.add_argument("--D", type=int, required=True, help="number of groups")
    p.add_argument("--eta", type=float, default=0.5, help="step size (default 0.5)")
    p.add_argument("--eta-D-limit", type=float, default=None, help="step size min(eta, this / D) (default: eta)")
    p.add_argument("--steps", type=int, default=None, help="gradient steps (gd; or --flow-time)")
    p.add_argument(
        "--flow-time",
        type=setting("pretrain.flow.flow_time"),
        default=None,
        help="flow time eta x steps to reach (flow; gd: steps = this / eta)",
    )
    p.add_argument(
        "--samples", type=setting("pretrain.flow.samples"), default=None, help="flow: outer samples of the vector field"
    )
    p.add_argument("--sampler", choices=("sobol", "mc"), default=None, help="flow: scrambled Sobol' or plain draws")
    p.add_argument(
        "--eval-samples",
        type=setting("pretrain.flow.eval_samples"),
        default=None,
        help="flow: outer samples of the evaluation",
    )
    p.add_argument(
        "--nodes", type=setting("pretrain.flow.nodes"), default=None, help="flow: quadrature nodes over x_j* . v*"
    )
    p.add_argument("--method", choices=("BDF", "Radau", "LSODA"), default=None, help="flow: the ODE solver")
    p.add_argument(
        "--rtol", type=setting("pretrain.flow.rtol"), default=None, help="flow: the solver's relative tolerance"
    )
    p.add_argument(
        "--atol", type=setting("pretrain.flow.atol"), default=None, help="flow: the solver's absolute tolerance"
    )
    p.add_argument("--batch", type=int, default=512, help="samples per step, drawn with their mirror images (even)")
    p.add_argument("--seed", type=NONNEGATIVE_INT, default=0, help="repetition: its own task (j*, v*) and data stream")
    p.add_argument("--study-seed", type=int, default=STUDY_SEED, help="root of the hashed seeds (the studies' own)")
    p.add_argument("--eval-size", type=int, default=2048, help="evaluation samples (even)")
    p.add_argument("--record-every", type=int, default=None, help="steps between records (default steps / 256)")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None, help="gd: float32 (default); flow: float64")
    p.add_argument("--threads", type=threads(), default=1, help="torch threads")
    p.add_argument("--out", type=OutputFile(), required=True, help="output CSV")
    # every other argument reaches the run spec: checked as a job's spec, with its memory (_specs.check_specs)
    p.set_defaults(func=run, specs_of=lambda args: [spec_dict(args)])


FLOW_ARGS = {"samples": "samples", "sampler": "sampler", "eval_samples": "eval_samples", "nodes": "nodes",
             "method": "method", "rtol": "rtol", "atol": "atol"}  # fmt: skip


def spec_dict(args) -> dict:
    """The run spec of the trajectory (validated by RunSpec.from_dict: every bad value names its key)."""
    from ..config.errors import ConfigError
    from ..config.specs import step_size

    if (args.steps is None) == (args.flow_time is None):
        raise ConfigError("--steps / --flow-time: give exactly one (the run's length in steps or in flow time)")
    eta = step_size(args.eta, args.eta_D_limit, args.D)
    steps = args.steps if args.steps is not None else max(1, math.ceil(args.flow_time / eta))
    pretrain = {
        "gradient": "population",
        "steps": steps,
        "eta": args.eta,
        "eta_D_limit": args.eta_D_limit,
        "batch": args.batch,
        "eval_size": args.eval_size,
        "record_every": max(1, steps // 256) if args.record_every is None else args.record_every,
        "attention_checkpoints": 1,
        "solver": args.solver,
    }
    flow = {key: getattr(args, arg) for arg, key in FLOW_ARGS.items() if getattr(args, arg) is not None}
    if args.solver == "flow":
        pretrain["flow"] = flow
    elif flow:
        raise ConfigError(f"--{next(iter(flow)).replace('_', '-')}: a flow setting; add --solver flow")
    return {
        "study_seed": args.study_seed,
        "task_name": f"population_d{args.d}_D{args.D}",
        "task": {"d": args.d, "D": args.D},
        "pretrain": pretrain,
        "dtype": args.dtype or ("float64" if args.solver == "flow" else "float32"),
    }


def run(args) -> int:
    from ..config.specs import RunSpec

    spec = RunSpec.from_dict(spec_dict(args))
    from ..io import files as io
    from ..model.population import COEFFICIENTS
    from ..training.pretrain import Trainer
    from ._args import set_threads

    set_threads(args.threads)
    columns = COLUMNS | {f"pop_{c}": f"pop_{c}" for c in COEFFICIENTS}
    if spec.pretrain.solver == "flow":
        from ..training.flow import FlowRun

        run = FlowRun(spec, [args.seed])
        fs = spec.pretrain.flow
        print(
            f"population flow d = {args.d}, D = {args.D}: to flow time {run.T:g} (gradient descent: "
            f"{spec.pretrain.steps} steps at eta {run.eta:g}), {fs.samples} samples, {fs.method} rtol {fs.rtol:g}, "
            f"seed {args.seed}, {run.kernel}",
            flush=True,
        )
        res = run.run()
        columns = columns | {c: c for c in FLOW_COLUMNS}
    else:
        trainer = Trainer(spec, [args.seed])
        print(
            f"population d = {args.d}, D = {args.D}: {spec.pretrain.steps} steps at eta {trainer.eta:g}, batch "
            f"{args.batch}, seed {args.seed}, kernel {trainer.plan.kernel}, {spec.dtype}",
            flush=True,
        )
        res = trainer.run()
    traj = res.trajectory
    table = traj[list(columns.values())].rename(columns={v: k for k, v in columns.items()})
    if spec.pretrain.solver == "flow":
        table.insert(3, "samples", spec.pretrain.flow.samples)
    else:
        table.insert(3, "batch", args.batch)
    io.write_text_atomic(args.out, table.to_csv(index=False, float_format="%.9g"))
    last = table.iloc[-1]
    print(
        f"flow time {last['flow_time']:.6g}: min attention {last['min_attention']:.6g}, loss {last['loss']:.6g}; "
        f"{len(table)} rows in {args.out} ({res.wall_seconds:.1f} s)",
        flush=True,
    )
    return 0
