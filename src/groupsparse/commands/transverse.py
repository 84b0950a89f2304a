"""`groupsparse transverse`: per D, the growth rate of a small perturbation transverse to population GD's
invariant subspace along the projected trajectory, per symmetry sector, and the zero start's top Hessian
eigenvalue against D / 4 (docs/STUDY.md section 3.6).

The trajectory is one run of the study's population mode (the same RunSpec and Trainer as
`groupsparse population`); at checkpoints along it (flow time 0 and D^3 x 1/64, 1/16, 1/4, 1, 2 up to the
run's end) the Hessian of a fixed Monte Carlo sample is restricted to each sector (``model.sectors``).
"""

from __future__ import annotations

from .population import STUDY_SEED


def register(sub) -> None:
    from ._args import NONNEGATIVE_INT, POSITIVE, POSITIVE_INT, OutputFile, setting, threads

    p = sub.add_parser(
        "transverse",
        help="per D: growth rates of perturbations transverse to population GD's invariant subspace, per "
        "symmetry sector, along the projected trajectory; the zero start's top Hessian eigenvalue against D/4",
        description="One row per (D, checkpoint, sector): the sector's extreme Hessian eigenvalues (A's Ritz "
        "values, and their Ritz vectors' Rayleigh quotients on an independent sample B with standard errors), "
        "eta x lam_max, the per-step growth factor rho_step = max |1 - eta lambda|, growth_per_flow_time = "
        "log(rho_step) / eta, and grows (the bound from inside shows growth by 2 standard errors).",
    )
    p.add_argument(
        "--d", type=setting("task.d"), default=10, help="group dimension (default 10, the population study's)"
    )
    p.add_argument(
        "--D", type=setting("task.D"), nargs="+", required=True, help="numbers of groups, e.g. --D 4 6 8 12 16 24 32"
    )
    p.add_argument("--eta", type=setting("pretrain.eta"), default=0.5, help="step size cap (default 0.5)")
    p.add_argument(
        "--eta-D-limit",
        type=setting("pretrain.eta_D_limit"),
        default=6.0,
        help="step size min(eta, this / D) (default 6)",
    )
    p.add_argument(
        "--batch",
        type=setting("pretrain.batch"),
        default=128,
        help="the projected run's batch (default 128, the study's)",
    )
    p.add_argument("--flow-time-per-D3", type=POSITIVE, default=2.0, help="trajectory length in flow time / D^3")
    p.add_argument("--max-steps", type=POSITIVE_INT, default=8192, help="cap on the trajectory's steps (default 8192)")
    p.add_argument("--samples", type=POSITIVE_INT, default=2048, help="antithetic pairs in each Hessian sample A and B")
    p.add_argument(
        "--iters", type=POSITIVE_INT, default=20, help="Lanczos steps per sector and checkpoint (default 20)"
    )
    p.add_argument("--hessian-samples", type=POSITIVE_INT, default=16384, help="pairs per sample at the zero start")
    p.add_argument("--seed", type=NONNEGATIVE_INT, default=0, help="repetition: its task (j*, v*) and data stream")
    p.add_argument("--study-seed", type=setting("study_seed"), default=STUDY_SEED, help="root of the hashed seeds")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="the trajectory's precision")
    p.add_argument("--threads", type=threads(), default=1, help="torch threads")
    p.add_argument("--out", type=OutputFile(), required=True, help="output CSV: the transverse_by_D table")
    p.add_argument(
        "--hessian-out", type=OutputFile(), default=None, help="output CSV: the zero start's top eigenvalue per D"
    )
    p.add_argument(
        "--propagation-out",
        type=OutputFile(),
        default=None,
        help="output CSV: per D up to --propagate-up-to, a tiny perturbation per sector carried step by step along "
        "the trajectory by the linearised GD map (columns step, flow_time, sector, log_growth)",
    )
    p.add_argument("--propagate-up-to", type=setting("task.D"), default=8, help="largest D to propagate (default 8)")
    p.set_defaults(func=run, specs_of=lambda args: [spec_dict(args, D) for D in args.D], check=check)


