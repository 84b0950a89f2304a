"""Measure what real jobs cost, for the cost model in src/groupsparse/costs/.

Runs the real CLI jobs (`groupsparse pretrain ...`, `groupsparse transfer ...`, the same
command lines as workflow/rules/*.smk) under `/usr/bin/time -v`, one at a time, with one
thread, and appends one row per job to

    benchmarks/costs/pretrain.tsv        one pretraining job
    benchmarks/costs/transfer.tsv        one transfer job (a method group x sizes)
    benchmarks/costs/transfer_fits.tsv   every (downstream, n, method) line of a transfer log

Each row records the machine's 1-minute load average before the job (`load1`): this
machine is shared, so wall times are inflated; the model is fitted to CPU seconds
(user + sys), which a one-thread job spends whatever the load, and wall seconds are kept.

    python benchmarks/measure_costs.py --list
    python benchmarks/measure_costs.py --only p_d10_D10_s5,t_d10_D10_linear
    python benchmarks/measure_costs.py            # every point (about 20 minutes on an idle 2-core VM)
    python benchmarks/measure_costs.py --refit    # then refit src/groupsparse/costs/costs.yaml

A point already in a table is measured again only with --redo (its old row is replaced).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from groupsparse import costs  # noqa: E402
from groupsparse.study.runs import expand  # noqa: E402

OUT = ROOT / "benchmarks" / "costs"
WORK = Path(os.environ.get("COSTS_WORK", "/tmp/groupsparse-costs"))
POPULATION = {"gradient": "population", "eta": 0.5, "eta_D_limit": 6}
SIZES_4096 = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
GROUPS = {
    "paper_model": ["pretrained_finetune", "pretrained_frozen_W", "scratch_transformer"],
    "paper_pretrained": ["pretrained_finetune", "pretrained_frozen_W"],
    "linear": ["logreg", "group_lasso"],
    "logreg": ["logreg"],
    "neural": ["mlp", "std_transformer"],
    "scaling": ["pretrained_finetune", "pretrained_frozen_W", "logreg"],
    "all": None,
}


def P(
    name,
    d,
    D,
    seeds,
    steps,
    batch,
    eval_size,
    dtype="float32",
    record_every=50,
    sampling="antithetic",
    model=None,
    kind="synthetic",
    pretrain=None,
):
    task = (
        {"d": d, "D": D}
        if kind == "synthetic"
        else {
            "kind": "images",
            "dataset": "digits",
            "classes": [0, 1],
            "transfer_classes": [2, 3],
            "D": D,
            "d": d,
            "reduce": "pool",
            "test_fraction": 0.3,
        }
    )
    return {
        "name": name,
        "job": "pretrain",
        "task": task,
        "seeds": seeds,
        "dtype": dtype,
        "model": model or {},
        "pretrain": {
            "steps": steps,
            "batch": batch,
            "eval_size": eval_size,
            "record_every": record_every,
            "sampling": sampling,
            **(pretrain or {}),
        },
    }


def T(name, ckpt, group, sizes, test_size, selection="fixed"):
    return {
        "name": name,
        "job": "transfer",
        "from": ckpt,
        "group": group,
        "sizes": sizes,
        "test_size": test_size,
        "selection": selection,
    }


# Pretraining points: the shipped configs' shapes, shortened in steps (time is linear in steps
# plus the recorded evaluations, which the model counts), and the scaling grid's largest point.
POINTS = [
    P("p_tiny", 4, 4, 2, 60, 128, 256, record_every=20),
    P("p_d10_D10_s5", 10, 10, 5, 600, 2048, 4096),
    P("p_d10_D10_s1", 10, 10, 1, 600, 2048, 4096),
    P("p_d10_D10_s3_f64", 10, 10, 3, 1000, 512, 2048, dtype="float64", record_every=25),
    P("p_d10_D16_s3_f64", 10, 16, 3, 1000, 512, 2048, dtype="float64", record_every=25),
    P("p_d20_D20_s5", 20, 20, 5, 300, 2048, 8192, record_every=100),
    P("p_d10_D32_s5_f64", 10, 32, 5, 200, 1024, 4096, dtype="float64", record_every=100),
    P("p_d40_D64_s1_f64", 40, 64, 1, 300, 1024, 4096, dtype="float64", record_every=100),
    P("p_d40_D64_s5_f64", 40, 64, 5, 100, 1024, 4096, dtype="float64", record_every=100),
    # the theorem test's runs (configs/theorem.yaml): from the zero start, D >= 24, symmetric.py's kernel
    # (long enough that the steps, not the start-up, dominate the job's CPU time)
    P("p_sym_d10_D32_s5", 10, 32, 5, 10000, 512, 2048, record_every=100),
    P("p_sym_d10_D64_s5", 10, 64, 5, 2000, 512, 2048, record_every=100),
    P("p_sym_d10_D32_s3_f64", 10, 32, 3, 500, 512, 2048, dtype="float64", record_every=100),
    P("p_iid_d10_D10_s3", 10, 10, 3, 600, 512, 2048, sampling="iid"),
    P("p_add_d10_D10_s3", 10, 10, 3, 300, 512, 2048, model={"positions": "add"}),
    P("p_2layers_d10_D10_s3", 10, 10, 3, 300, 512, 2048, model={"layers": 2}),
    P("p_digits_s5", 16, 8, 5, 300, 1024, 4096, sampling="iid", kind="images"),
    # population mode from D = 24 on (configs/population_gd.yaml, configs/cluster/population_large_D.yaml): the
    # step from the subspace's coefficients (population_loops), at the configs' batches and step-size rule
    P("p_pop_d10_D24_s1", 10, 24, 1, 300000, 128, 8192, record_every=50000, pretrain=POPULATION),
    P("p_pop_d10_D48_s1", 10, 48, 1, 100000, 128, 8192, record_every=20000, pretrain=POPULATION),
    P("p_pop_d10_D64_s1", 10, 64, 1, 200000, 32, 8192, record_every=40000, pretrain=POPULATION),
    P("p_pop_d10_D128_s1", 10, 128, 1, 40000, 32, 8192, record_every=10000, pretrain=POPULATION),
    # transfer jobs: the default study's three groups (5 seeds, n up to 4096, 10000 test samples),
    # the scaling grid's largest point (d = 40, D = 64), a tiny job and a cross-validated one
    T("t_d10_D10_paper_model", "p_d10_D10_s5", "paper_model", SIZES_4096, 10000),
    T("t_d10_D10_linear", "p_d10_D10_s5", "linear", SIZES_4096, 10000),
    T("t_d10_D10_neural", "p_d10_D10_s5", "neural", SIZES_4096, 10000),
    T("t_d40_D64_paper", "p_d40_D64_s5_f64", "paper_pretrained", SIZES_4096, 10000),
    T("t_d40_D64_logreg", "p_d40_D64_s5_f64", "logreg", SIZES_4096, 10000),
    T("t_d20_D20_paper", "p_d20_D20_s5", "paper_pretrained", SIZES_4096, 10000),
    T("t_d10_D32_linear", "p_d10_D32_s5_f64", "linear", SIZES_4096, 10000),
    T("t_tiny_all", "p_tiny", "all", [8, 32, 128], 500),
    T("t_d10_D16_scaling", "p_d10_D16_s3_f64", "scaling", SIZES_4096, 5000),
    T("t_d10_D10_linear_cv", "p_d10_D10_s3_f64", "linear", [16, 64, 256, 1024], 5000, selection="cv"),
    T("t_d10_D10_paper_cv", "p_d10_D10_s3_f64", "paper_pretrained", [16, 64, 256], 5000, selection="cv"),
]
BY_NAME = {p["name"]: p for p in POINTS}


def run_entry(point: dict) -> tuple[object, dict]:
    """The study's own Run for this point (expanded exactly as the Snakefile would)."""
    pre = point if point["job"] == "pretrain" else BY_NAME[point["from"]]
    methods = GROUPS[point["group"]] if point["job"] == "transfer" else None
    methods = methods or list(costs.measured_methods())
    config = {
        "study_seed": 20250411,
        "device": "cpu",
        "dtype": pre["dtype"],
        "model": pre["model"],
        "pretrain": pre["pretrain"] | {"seeds": pre["seeds"], "seeds_per_job": pre["seeds"]},
        "tasks": {"costs": {"task": pre["task"]}},
        "transfer": {
            "enabled": True,
            "methods": methods,
            "sizes": point.get("sizes", [8]),
            "test_size": point.get("test_size", 100),
            "selection": point.get("selection", "fixed"),
        },
    }
    return expand(config)["costs"], config


