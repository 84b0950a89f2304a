#!/usr/bin/env python
"""How far apart two runs of the same pretraining job are: e.g. one job's trajectory from two kernels.

    python benchmarks/compare_runs.py results/theorem/pretrain/scale_d5_D24/seeds0-4.trajectory.parquet \\
        other/scale_d5_D24/seeds0-4.trajectory.parquet

Per recorded quantity: the largest absolute difference over the steps both runs recorded, and the largest
relative difference at each seed's last common step; per seed: the first step where the minimum attention
on j* differs by more than 1e-3, each run's last step, status and 1 - min attention there, and its largest
recorded training loss (a spike that trips the divergence rule in one run may not in the other). Exact kernels
agree to rounding where the dynamics do not amplify it, and part where they do (docs/STUDY.md 3.1).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

QUANTITIES = [
    "train_loss",
    "eval_loss",
    "attention_on_relevant",
    "attention_min_on_relevant",
    "cos_v1_vstar",
    "W_ff_norm",
    "W_pp_norm",
]


def compare(a: pd.DataFrame, b: pd.DataFrame, parted_at: float = 1e-3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per quantity, per seed) tables for two trajectories of the same job."""
    a, b = (t.drop_duplicates(["seed", "step"], keep="last").set_index(["seed", "step"]).sort_index() for t in (a, b))
    common = a.index.intersection(b.index)
    last = common.to_frame(index=False).groupby("seed")["step"].max()
    at_last = pd.MultiIndex.from_arrays([last.index, last.to_numpy()], names=["seed", "step"])
    rows = []
    for q in (q for q in QUANTITIES if q in a.columns and q in b.columns):
        diff = (a.loc[common, q] - b.loc[common, q]).abs()
        rel = (diff.loc[at_last] / a.loc[at_last, q].abs()).max()
        rows.append({"quantity": q, "max_abs_diff": float(diff.max()), "max_rel_diff_at_last_common_step": float(rel)})
    apart = (a.loc[common, "attention_min_on_relevant"] - b.loc[common, "attention_min_on_relevant"]).abs()
    parted = apart[apart > parted_at].reset_index().groupby("seed")["step"].min()
    seeds = []
    for seed in last.index:
        row = {"seed": int(seed), "parts_at_step": int(parted[seed]) if seed in parted.index else None}
        for name, t in (("a", a), ("b", b)):
            run = t.loc[seed]
            row |= {
                f"{name}_last_step": int(run.index[-1]),
                f"{name}_status": run["status"].iloc[-1] if "status" in run else "",
                f"{name}_1_minus_min_attention": float(1 - run["attention_min_on_relevant"].iloc[-1]),
                f"{name}_max_train_loss": float(run["train_loss"].max()) if "train_loss" in run else float("nan"),
            }
        seeds.append(row)
    return pd.DataFrame(rows), pd.DataFrame(seeds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="a trajectory parquet file")
    ap.add_argument("b", help="the same job's trajectory from another run")
    ap.add_argument("--parted-at", type=float, default=1e-3, help="difference in min attention that counts as parted")
    args = ap.parse_args(argv)
    try:
        a, b = pd.read_parquet(args.a), pd.read_parquet(args.b)
    except (OSError, ValueError) as exc:
        print(f"compare_runs: cannot read a trajectory: {exc}", file=sys.stderr)
        return 2
    quantities, seeds = compare(a, b, args.parted_at)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(quantities.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        print()
        print(seeds.to_string(index=False, float_format=lambda x: f"{x:.6f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
