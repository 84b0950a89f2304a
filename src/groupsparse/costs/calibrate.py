"""The cost model calibrated on the running machine: a few seconds of real work, timed.

The coefficients in costs.yaml were fitted on one machine; another (or the same one under load)
runs the same work faster or slower. :func:`measure` times a small pretraining job and a small
transfer job in this process and divides each by the model's prediction for the same work: two
scale factors. The workflow's onstart runs it (``groupsparse calibrate``, a subprocess, so that
snakemake never imports torch), prints "about X min on this machine" for the whole study and
writes every job's calibrated prediction to results/<study>/estimate.json, which ``groupsparse
status`` reads for its time-left line.

Torch is imported inside :func:`measure` only; the rest is torch- and numpy-free.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..data.kinds import kind_of

CALIBRATION_FILE = "calibration.json"
ESTIMATE_FILE = "estimate.json"
MAX_AGE_S = 3600  # a calibration older than this (or from another host/thread count) is redone
# The probes: small enough for a few seconds on one core, large enough that startup is not all of it.
PRETRAIN_PROBE = {
    "study_seed": 1,
    "task_name": "calibration",
    "task": {"d": 10, "D": 8},
    "pretrain": {"steps": 1000, "batch": 512, "eval_size": 512, "record_every": 100, "attention_checkpoints": 2},
}
REPEATS = 3  # the median of three: one run on a shared machine can be 2x off
TRANSFER_PROBE = {"test_size": 1000, "selection": "fixed", "downstream": ["transfer"]}
TRANSFER_METHODS = ["pretrained_finetune", "logreg"]
TRANSFER_SIZES = [64, 256, 1024]


def measure(threads: int = 1) -> dict:
    """Time the probes here; -> scale factors (measured / predicted) and what they came from."""
    import tempfile

    import scipy.optimize  # noqa: F401  (what a transfer job loads before its first fit)
    import sklearn.linear_model  # noqa: F401
    import torch

    from ..config.specs import RunSpec
    from ..io import files as io
    from ..training.pretrain import Trainer, checkpoint_payload
    from ..transfer.runner import run_transfer
    from ..transfer.spec import TransferSpec

    io.provenance("calibration")  # every job writes provenance: git commit and status, package versions
    ready = time.time()  # a job's process is this far once python, its libraries and provenance are done
    torch.set_num_threads(max(1, threads))
    spec = RunSpec.from_dict(PRETRAIN_PROBE)
    warm = RunSpec.from_dict(PRETRAIN_PROBE | {"pretrain": PRETRAIN_PROBE["pretrain"] | {"steps": 10}})
    Trainer(warm, [0]).run()  # imports and first-call costs: the model's c0 carries them
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        result = Trainer(spec, [0]).run()
        times.append(time.perf_counter() - t0)
    pretrain_s = statistics.median(times)

    tspec = TransferSpec.from_dict(TRANSFER_PROBE)
    with tempfile.TemporaryDirectory(prefix="groupsparse-calibrate.") as tmp:
        checkpoint = Path(tmp) / "probe.safetensors"
        io.save_checkpoint(checkpoint, *checkpoint_payload(spec, result, [0]))
        run_transfer(spec, tspec, checkpoint, TRANSFER_METHODS, TRANSFER_SIZES[:1])  # warm-up
        times = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            run_transfer(spec, tspec, checkpoint, TRANSFER_METHODS, TRANSFER_SIZES)
            times.append(time.perf_counter() - t0)
        transfer_s = statistics.median(times)
    predicted_pretrain, predicted_transfer = probe_predictions(threads)
    return {
        "host": socket.gethostname(),
        "threads": threads,
        "time": time.time(),
        "ready_time": ready,
        "pretrain_measured_s": pretrain_s,
        "pretrain_predicted_s": predicted_pretrain,
        "pretrain_scale": pretrain_s / max(predicted_pretrain, 1e-6),
        "transfer_measured_s": transfer_s,
        "transfer_predicted_s": predicted_transfer,
        "transfer_scale": transfer_s / max(predicted_transfer, 1e-6),
    }


def probe_predictions(threads: int = 1) -> tuple[float, float]:
    """The cost model's seconds for the two probes' timed work (its fixed parts c0, j0 left out): the
    denominators of the scale factors. Torch-free, so a finished run's estimate can be recomputed with
    the current model from the probe seconds its calibration measured (``rescaled``)."""
    from ..config.specs import RunSpec
    from .model import coefficients, pretrain_cost, transfer_cost

    c = coefficients()
    spec = RunSpec.from_dict(PRETRAIN_PROBE).to_dict()
    pretrain = pretrain_cost(spec, 1, "cpu", threads).cpu_s - c["pretrain"]["c0_s"]
    transfer = transfer_cost(spec, TRANSFER_PROBE, TRANSFER_METHODS, TRANSFER_SIZES, 1, "cpu", threads).cpu_s
    return pretrain, transfer - c["transfer_job"]["j0_s"]


def rescaled(cal: dict) -> dict:
    """A calibration's measured probe seconds divided by the current cost model's predictions for them."""
    pretrain, transfer = probe_predictions(cal["threads"])
    return cal | {
        "pretrain_predicted_s": pretrain,
        "pretrain_scale": cal["pretrain_measured_s"] / max(pretrain, 1e-6),
        "transfer_predicted_s": transfer,
        "transfer_scale": cal["transfer_measured_s"] / max(transfer, 1e-6),
    }


def load_or_measure(results: str | os.PathLike, threads: int = 1) -> dict:
    """The calibration in results/<study>/calibration.json if fresh (same host and threads, under an
    hour old), else a new one from ``groupsparse calibrate`` in a subprocess (torch stays out of
    the caller)."""
    path = Path(results) / CALIBRATION_FILE
    try:
        cal = json.loads(path.read_text())
        if cal["host"] == socket.gethostname() and cal["threads"] == threads and time.time() - cal["time"] < MAX_AGE_S:
            return cal
    except (OSError, ValueError, KeyError, TypeError):
        pass
    cmd = [sys.executable, "-m", "groupsparse.cli", "calibrate", "--threads", str(threads), "--out", str(path)]
    launched = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"groupsparse calibrate exited {done.returncode}")
    cal = json.loads(path.read_text())
    # a job's fixed start (interpreter, torch, the package): from launch to the probe's first line
    cal["startup_s"] = max(cal["ready_time"] - launched, 0.0)
    path.write_text(json.dumps(cal, indent=1) + "\n")
    return cal


# The jobs the cost model leaves out (tables and figures): their wall seconds beyond the process
# start in the tiny study's and tests/workflow/test_report.py's study's runs (benchmarks/*.tsv less
# the measured start), scaled like pretraining. Small beside a real study's training, most of a tiny one.
# review reads a few tables, like check_tables: its process start is all of it.
SMALL_JOB_S = {
    "check_tables": 0.0,
    "review": 0.0,
    "aggregate": 2.0,
    "figures": 4.0,
    "image_figures": 10.0,
    "scaling": 40.0,
}


def job_predictions(runs: dict, config: dict, cal: dict) -> dict[str, float]:
    """Calibrated wall seconds of every job, keyed as their logs are (pretrain/<run>/seeds<chunk>,
    transfer/<run>/seeds<chunk>/<group>, aggregate, figures/<run>, ...)."""
    from .model import coefficients, pretrain_cost, transfer_cost

    jobs = config["jobs"]  # a filled config (study.preflight): the schema's defaults
    device = config["device"]
    pt, tt = jobs["pretrain_threads"], jobs["transfer_threads"]
    c = coefficients()
    start = cal.get("startup_s", 0.0)
    # the model's fixed part of a job (c0, j0) is replaced by the start measured here; the rest scales
    pretrain_s = lambda cost: start + max(cost.wall_s - c["pretrain"]["c0_s"], 0.0) * cal["pretrain_scale"]  # noqa: E731
    transfer_s = lambda cost: start + max(cost.wall_s - c["transfer_job"]["j0_s"], 0.0) * cal["transfer_scale"]  # noqa: E731
    out = {}
    for name, run in runs.items():
        for chunk in run.chunks:
            seeds = len(run.chunk_seeds(chunk))
            out[f"pretrain/{name}/seeds{chunk}"] = pretrain_s(pretrain_cost(run.spec, seeds, device, pt))
            if run.transfer is None:
                continue
            for group, methods in run.method_groups.items():
                cost = transfer_cost(run.spec, run.transfer, methods, run.sizes, seeds, device, tt)
                out[f"transfer/{name}/seeds{chunk}/{group}"] = transfer_s(cost)
    small = {"check_tables": "check_tables", "aggregate": "aggregate", "review": "review"}
    for name, run in runs.items():
        if run.role == "task":
            small[f"figures/{name}"] = "figures"
            if run.transfer is not None:
                small[f"figures/{name}.transfer"] = "figures"
            for rule in kind_of(run.spec["task"]).figure_rules:  # a kind's own figures (data/kinds.py)
                small[f"figures/{name}.{rule}"] = rule
    if any(run.role in ("scaling", "ablation") for run in runs.values()):
        small["scaling"] = "scaling"
    out |= {job: start + SMALL_JOB_S[kind] * cal["pretrain_scale"] for job, kind in small.items()}
    return out


def study_seconds(predictions: dict[str, float], cores: int, threads: int = 1) -> float:
    """Wall seconds for these jobs on ``cores``: training and transfer spread over the job slots
    (never less than the longest pretraining job followed by its longest transfer job), then the
    tables (check_tables, aggregate, scaling: one after another) and the figures (spread over the slots)."""
    if not predictions:
        return 0.0
    slots = max(1, cores // max(1, threads))
    chains, serial, figures = {}, 0.0, []
    for job, s in predictions.items():
        parts = job.split("/")
        if parts[0] in ("pretrain", "transfer"):
            key = tuple(parts[1:3])
            pre, tr = chains.get(key, (0.0, 0.0))
            chains[key] = (pre + s, tr) if parts[0] == "pretrain" else (pre, max(tr, s))
        elif parts[0] == "figures":
            figures.append(s)
        else:
            serial += s
    work = sum(p for p, _ in chains.values()) + sum(s for job, s in predictions.items() if job.startswith("transfer/"))
    n_jobs = sum(1 for job in predictions if job.split("/")[0] in ("pretrain", "transfer"))
    longest = max((p + t for p, t in chains.values()), default=0.0)
    training = max(work / max(1, min(slots, n_jobs)), longest) if n_jobs else 0.0
    drawing = max(sum(figures) / min(slots, len(figures)), max(figures)) if figures else 0.0
    return training + serial + drawing


def study_estimate_line(
    runs: dict, config: dict, cores: int, results: str | os.PathLike, to_run=None, n_jobs: int | None = None
) -> str:
    """One line for the start of a run (and for `groupsparse estimate`, in the same words); writes
    results/<study>/estimate.json for `groupsparse status`. ``to_run``: the jobs (keyed as their logs) the run
    will run, else those without a benchmark file; ``n_jobs``: the count to state (snakemake's, which also
    counts the spec jobs and the target), else theirs."""
    from ..io.files import write_text_atomic
    from ..io.progress import duration

    threads = config["jobs"]["pretrain_threads"]
    if config.get("device") == "cuda":
        return "estimate: no calibration for cuda (groupsparse estimate gives the uncalibrated GPU figures)"
    try:
        cal = load_or_measure(results, threads)
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
        return f"estimate unavailable: calibration failed ({exc})"
    predictions = job_predictions(runs, config, cal)
    write_text_atomic(
        Path(results) / ESTIMATE_FILE,
        json.dumps(
            {"cores": cores, "threads": threads, "written": time.time(), "calibration": cal, "jobs": predictions},
            indent=1,
        ),
    )
    benchmarks = Path(results) / "benchmarks"
    if to_run is None:
        to_run = {job: s for job, s in predictions.items() if not (benchmarks / f"{job}.tsv").is_file()}
    else:
        to_run = {job: predictions[job] for job in to_run if job in predictions}
    total = study_seconds(to_run, cores, threads)
    return (
        f"estimate: about {duration(total)} on this machine for the {len(to_run) if n_jobs is None else n_jobs} jobs "
        f"to run on {cores} cores (calibrated on this machine: job start {cal.get('startup_s', 0.0):.1f} s, "
        f"pretraining {cal['pretrain_scale']:.2f}x, fits {cal['transfer_scale']:.2f}x the cost model's reference)"
    )