def spec_dict(args, D: int) -> dict:
    """The projected run of one D (validated by RunSpec.from_dict: a bad value names its key)."""
    from ..config.specs import step_size

    eta = step_size(args.eta, args.eta_D_limit, D)
    steps = max(1, min(args.max_steps, round(args.flow_time_per_D3 * D**3 / eta)))
    pretrain = {
        "gradient": "population",
        "steps": steps,
        "eta": args.eta,
        "eta_D_limit": args.eta_D_limit,
        "batch": args.batch,
        "eval_size": 256,  # the records' attention is not used here, only the coefficients
        "record_every": max(1, steps // 256),
        "attention_checkpoints": 1,
    }
    return {
        "study_seed": args.study_seed,
        "task_name": f"transverse_d{args.d}_D{D}",
        "task": {"d": args.d, "D": D},
        "pretrain": pretrain,
        "dtype": args.dtype,
    }


def check(args) -> None:
    """Before any run: each Monte Carlo sample splits into equal chunks (the run specs of every D are checked
    as the workflow's, by groupsparse.commands._specs.check_specs)."""
    from ..config.errors import ConfigError
    from ..training import transverse

    for name in ("samples", "hessian_samples"):
        if getattr(args, name) % transverse.CHUNKS:
            raise ConfigError(
                f"--{name.replace('_', '-')}: got {getattr(args, name)}; allowed: a multiple of {transverse.CHUNKS}"
            )


def run(args) -> int:
    import pandas as pd

    from ..config.specs import RunSpec
    from ..io import files as io
    from ..training import transverse
    from ._args import set_threads

    specs = {D: RunSpec.from_dict(spec_dict(args, D)) for D in args.D}  # every D checked (check_specs) before any run
    set_threads(args.threads)
    rows, hessian, propagated = [], [], []
    for D, spec in specs.items():
        identity = (args.study_seed, "transverse", args.d, D, args.seed)
        if args.hessian_out:
            h = transverse.zero_start_row(args.d, D, args.hessian_samples, 30, *identity)
            hessian.append(h)
            print(
                f"D = {D}: zero start top eigenvalue {h['top']:.4f} +- {h['top_se']:.4f} (predicted "
                f"{h['predicted_top']:.4f}); v-block {h['vblock_top']:.4f} +- {h['vblock_se']:.4f} (D/4 = {D / 4:g})",
                flush=True,
            )
        if args.propagation_out and args.propagate_up_to >= D:
            carried = transverse.propagated_rows(spec, args.seed, args.samples, *identity)
            propagated += carried
            last = {r["sector"]: r["log_growth"] for r in carried if r["step"] == spec.pretrain.steps}
            print(f"D = {D}: log growth carried to the end: " + ", ".join(f"{k} {g:.3g}" for k, g in last.items()))
        found = transverse.transverse_rows(spec, args.seed, args.samples, args.iters, *identity)
        rows += found
        print(f"D = {D}, eta {found[0]['eta']:g}, {spec.pretrain.steps} steps: " + summary(found), flush=True)
    table = pd.DataFrame(rows)
    io.write_text_atomic(args.out, table.to_csv(index=False, float_format="%.9g"))
    if args.hessian_out:
        io.write_text_atomic(args.hessian_out, pd.DataFrame(hessian).to_csv(index=False, float_format="%.9g"))
    if args.propagation_out:
        io.write_text_atomic(args.propagation_out, pd.DataFrame(propagated).to_csv(index=False, float_format="%.9g"))
    print(f"{len(table)} rows in {args.out}" + (f", {len(hessian)} in {args.hessian_out}" if hessian else ""))
    return 0


def summary(rows: list[dict]) -> str:
    """Per transverse sector: the largest growth rate per unit flow time where it grows, and when."""
    parts = []
    for sector in dict.fromkeys(r["sector"] for r in rows if r["sector"] != "subspace"):
        growing = [r for r in rows if r["sector"] == sector and r["grows"]]
        if not growing:
            parts.append(f"{sector} no growth")
            continue
        top = max(growing, key=lambda r: r["growth_per_flow_time"])
        rate = top["growth_per_flow_time"]
        parts.append(f"{sector} {rate:.3g} ({top['how']}, tau/D^3 = {top['flow_time_per_D3']:.3g})")
    return "; ".join(parts) if parts else "no sector"
