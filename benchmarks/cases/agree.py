"""``Trainer.run``, 5 seeds x ``--agree-steps``, float32 and float64 fed the same float32-drawn samples: wall
time, and the largest float32 - float64 difference of each recorded quantity (PASS within AGREE_TOL)."""

from __future__ import annotations

import time

from workloads import run_spec

NAME = "agree"
AGREE_TOL = {"eval_loss": 1e-3, "attention_on_relevant": 1e-3, "eval_accuracy": 2e-3, "cos_v1_vstar": 1e-3}


def run(ctx) -> list:
    from groupsparse.training.pretrain import Trainer

    torch, table, args = ctx.torch, ctx.table, ctx.args
    res = {}
    for dtype in ("float32", "float64"):
        spec = run_spec(dtype, steps=args.agree_steps)
        t0 = time.perf_counter()
        # the float64 run is fed the float32 run's samples (drawn in float32, cast up): the comparison
        # isolates the arithmetic's precision; a float64 run of the study draws float64 normals
        res[dtype] = Trainer(spec, list(range(5)), draw_dtype=torch.float32).run()
        wall = time.perf_counter() - t0
        table.add(
            "run",
            f"Trainer.run, 5 seeds x {args.agree_steps} steps, {dtype}"
            + (" (float32 samples)" if dtype == "float64" else ""),
            wall,
            "s",
            note="whole run: steps, evaluation and recording",
        )
    a, b = (res[k].trajectory.set_index(["seed", "step"]) for k in ("float32", "float64"))
    for col, tol in AGREE_TOL.items():
        diff = float((a[col] - b[col]).abs().max())
        ok = diff <= tol
        table.add(
            "agree",
            f"float32 - float64: max |{col}| over the trajectory",
            diff,
            "",
            ratio="PASS" if ok else "FAIL",
            note=f"tolerance {tol:g}",
        )
    final = b.groupby("seed").tail(1)
    table.add(
        "agree",
        "float64 final attention on j* (mean over seeds)",
        float(final["attention_on_relevant"].mean()),
        "",
        note="context for the differences above",
    )
    return []
