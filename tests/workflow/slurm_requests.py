"""What the study would ask of Slurm: the executor plugin's real sbatch lines, captured.

Runs the workflow with ``--executor slurm`` and the shipped Slurm profile, with ``sbatch`` on PATH
replaced by a recorder that logs its argument vector and (with ``--test-only-with``) passes it to the
real ``sbatch --test-only`` (Slurm checks the request against its nodes and partitions, and queues
nothing), then fails the submission, so nothing runs. A first pass records every Slurm job whose
inputs exist (all pretraining, and the transfer jobs that share a Slurm job with theirs); where the
caps put transfer jobs in a Slurm job of their own, a second pass, with the pretraining outputs
stood in by empty files, records those. Usable as a script::

    python tests/workflow/slurm_requests.py [--device cuda] [--local-cluster] configs/tiny.yaml ...

prints one line per Slurm job: --time, --mem, --cpus-per-task, GPUs and members. The plugin needs
a reachable Slurm (it asks sinfo/scontrol); ``--local-cluster`` starts the test's throwaway
single-node Slurm (tests/workflow/slurm_cluster.py: root, Debian's packages) for the run and asks
its sbatch with --test-only too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

OUTPUTS: list[str] = []  # what each snakemake pass printed (for a failing test's message)
RECORDER = """#!{python}
import json, os, subprocess, sys
entry = {{"argv": sys.argv[1:]}}
real = os.environ.get("RECORD_SBATCH_REAL")
if real:
    p = subprocess.run([real, "--test-only", *sys.argv[1:]], capture_output=True, text=True)
    entry["test_only"] = {{"rc": p.returncode, "out": (p.stdout + p.stderr).strip()}}
with open(os.environ["RECORD_SBATCH_LOG"], "a") as fh:
    fh.write(json.dumps(entry) + "\\n")
sys.stderr.write("recorded, not submitted\\n")
sys.exit(1)
"""


def option(argv: list[str], *names: str) -> str | None:
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(n + "="):
                return a[len(n) + 1 :]
    return None


def gpus(argv: list[str]) -> int:
    g = option(argv, "--gpus", "-G")
    if g:
        return int(g.split(":")[-1])
    gres = option(argv, "--gres") or ""
    m = re.search(r"gpu(?::\w+)?:(\d+)", gres)
    return int(m.group(1)) if m else 0


def members(argv: list[str]) -> list[str]:
    """The rule jobs inside, "rule:run:chunk[:group]", as the wrapped snakemake's --target-jobs
    names them (for a single job as for a group job)."""
    wrap = option(argv, "--wrap") or ""
    found = re.findall(r"'(pretrain|transfer):run=(\w+),chunk=(\d+-\d+)(?:,group=(\w+))?'", wrap)
    return sorted(":".join(filter(None, m)) for m in found)


def stand_in_pretraining(work: Path, jobs: list[str]) -> bool:
    """Empty files for the outputs of the recorded pretraining jobs, so that their transfer jobs
    become ready; False when there is none to make."""
    shutil.rmtree(work / ".snakemake" / "incomplete", ignore_errors=True)  # left by the refused submissions
    made = False
    for study in (work / "results").glob("*"):
        for job in jobs:
            rule, run, chunk = job.split(":")[:3]
            if rule != "pretrain":
                continue
            for ext in (".safetensors", ".trajectory.parquet", ".attention.parquet"):
                out = study / "pretrain" / run / f"seeds{chunk}{ext}"
                if not out.exists():
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.touch()
                    made = True
    return made


def capture(
    config: Path,
    device: str = "cpu",
    real_sbatch: str | None = None,
    extra: tuple[str, ...] = (),
    timeout: int = 600,
) -> list[dict]:
    """Every sbatch call of the study (one per Slurm job), parsed."""
    with tempfile.TemporaryDirectory(prefix="slurm-requests-") as tmp:
        tmp = Path(tmp)
        bindir = tmp / "bin"
        bindir.mkdir()
        (bindir / "sbatch").write_text(RECORDER.format(python=sys.executable))
        (bindir / "sbatch").chmod(0o755)
        log = tmp / "sbatch.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SNAKEMAKE_PROFILE"))}
        env |= {"PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}", "RECORD_SBATCH_LOG": str(log)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
        if real_sbatch:
            env["RECORD_SBATCH_REAL"] = real_sbatch
        work = tmp / "work"
        work.mkdir()
        entries: dict[tuple, dict] = {}
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(work),
            "--configfile",
            str(Path(config).resolve()),
            "--executor",
            "slurm",
            "--workflow-profile",
            str(REPO / "workflow" / "profiles" / "slurm"),
            "--slurm-status-command",
            "squeue",
            "--slurm-init-seconds-before-status-checks",
            "1",
            "--until",
            "pretrain",
            "transfer",
            "--retries",
            "0",
            "--keep-going",
            "--config",
            f"device={device}",
            *extra,
        ]
        calls: list[list[str]] = []
        for _ in range(2):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            OUTPUTS.append(proc.stdout + proc.stderr)
            if not log.exists():
                said = proc.stdout[-3000:] + proc.stderr[-3000:]
                raise RuntimeError(f"no sbatch call recorded; snakemake said:\n{said}")
            seen = {m for argv in calls for m in members(argv)}
            new = [json.loads(line) for line in log.read_text().splitlines()]
            log.unlink()
            calls += [e["argv"] for e in new if not set(members(e["argv"])) & seen]
            entries.update({tuple(e["argv"]): e for e in new})
            if not stand_in_pretraining(work, [m for argv in calls for m in members(argv)]):
                break
        rows = []
        for argv in calls:
            entry = entries[tuple(argv)]
            rows.append(
                {
                    "argv": argv,
                    "members": members(argv),
                    "time_min": int(option(argv, "-t", "--time") or 0),
                    "mem_mb": int(option(argv, "--mem") or 0),
                    "cpus": int(option(argv, "--cpus-per-task", "-c") or 1),
                    "gpus": gpus(argv),
                    "test_only": entry.get("test_only"),
                }
            )
        return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", type=Path, nargs="+")
    ap.add_argument("--device", nargs="+", default=["cpu"], choices=["cpu", "cuda"])
    ap.add_argument("--local-cluster", action="store_true", help="start the test's single-node Slurm for the run")
    ap.add_argument("--test-only-with", metavar="SBATCH", help="also ask this real sbatch with --test-only")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        real = args.test_only_with
        if args.local_cluster:
            sys.path.insert(0, str(Path(__file__).parent))
            from slurm_cluster import SlurmCluster, make_scratch

            stack.enter_context(SlurmCluster(make_scratch()))
            real = real or shutil.which("sbatch")
        for config in args.configs:
            for device in args.device:
                report(config, device, capture(config, device, real))


def report(config: Path, device: str, rows: list[dict]) -> None:
    print(f"{config} device={device}: {len(rows)} Slurm jobs")
    for r in sorted(rows, key=lambda r: -r["time_min"]):
        verdict = "" if r["test_only"] is None else f"  test-only rc={r['test_only']['rc']}"
        print(
            f"  --time={r['time_min']:>5} min  --mem={r['mem_mb']:>6} MB  cpus={r['cpus']:>2}  gpus={r['gpus']}  "
            f"{len(r['members']):>2} jobs{verdict}",
            flush=True,
        )


if __name__ == "__main__":
    main()
