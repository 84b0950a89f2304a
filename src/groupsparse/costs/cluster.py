"""Cluster jobs within caps: seed chunks small enough, and runs packed into Slurm jobs.

A Slurm job (snakemake "group job") holds some (run, seed chunk) chains, each a pretraining job
followed by its transfer jobs. Snakemake sizes a group job from its members, per toposort level
(pretraining, then transfer): on a CPU the members of a level run side by side (threads and
memory add up, the runtime is the longest member's); with ``device: cuda`` the Slurm profile gives
each group job a pool of one GPU (``resources: [gpu=1]``, scoped ``local``), so the members run
one after another on it (runtimes add up, threads and memory are the largest member's). The
levels' runtimes add up. :func:`group_request` reproduces that sum from the cost model, and
:func:`pack` fills Slurm jobs greedily (longest chain first, first fit) so none exceeds
``jobs.max_runtime_min`` or ``jobs.max_mem_mb`` nor holds more than ``runs_per_job`` chains; a
chain too long for one Slurm job is split into its pretraining and its transfer jobs, each
packed on its own. :func:`fit_chunks` first shrinks a run's seed chunks until every single job
fits the runtime cap (batched seeds give bit-identical numbers, so only file names change) and
reports any job that cannot fit even with one seed.
"""

from __future__ import annotations

from ..config.schema import default_of
from .requests import pretrain_request, run_key, transfer_request

__all__ = [
    "DEFAULT_MAX_RUNTIME_MIN",
    "chain_requests",
    "fit_chunks",
    "gpus_per_job",
    "group_request",
    "pack",
    "slurm_jobs",
]

DEFAULT_MAX_RUNTIME_MIN = default_of("jobs.max_runtime_min")  # 24 h: what most partitions accept


def chunk_names(n_seeds: int, per_job: int) -> list[str]:
    """Seed chunks "lo-hi" of at most ``per_job`` seeds (study.chunk_seeds, kept torch-free here)."""
    return [f"{lo}-{min(lo + per_job, n_seeds) - 1}" for lo in range(0, n_seeds, per_job)]


def gpus_per_job(device: str) -> int:
    """GPUs a job of a study on ``device`` asks for: one under cuda (a job never uses two), else none."""
    return int(device == "cuda")


def chain_requests(
    run, chunk: str, device: str, pretrain_threads: int, transfer_threads: int, max_mem_mb: int | None = None
) -> dict:
    """The requests of one (run, chunk) chain: its pretraining job and its transfer jobs, each a
    dict with runtime (min), mem_mb, threads and gpu, keyed (rule, run, chunk, method group)."""
    gpu = gpus_per_job(device)
    jobs = {("pretrain", run.name, chunk, ""): pretrain_request(run, chunk, device, pretrain_threads, max_mem_mb)}
    jobs[("pretrain", run.name, chunk, "")] |= {"threads": pretrain_threads, "gpu": gpu}
    if run.transfer is not None:
        for group in run.method_groups:
            req = transfer_request(run, chunk, group, device, transfer_threads, max_mem_mb)
            jobs[("transfer", run.name, chunk, group)] = req | {"threads": transfer_threads, "gpu": gpu}
    return jobs


def fit_chunks(
    runs: dict, device: str, pretrain_threads: int, transfer_threads: int, max_runtime_min: int | None
) -> list[str]:
    """Shrink seed chunks (in place) until every job's runtime request fits ``max_runtime_min``;
    one line per run whose jobs do not fit even with one seed per job."""
    if max_runtime_min is None:
        return []
    problems = []
    for run in runs.values():
        per = max(len(run.chunk_seeds(c)) for c in run.chunks)

        def longest(k: int, run=run) -> tuple[int, str]:
            reqs = chain_requests(run, f"0-{k - 1}", device, pretrain_threads, transfer_threads)
            key, req = max(reqs.items(), key=lambda kv: kv[1]["runtime"])
            return req["runtime"], key[0] + (f" ({key[3]})" if key[3] else "")

        minutes, job = longest(per)
        if minutes <= max_runtime_min:
            continue
        while per > 1 and minutes > max_runtime_min:
            per -= 1
            minutes, job = longest(per)
        if minutes > max_runtime_min:
            problems.append(
                f"{run_key(run)}: the {job} job of run {run.name} asks for {minutes} min even with one seed "
                f"per job, over jobs.max_runtime_min = {max_runtime_min}"
            )
        else:
            run.chunks = chunk_names(len(run.seeds), per)
    return problems


