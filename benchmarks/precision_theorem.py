#!/usr/bin/env python
"""float32 against float64 on the same (float32-drawn) samples at the theorem test's settings:
d = 10, D = 32, batch 512, eta = 0.5, one seed, 1500 steps, recorded every 100 steps (about a minute).
Prints the float64 run's losses and attention on j* beside the two runs' differences.

    python benchmarks/precision_theorem.py [--steps 1500] [--batch 512] [--eta 0.5]
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch
from workloads import run_spec

from groupsparse.training.pretrain import Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--eta", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pre = {"batch": args.batch, "eta": args.eta, "eval_size": 64, "record_every": 100}
    runs = {
        dt: Trainer(
            run_spec(dt, steps=args.steps, task={"d": 10, "D": 32}, pretrain=pre), [0], draw_dtype=torch.float32
        )
        .run()
        .trajectory.set_index("step")
        for dt in ("float32", "float64")
    }
    a, b = runs["float32"], runs["float64"]
    table = pd.DataFrame(
        {
            "float64 train loss": b.train_loss,
            "float64 attention on j*": b.attention_on_relevant,
            "|float32 - float64| train loss": (a.train_loss - b.train_loss).abs(),
            "|float32 - float64| attention": (a.attention_on_relevant - b.attention_on_relevant).abs(),
        }
    )
    print(table.iloc[::3].to_string())


if __name__ == "__main__":
    main()
