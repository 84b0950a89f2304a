"""Cluster jobs within caps (groupsparse.costs.cluster): seed chunks shrink to fit
jobs.max_runtime_min, a job that cannot fit is refused before any job, runs are packed into Slurm
jobs under the caps, and GPU requests come from the GPU estimate. The real sbatch lines are
checked against a real Slurm in tests/workflow/test_slurm.py."""

from __future__ import annotations

import copy
import math

import pytest
import yaml

from groupsparse import costs
from groupsparse.study import preflight
from groupsparse.study.runs import expand

from conftest import REPO

SCHEMA = yaml.safe_load((REPO / "src/groupsparse/config/config.schema.yaml").read_text())
SHIPPED = ["config.yaml", "configs/tiny.yaml", "configs/paper.yaml", "configs/scaling.yaml"]
# (config, device) pairs that keep their layout under the caps below. Not generated: the full scaling
# grid on CPUs, whose D = 64 runs (1.5 D^3 steps) take over 10 h a seed on a CPU thread, so
# the caps chunk or refuse it by design (test_chunks_shrink... and the refusal test cover it); it is a
# GPU study.
FITTING = [(c, d) for c in SHIPPED for d in ("cpu", "cuda") if not (c.endswith("scaling.yaml") and d == "cpu")]


def filled(configfile: str, device: str = "cpu") -> dict:
    config = yaml.safe_load((REPO / configfile).read_text())
    config["device"] = device
    preflight.fill_defaults(config, SCHEMA)
    return config


def threads(config: dict) -> tuple[int, int]:
    return config["jobs"]["pretrain_threads"], config["jobs"]["transfer_threads"]


@pytest.mark.parametrize("configfile,device", FITTING)
def test_shipped_configs_keep_their_seed_chunks(configfile, device):
    """Under the default cap (24 h) no shipped study changes its layout, locally or on Slurm, except
    the full scaling grid on CPUs, whose cross-validated transfer at d = 40, D = 64 needs smaller chunks."""
    config = filled(configfile, device)
    runs = expand(copy.deepcopy(config))
    before = {name: list(run.chunks) for name, run in runs.items()}
    assert costs.fit_chunks(runs, device, *threads(config), config["jobs"]["max_runtime_min"]) == []
    assert {name: run.chunks for name, run in runs.items()} == before


def test_chunks_shrink_until_every_job_fits_the_cap():
    config = filled("configs/scaling.yaml")
    for section in ("scaling", "ablations"):  # pretraining chunks alone (transfer jobs have their own caps)
        config[section]["transfer"] = {"enabled": False}
    runs = expand(copy.deepcopy(config))
    name, run = max(
        runs.items(),
        key=lambda kv: costs.pretrain_request(kv[1], kv[1].chunks[0], "cpu", threads(config)[0])["runtime"],
    )
    whole = costs.pretrain_request(run, run.chunks[0], "cpu", threads(config)[0])["runtime"]
    one = costs.pretrain_request(run, "0-0", "cpu", threads(config)[0])["runtime"]
    assert one < whole
    cap = (one + whole) // 2
    assert costs.fit_chunks(runs, "cpu", *threads(config), cap) == []
    shrunk = runs[name]
    assert len(shrunk.chunks) > 1
    assert sorted(s for c in shrunk.chunks for s in shrunk.chunk_seeds(c)) == shrunk.seeds  # every seed, once
    for chunk in shrunk.chunks:
        reqs = costs.chain_requests(shrunk, chunk, "cpu", *threads(config))
        assert max(r["runtime"] for r in reqs.values()) <= cap


def test_a_job_over_the_cap_even_alone_is_refused_naming_the_key(tmp_path):
    config = yaml.safe_load((REPO / "configs" / "scaling.yaml").read_text())
    config.setdefault("jobs", {})["max_runtime_min"] = 10
    with pytest.raises(preflight.StudyRefused) as err:
        preflight.check_study(config, SCHEMA, results=str(tmp_path / "results"))
    message = str(err.value)
    assert "\n" not in message and "jobs.max_runtime_min = 10" in message and "one seed" in message


@pytest.mark.parametrize("configfile,device", FITTING)
def test_packed_slurm_jobs_stay_under_the_caps(configfile, device):
    config = filled(configfile, device)
    runs = expand(copy.deepcopy(config))
    cap_min, cap_mb = 600, 16000  # tighter than the defaults, so that packing has to work
    assert costs.fit_chunks(runs, device, *threads(config), cap_min) == []
    groups = costs.pack(runs, device, *threads(config), cap_min, cap_mb, 4)
    every = {k for run in runs.values() for c in run.chunks for k in costs.chain_requests(run, c, device, 1, 1)}
    assert set(groups) == every  # every pretraining and transfer job is in exactly one Slurm job
    rows = costs.slurm_jobs(runs, groups, device, *threads(config), cap_mb)
    for row in rows:
        assert row["chains"] <= 4
        assert row["jobs"] == 1 or (row["runtime"] <= cap_min and row["mem_mb"] <= cap_mb), row
        assert row["gpu"] == (device == "cuda"), row  # one GPU, never the sum


def test_cuda_members_take_turns_on_one_gpu_and_cpu_members_share_the_node():
    pre = {"runtime": 10, "mem_mb": 1000, "threads": 2, "gpu": 1}
    tr = {"runtime": 7, "mem_mb": 500, "threads": 1, "gpu": 1}
    jobs = {("pretrain", "a", "0-4", ""): pre, ("transfer", "a", "0-4", "x"): tr, ("transfer", "a", "0-4", "y"): tr}
    assert costs.group_request(jobs) == {"runtime": 24, "mem_mb": 1000, "threads": 2, "gpu": 1}
    cpu = {k: v | {"gpu": 0} for k, v in jobs.items()}
    assert costs.group_request(cpu) == {"runtime": 17, "mem_mb": 1000, "threads": 2, "gpu": 0}


def test_cuda_requests_come_from_the_gpu_estimate():
    """A cuda job's runtime is the GPU estimate with its margin, not the CPU time."""
    config = filled("configs/scaling.yaml", "cuda")
    runs = expand(copy.deepcopy(config))
    for run in runs.values():
        seeds = len(run.chunk_seeds(run.chunks[0]))
        gpu = costs.pretrain_cost(run.spec, seeds, "cuda")
        req = costs.pretrain_request(run, run.chunks[0], "cuda")
        assert not gpu.measured
        assert req["runtime"] == math.ceil(costs.GPU_TIME_MARGIN * gpu.wall_s / 60 + costs.TIME_FLOOR_MIN)
    largest = max(runs.values(), key=lambda r: costs.pretrain_cost(r.spec, 5, "cpu").cpu_s)
    cpu = costs.pretrain_request(largest, largest.chunks[0], "cpu")["runtime"]
    assert costs.pretrain_request(largest, largest.chunks[0], "cuda")["runtime"] < cpu / 10


def test_memory_requests_are_capped_at_max_mem_mb():
    config = filled("configs/scaling.yaml")
    runs = expand(copy.deepcopy(config))
    run = max(runs.values(), key=lambda r: costs.pretrain_request(r, r.chunks[0])["mem_mb"])
    full = costs.pretrain_request(run, run.chunks[0])["mem_mb"]
    assert costs.pretrain_request(run, run.chunks[0], max_mem_mb=full - 1)["mem_mb"] == full - 1