def parse_time_v(text: str) -> dict:
    def grab(label):
        m = re.search(rf"{re.escape(label)}: (.+)", text)
        return m.group(1).strip() if m else None

    wall = grab("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(x) for x in wall.split(":")]
    wall_s = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    return {
        "wall_s": round(wall_s, 2),
        "user_s": float(grab("User time (seconds)")),
        "sys_s": float(grab("System time (seconds)")),
        "max_rss_mb": round(int(grab("Maximum resident set size (kbytes)")) / 1024, 1),
    }


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def timed(cmd: list[str], log: Path) -> dict:
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT / "src"),
    }
    tv = log.with_suffix(".time")
    with open(log, "w") as fh:
        rc = subprocess.run(
            ["/usr/bin/time", "-v", "-o", str(tv)] + cmd, stdout=fh, stderr=subprocess.STDOUT, env=env
        ).returncode
    if rc != 0:
        raise SystemExit(f"measure_costs: job failed (exit {rc}); see {log}")
    return parse_time_v(tv.read_text())


def measure(point: dict) -> tuple[dict, list[dict]]:
    run, _ = run_entry(point)
    WORK.mkdir(parents=True, exist_ok=True)
    pre_name = point["name"] if point["job"] == "pretrain" else point["from"]
    ckpt = WORK / f"{pre_name}.safetensors"
    base = {"name": point["name"], "load1_before": load1(), "threads": 1, "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if point["job"] == "pretrain":
        spec_file = WORK / f"{point['name']}.spec.json"
        spec_file.write_text(run.spec_json)
        chunk = run.chunks[0]
        cmd = [
            "groupsparse",
            "pretrain",
            "--spec",
            f"@{spec_file}",
            "--seeds",
            chunk,
            "--checkpoint",
            str(ckpt),
            "--trajectory",
            str(WORK / f"{pre_name}.trajectory.parquet"),
            "--attention",
            str(WORK / f"{pre_name}.attention.parquet"),
            "--threads",
            "1",
        ]
        res = timed(cmd, WORK / f"{point['name']}.log")
        row = base | res | {"load1_after": load1()} | costs.describe_pretrain(run.spec, len(run.seeds))
        return row, []
    if not ckpt.exists():
        raise SystemExit(f"measure_costs: {point['name']} needs {point['from']} measured first")
    spec_file = WORK / f"{point['name']}.spec.json"
    spec_file.write_text(run.transfer_json())
    methods = run.methods
    cmd = [
        "groupsparse",
        "transfer",
        "--spec",
        f"@{spec_file}",
        "--checkpoint",
        str(ckpt),
        "--methods",
        ",".join(methods),
        "--sizes",
        ",".join(map(str, run.sizes)),
        "--out",
        str(WORK / f"{point['name']}.parquet"),
        "--threads",
        "1",
    ]
    log = WORK / f"{point['name']}.log"
    res = timed(cmd, log)
    row = (
        base
        | res
        | {"load1_after": load1()}
        | costs.describe_transfer(run.spec, run.transfer, methods, run.sizes, len(run.seeds))
    )
    fits = []
    for m in re.finditer(r"^\s+(\w+) n=(\d+) (\w+): ([0-9.]+) s$", log.read_text(), re.M):
        fits.append(
            {
                "name": point["name"],
                "downstream": m.group(1),
                "n": int(m.group(2)),
                "method": m.group(3),
                "seconds": float(m.group(4)),
                "d": run.spec["task"]["d"],
                "D": run.spec["task"]["D"],
                "seeds": len(run.seeds),
                "test_size": run.transfer["test_size"],
                "selection": run.transfer.get("selection", "fixed"),
                "cv_folds": run.transfer.get("cv_folds", 3),
                "dtype": run.transfer.get("dtype", "float32"),
            }
        )
    return row, fits


# derived from the sizes by groupsparse.costs (recomputed at every fit), so not stored
DERIVED = {"flops", "draws", "rate", "eta", "flow_time", "python_steps", "persistent_bytes", "transient_bytes"}
DERIVED |= {"x_bytes", "z_bytes"}


def read_tsv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def write_tsv(path: Path, rows: list[dict]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, cols, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def replace_rows(path: Path, name: str, new: list[dict]) -> None:
    rows = [r for r in read_tsv(path) if r["name"] != name] + [
        {k: v for k, v in r.items() if k not in DERIVED} for r in new
    ]
    write_tsv(path, rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated point names (default: all)")
    ap.add_argument("--redo", action="store_true", help="measure again points already in the tables")
    ap.add_argument("--list", action="store_true", help="list the points and exit")
    ap.add_argument(
        "--refit", action="store_true", help="refit src/groupsparse/costs/costs.yaml from the tables and exit"
    )
    args = ap.parse_args(argv)
    if args.list:
        for p in POINTS:
            print(p["name"], json.dumps({k: v for k, v in p.items() if k != "name"}))
        return 0
    if args.refit:
        coeffs = costs.fit(OUT)
        costs.write_coefficients(coeffs)
        print(costs.report(OUT))
        return 0
    wanted = [p for p in POINTS if not args.only or p["name"] in args.only.split(",")]
    done = {r["name"] for f in ("pretrain.tsv", "transfer.tsv") for r in read_tsv(OUT / f)}
    for point in wanted:
        if point["name"] in done and not args.redo:
            print(f"{point['name']}: already measured (--redo to measure again)")
            continue
        row, fits = measure(point)
        table = "pretrain.tsv" if point["job"] == "pretrain" else "transfer.tsv"
        replace_rows(OUT / table, point["name"], [row])
        if point["job"] == "transfer":
            replace_rows(OUT / "transfer_fits.tsv", point["name"], fits)
        print(
            f"{point['name']}: cpu {row['user_s'] + row['sys_s']:.1f} s, wall {row['wall_s']} s, "
            f"max_rss {row['max_rss_mb']} MB, load {row['load1_before']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
