"""Stop a running study and resume it: seconds from the signal to snakemake's exit, and the work the resumed
run repeats (docs/reliability.md, "Stopped, killed, resumed").

    python benchmarks/interrupt_resume.py MODE [--workdir DIR] [--snakefile PATH]

MODE: int-snakemake, int-group, term-snakemake, term-group (SIGINT or SIGTERM, to snakemake alone or to
its process group). The study: three pretraining jobs (d = 4; D = 4, 6, 5; 3000, 6000 and 9000 steps; state
saved every 200 steps) and six transfer jobs, on 2 cores; stopped once a pretraining job has finished and
another is training. Prints JSON: the seconds to stop, every job the resumed run computed again although it
had finished before the stop (its benchmark seconds: the job-seconds redone), and for each pretraining job
stopped mid-way the step it saved and the step the resumed run continued from.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def study_config() -> dict:
    cfg = yaml.safe_load((REPO / "configs/tiny.yaml").read_text())
    cfg["study_name"] = "stopped"
    cfg["pretrain"] |= {"seeds": 2, "seeds_per_job": 2, "steps": 3000, "batch": 256, "eval_size": 256}
    cfg["pretrain"] |= {"record_every": 100, "attention_checkpoints": 3}
    cfg["tasks"] = {
        "a": {"task": {"d": 4, "D": 4}},
        "b": {"task": {"d": 4, "D": 6}, "pretrain": {"steps": 6000}},
        "c": {"task": {"d": 4, "D": 5}, "pretrain": {"steps": 9000}},
    }
    methods = ["pretrained_finetune", "logreg"]
    cfg["transfer"] = {"enabled": True, "sizes": [8, 32], "methods": methods, "test_size": 200}
    cfg["transfer"]["method_groups"] = {"paper_model": methods[:1], "linear": methods[1:]}
    cfg["jobs"] = {"pretrain_threads": 1, "transfer_threads": 1, "pretrain_resume_every": 200}
    return cfg


def benchmark_seconds(path: Path) -> float:
    header, row = path.read_text().splitlines()[:2]
    return float(row.split("\t")[header.split("\t").index("s")])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["int-snakemake", "int-group", "term-snakemake", "term-group"])
    parser.add_argument("--workdir", default=None, help="an empty folder for the study (default: a new one in /tmp)")
    parser.add_argument("--snakefile", default=str(REPO / "Snakefile"), help="the workflow (another checkout's)")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="interrupt-resume."))
    work.mkdir(parents=True, exist_ok=True)
    (work / "study.yaml").write_text(yaml.safe_dump(study_config()))
    results = work / "results/stopped"
    command = ["snakemake", "-s", args.snakefile, "--cores", "2", "-d", str(work), "--configfile"]
    command.append(str(work / "study.yaml"))

    def run(name: str) -> subprocess.Popen:
        out = open(work / f"{name}.out", "w")  # noqa: SIM115  (closed when the process is gone)
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's job has it
        )

    first = run("first")
    training = lambda: any((results / "pretrain").rglob(".*.resume.safetensors"))  # noqa: E731
    finished = lambda: any((results / "benchmarks/pretrain").rglob("*.tsv"))  # noqa: E731
    while not ((results / "pretrain").is_dir() and training() and (results / "benchmarks/pretrain").is_dir()):
        if first.poll() is not None:
            print(f"the study ended before it could be stopped ({work / 'first.out'})", file=sys.stderr)
            return 1
        time.sleep(0.05)
    while not finished() or not training():
        time.sleep(0.05)
    time.sleep(1.0)
    signum = signal.SIGINT if args.mode.startswith("int") else signal.SIGTERM
    t0 = time.monotonic()
    if args.mode.endswith("group"):
        os.killpg(first.pid, signum)
    else:
        os.kill(first.pid, signum)
    code = first.wait()
    stop_s = time.monotonic() - t0
    done = {str(b.relative_to(results / "benchmarks")) for b in (results / "benchmarks").rglob("*.tsv")}
    saved = {}
    for log in (results / "logs/pretrain").rglob("*.log"):
        match = re.search(r"state saved at step (\d+)", log.read_text())
        if match:
            saved[str(log.relative_to(results / "logs"))[:-4]] = int(match.group(1))
    time.sleep(1.0)
    started = time.time()
    resumed = run("resumed")
    resumed_code = resumed.wait()
    redone = {}
    for bench in (results / "benchmarks").rglob("*.tsv"):
        key = str(bench.relative_to(results / "benchmarks"))
        log = results / "logs" / (key[: -len(".tsv")] + ".log")
        recomputed = log.exists() and "nothing recomputed" not in log.read_text()
        if key in done and bench.stat().st_mtime > started and recomputed:
            redone[key[: -len(".tsv")]] = round(benchmark_seconds(bench), 1)
    continued = {}
    for key in saved:
        log = (results / "logs" / f"{key}.log").read_text()
        match = re.search(r"continuing from its saved state at step (\d+)", log)
        continued[key] = int(match.group(1)) if match else None
    last = [line for line in (work / "first.out").read_text().splitlines() if line.strip()][-1]
    print(
        json.dumps(
            {
                "mode": args.mode,
                "exit": code,
                "stop_seconds": round(stop_s, 1),
                "resumed_exit": resumed_code,
                "jobs_done_at_the_stop": len(done),
                "finished_jobs_computed_again": redone,
                "job_seconds_redone": round(sum(redone.values()), 1),
                "pretraining_saved_at_step": saved,
                "pretraining_continued_from_step": continued,
                "last_line": last,
                "workdir": str(work),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
