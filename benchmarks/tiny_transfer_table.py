#!/usr/bin/env python
"""Every transfer method's numbers on a tiny study, to compare two revisions of the code:

    python benchmarks/tiny_transfer_table.py OUT_DIR    # in each checkout, then: diff OUT_A/acc.csv OUT_B/acc.csv

configs/tiny.yaml's transfer settings (all 10 methods, cross-validation) at n = 8 and 32, 200 test
samples, both downstream tasks, 2 seeds: pretraining and transfer run through the CLI as the jobs do;
acc.csv holds each row's accuracies, losses, online error and status (80 rows).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from groupsparse.study import preflight

ROOT = Path(__file__).resolve().parents[1]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    schema = yaml.safe_load((ROOT / "src/groupsparse/config/config.schema.yaml").read_text())
    config = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    config["transfer"] |= {"sizes": [8, 32], "test_size": 200}
    run = preflight.check_study(config, schema, results=str(out / "results"))["base"]
    (out / "pretrain.json").write_text(run.spec_json)
    (out / "transfer.json").write_text(run.transfer_json())
    ck = str(out / "ck.safetensors")
    pretrain = ["groupsparse", "pretrain", "--spec", f"@{out}/pretrain.json", "--seeds", "0-1", "--checkpoint", ck]
    pretrain += ["--trajectory", f"{out}/tr.parquet", "--attention", f"{out}/at.parquet", "--threads", "1"]
    subprocess.run(pretrain, check=True)
    transfer = ["groupsparse", "transfer", "--spec", f"@{out}/transfer.json", "--checkpoint", ck, "--sizes", "8,32"]
    transfer += ["--methods", ",".join(run.methods), "--out", f"{out}/transfer.parquet", "--threads", "1"]
    subprocess.run(transfer, check=True)
    table = pd.read_parquet(out / "transfer.parquet")
    keep = ["downstream", "seed", "method", "n", "test_accuracy", "test_loss", "train_accuracy", "online_error"]
    table[[*keep, "status"]].to_csv(out / "acc.csv", index=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