def group_request(jobs: dict, gpu_pool: int = 1) -> dict:
    """What snakemake asks Slurm for a group job of ``jobs`` ({key: request}): per level
    (a transfer job is level 1 when its pretraining job is in the group, else level 0),
    members side by side on a CPU, one after another on the GPU pool; levels in series."""
    levels: list[list[dict]] = [[], []]
    for key, req in jobs.items():
        inside = key[0] == "transfer" and ("pretrain", key[1], key[2], "") in jobs
        levels[int(inside)].append(req)
    total = {"runtime": 0, "mem_mb": 0, "threads": 0, "gpu": 0}
    for level in filter(None, levels):
        if any(r["gpu"] for r in level):  # one layer per gpu_pool members, layers in series
            layers = [level[i : i + gpu_pool] for i in range(0, len(level), gpu_pool)]
        else:
            layers = [level]
        runtime = sum(max(r["runtime"] for r in layer) for layer in layers)
        widths = {k: max(sum(r[k] for r in layer) for layer in layers) for k in ("mem_mb", "threads", "gpu")}
        total["runtime"] += runtime
        for k, v in widths.items():
            total[k] = max(total[k], v)
    return total


def pack(
    runs: dict,
    device: str,
    pretrain_threads: int,
    transfer_threads: int,
    max_runtime_min: int | None,
    max_mem_mb: int | None,
    runs_per_job: int,
) -> dict:
    """Slurm jobs for every pretraining and transfer job: {job key: group id "study_<i>"}."""
    units = []  # lists of job dicts that must share a Slurm job (a whole chain, or a split part)
    for run in runs.values():
        for chunk in run.chunks:
            chain = chain_requests(run, chunk, device, pretrain_threads, transfer_threads, max_mem_mb)
            if fits(group_request(chain), max_runtime_min, max_mem_mb):
                units.append(chain)
            else:
                units += [{k: v} for k, v in chain.items()]
    units.sort(key=lambda u: -group_request(u)["runtime"])
    bins: list[tuple[dict, int]] = []  # (jobs, chains held)
    for unit in units:
        for i, (jobs, held) in enumerate(bins):
            if held < runs_per_job and fits(group_request(jobs | unit), max_runtime_min, max_mem_mb):
                bins[i] = (jobs | unit, held + 1)
                break
        else:
            bins.append((dict(unit), 1))
    return {key: f"study_{i}" for i, (jobs, _) in enumerate(bins) for key in jobs}


def fits(req: dict, max_runtime_min: int | None, max_mem_mb: int | None) -> bool:
    return (max_runtime_min is None or req["runtime"] <= max_runtime_min) and (
        max_mem_mb is None or req["mem_mb"] <= max_mem_mb
    )


def slurm_jobs(
    runs: dict, groups: dict, device: str, pretrain_threads: int, transfer_threads: int, max_mem_mb: int | None = None
) -> list[dict]:
    """One row per planned Slurm job: its group id, chains, jobs and request."""
    members: dict[str, dict] = {}
    for run in runs.values():
        for chunk in run.chunks:
            reqs = chain_requests(run, chunk, device, pretrain_threads, transfer_threads, max_mem_mb)
            for key, req in reqs.items():
                members.setdefault(groups[key], {})[key] = req
    rows = []
    for gid, jobs in sorted(members.items(), key=lambda kv: int(kv[0].split("_")[1])):
        req = group_request(jobs)
        rows.append({"group": gid, "jobs": len(jobs), "chains": len({k[1:3] for k in jobs})} | req)
    return rows
