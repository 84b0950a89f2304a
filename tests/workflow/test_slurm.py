"""The study on a real single-node Slurm, through snakemake's official executor plugin.

tests/workflow/slurm_cluster.py starts munge, slurmctld and slurmd on loopback; the tiny config then runs
once with ``--executor slurm --workflow-profile workflow/profiles/slurm`` and once locally, and the two
must agree table for table: the executor must not change the science. Runs only when asked
(GROUPSPARSE_SLURM_TEST=1, or CI=true); skips (with the reason) where Slurm cannot be started,
unless CI is set, where it fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pandas as pd
import pytest
import yaml
from slurm_requests import OUTPUTS, capture

from groupsparse.io.files import TIMING_COLUMNS, read_parquet

from conftest import REPO
from slurm_cluster import (  # noqa: F401  (slurm_cluster is the fixture)
    MARKER,
    OPT_IN,
    SLURM_CONF,
    SlurmCluster,
    SlurmUnavailable,
    in_ci,
    make_scratch,
    pid_alive,
    slurm_cluster,
)

pytestmark = [pytest.mark.slurm, OPT_IN, pytest.mark.xdist_group("slurm")]  # one cluster, one worker

TINY = Path("configs") / "tiny.yaml"
SLURM_PROFILE = Path("workflow") / "profiles" / "slurm"
# On top of the shipped profile, for the test's one-node cluster (the command line beats profiles).
TEST_OVERRIDES = (
    "--slurm-status-command",
    "squeue",  # no slurmdbd, so no sacct; squeue sees jobs for MinJobAge=300 s
    "--slurm-init-seconds-before-status-checks",
    "3",  # jobs last seconds: poll soon
    "--max-status-checks-per-second",
    "10",
    "--slurm-keep-successful-logs",  # the test reads every job's Slurm log
    "--latency-wait",
    "5",  # one node, no shared file system lag
    "--retries",
    "0",  # a failure must fail the test, not be retried
)
# Not copied into the snapshot both runs use: outputs, caches, version control.
SNAPSHOT_IGNORE = shutil.ignore_patterns(
    ".git", "results", ".snakemake", "__pycache__", "*.egg-info", ".pytest_cache", "build", "dist", ".venv"
)
# A lost job or a status loop that never ends must not hang CI: SIGINT (snakemake cancels its
# Slurm jobs and exits), then SIGKILL 15 s later.
RUN_LIMIT_S = 300


@dataclass
class Run:
    workdir: Path
    returncode: int
    log: str
    seconds: float


@dataclass
class Started:
    workdir: Path
    proc: subprocess.Popen
    log: IO[str]
    start: float
    end: float | None = None


def snapshot(dest: Path) -> Path:
    """A copy of the repository for both runs: the same code and workflow even if the working
    tree changes while they run (the jobs import the package from it via PYTHONPATH)."""
    shutil.copytree(REPO, dest, ignore=SNAPSHOT_IGNORE, symlinks=True)
    return dest


def start_snakemake(repo: Path, workdir: Path, *args: str, limit_s: int = RUN_LIMIT_S) -> Started:
    """Start the workflow of ``repo`` on its tiny config in ``workdir`` under a hard time limit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SNAKEMAKE_PROFILE"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo / "src"), env.get("PYTHONPATH")]))
    cmd = [
        "timeout",
        "-s",
        "INT",
        "-k",
        "15",
        str(limit_s),
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(repo / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(repo / TINY),
        *args,
    ]
    log = open(workdir.with_name(workdir.name + ".log"), "w+")
    # Its own session, so the outer guard below can kill the whole run and nothing else.
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    started = Started(workdir, proc, log, time.monotonic())

    def note_end():
        started.proc.wait()
        started.end = time.monotonic()

    threading.Thread(target=note_end, daemon=True).start()
    return started


def finish(started: Started, limit_s: int = RUN_LIMIT_S) -> Run:
    try:
        started.proc.wait(timeout=limit_s + 60)  # outer guard, in case `timeout` itself hangs
    except subprocess.TimeoutExpired:
        os.killpg(started.proc.pid, signal.SIGKILL)  # the session holds only this run's processes
        started.proc.wait()
    end = started.end or time.monotonic()
    started.log.seek(0)
    text = started.log.read()
    started.log.close()
    return Run(started.workdir, started.proc.returncode, text, end - started.start)


def tail(run: Run, chars: int = 4000) -> str:
    return f"exit {run.returncode} after {run.seconds:.0f} s; log tail:\n{run.log[-chars:]}"


def is_timing(column: str) -> bool:
    """A timing column, or a statistic of one (``mean_fit_seconds``): differs run to run."""
    return column in TIMING_COLUMNS or column.endswith(tuple(f"_{c}" for c in TIMING_COLUMNS))


def result_tables(workdir: Path) -> dict[str, pd.DataFrame]:
    tables = {}
    for path in sorted((workdir / "results/tiny" / "tables").glob("*.parquet")):
        table = read_parquet(path)
        tables[path.name] = table.drop(columns=[c for c in table.columns if is_timing(c)])
    return tables


@dataclass
class SlurmStudy:
    run: Run
    jobs: dict[str, dict[str, str]]  # scontrol's record of every job, taken before the cluster stops
    queue_left: str


@pytest.fixture(scope="module")
def runs(slurm_cluster, tmp_path_factory) -> tuple[SlurmStudy, Run]:  # noqa: F811 (the fixture)
    """The tiny study through Slurm and, at the same time (Slurm's side mostly waits), locally."""
    repo = snapshot(tmp_path_factory.mktemp("snapshot") / "repo")
    local_dir = tmp_path_factory.mktemp("local_run")
    slurm_dir = tmp_path_factory.mktemp("slurm_run")
    local = start_snakemake(repo, local_dir, "--cores", "2")
    try:
        slurm = finish(
            start_snakemake(
                repo, slurm_dir, "--executor", "slurm", "--workflow-profile", str(repo / SLURM_PROFILE), *TEST_OVERRIDES
            )
        )
    finally:
        local_run = finish(local)
    unfinished = slurm_cluster.run(["squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING"], check=False)
    study = SlurmStudy(slurm, slurm_cluster.job_table(), unfinished.stdout.strip())
    print(
        f"\nslurm run: {len(study.jobs)} Slurm jobs, {slurm.seconds:.1f} s, exit {slurm.returncode}; "
        f"local run: {local_run.seconds:.1f} s, exit {local_run.returncode}"
    )
    return study, local_run


@pytest.fixture(scope="module")
def slurm_study(runs) -> SlurmStudy:
    return runs[0]


@pytest.fixture(scope="module")
def local_run(runs) -> Run:
    return runs[1]


def test_cluster_stops_its_daemons_and_restores_the_config():
    """Before the study's cluster starts: a cluster started and stopped leaves no daemon behind."""
    before = SLURM_CONF.read_bytes() if SLURM_CONF.exists() else None
    if before is not None and before.startswith(MARKER.encode()):
        before = None  # a killed run's own file: the cluster removes it (the real one is its backup)
    scratch = make_scratch()
    cluster = SlurmCluster(scratch)
    try:
        with cluster:
            pids = cluster.pids
            assert all(pid_alive(p) for p in pids.values()), pids
            assert cluster.node_state() == "idle"
            probe = cluster.run(["srun", "-N1", "-t", "1", "true"], check=False, timeout=60)
            assert probe.returncode == 0, probe.stderr
    except SlurmUnavailable as err:
        if in_ci():
            pytest.fail(f"CI is set, so Slurm must be available: {err}")
        pytest.skip(f"Slurm unavailable: {err}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert set(pids) == {"munged", "slurmctld", "slurmd"}
    assert not [n for n, p in pids.items() if pid_alive(p)], "daemons survived stop()"
    after = SLURM_CONF.read_bytes() if SLURM_CONF.exists() else None
    assert after == before, "/etc/slurm/slurm.conf was not restored"


def test_slurm_run_ends_by_itself(slurm_study):
    run = slurm_study.run
    assert run.returncode == 0, tail(run)  # 124/137 would mean the time limit stopped it
    assert "steps (100%) done" in run.log, tail(run)
    assert slurm_study.queue_left == "", f"jobs still queued after the run:\n{slurm_study.queue_left}"


def test_every_non_local_rule_ran_as_a_slurm_job(slurm_study, local_run):
    run, jobs = slurm_study.run, slurm_study.jobs
    assert run.returncode == 0, tail(run)
    # Job ids are numbers for single jobs, uuids for job groups.
    submitted = dict(re.findall(r"^Job (\S+) has been submitted with SLURM jobid (\d+)", run.log, re.M))
    remote_rules = Counter(re.findall(r"^\s*rule (\w+):$", run.log, re.M))
    local_rules = Counter(re.findall(r"^\s*localrule (\w+):$", run.log, re.M))

    # The compute rules went to Slurm, over the same DAG as the local run.
    assert {"pretrain", "transfer"} <= set(remote_rules), remote_rules
    assert remote_rules + local_rules == Counter(re.findall(r"^\s*(?:local)?rule (\w+):$", local_run.log, re.M))

    # Every submission is a job slurmctld ran to completion with exit 0 in this working directory.
    assert submitted, "no job was submitted to Slurm"
    assert set(jobs) == set(submitted.values()), "Slurm's jobs are not the ones snakemake submitted"
    ran_inside = Counter()
    for slurm_id in submitted.values():
        job = jobs[slurm_id]
        assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), job
        assert Path(job["WorkDir"]).resolve() == run.workdir.resolve(), job
        assert job["Comment"].startswith("rule_"), job  # the plugin names the rule or group here
        logs = list((run.workdir / ".snakemake" / "slurm_logs").glob(f"**/{slurm_id}.log"))
        assert len(logs) == 1, f"no Slurm log for job {slurm_id}"
        # Inside the allocation, the innermost snakemake (after srun) runs the job's rules itself.
        ran_inside += Counter(re.findall(r"^\s*localrule (\w+):$", logs[0].read_text(), re.M))
    # ...and every non-local rule execution of the run happened inside one of those jobs.
    assert ran_inside == remote_rules, (ran_inside, remote_rules)


def slurm_minutes(limit: str) -> int:
    """Slurm's [days-]hours:minutes:seconds as whole minutes."""
    days, _, clock = limit.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m + (s > 0)


def declared_jobs(log: str) -> dict[str, dict]:
    """Every rule job the outer snakemake printed: jobid -> rule, wildcards and resources."""
    jobs = {}
    for m in re.finditer(
        r"^\s*rule (\w+):\n(?:(?!^\s*rule ).*\n)*?\s*jobid: (\d+)\n(?:(?!^\s*rule ).*\n)*?"
        r"\s*wildcards: (.*)\n\s*resources: (.*)$",
        log,
        re.M,
    ):
        rule, jobid, wildcards, resources = m.groups()
        jobs[jobid] = {
            "rule": rule,
            "wildcards": dict(re.findall(r"(\w+)=([^,]+)", wildcards)),
            **{k: v for k, v in re.findall(r"(\w+)=([^,]+)", resources)},
        }
    return jobs


def group_members(log: str, declared: dict[str, dict]) -> dict[str, list[dict]]:
    """Snakemake group job id (a uuid) -> its member jobs, from the block that announces the group
    job up to the line that reports its submission."""
    groups = {}
    for m in re.finditer(
        r"Group job (\S+) \(jobs in lexicogr\. order\):\n(.*?)^Job (\S+) has been submitted", log, re.M | re.S
    ):
        ids = re.findall(r"^\s*jobid: (\d+)$", m.group(2), re.M)
        groups[m.group(3)] = [declared[i] for i in ids]
    return groups


def chain_minutes(members: list[dict]) -> int:
    """The time a group job needs on CPUs: per (run, chunk) chain its pretraining job then its
    transfer jobs side by side (the longest), chains side by side: the longest chain; pretraining
    and transfers without their partner in the group count as chains of their own."""
    chains: dict[tuple, dict[str, int]] = {}
    for job in members:
        key = (job["wildcards"]["run"], job["wildcards"]["chunk"])
        c = chains.setdefault(key, {"pretrain": 0, "transfer": 0})
        c[job["rule"]] = max(c[job["rule"]], int(job["runtime"]))
    return max(c["pretrain"] + c["transfer"] for c in chains.values())


def test_slurm_jobs_got_the_resources_the_rules_declare(slurm_study):
    """The rules' mem_mb and runtime (scaled with the config) reach sbatch as --mem and --time.

    A single job gets exactly what its rule declares; a group job (the Slurm profile groups a
    run's pretraining with its transfer jobs) gets a time limit covering the SUM along each
    pretrain -> transfer chain inside it (not only its largest member), memory covering every
    member, and never more than the caps (jobs.max_runtime_min, jobs.max_mem_mb)."""
    run, jobs = slurm_study.run, slurm_study.jobs
    assert run.returncode == 0, tail(run)
    declared = declared_jobs(run.log)
    groups = group_members(run.log, declared)
    submitted = re.findall(r"^Job (\S+) has been submitted with SLURM jobid (\d+)", run.log, re.M)
    assert submitted
    for snakemake_id, slurm_id in submitted:
        job = jobs[slurm_id]
        mem, minutes = int(job["MinMemoryNode"].rstrip("M")), slurm_minutes(job["TimeLimit"])
        assert minutes <= 1440 and mem <= 64000, job  # the default caps
        if snakemake_id in declared:  # a single job
            want = declared[snakemake_id]
            assert mem == int(want["mem_mb"]), (want, job)
            assert minutes == int(want["runtime"]), (want, job)
        else:  # a group job, named by a uuid
            members = groups[snakemake_id]
            assert {m["rule"] for m in members} == {"pretrain", "transfer"}, members
            assert mem >= max(int(m["mem_mb"]) for m in members), (members, job)
            assert minutes >= chain_minutes(members), (members, job)


def test_slurm_and_local_runs_give_the_same_tables(slurm_study, local_run):
    assert local_run.returncode == 0, tail(local_run)
    assert slurm_study.run.returncode == 0, tail(slurm_study.run)
    local = result_tables(local_run.workdir)
    remote = result_tables(slurm_study.run.workdir)
    assert local, "the local run wrote no results/tables/*.parquet"
    assert sorted(remote) == sorted(local)
    for name, table in local.items():
        pd.testing.assert_frame_equal(remote[name], table, check_exact=True, obj=name)


# --- what the study asks of Slurm: the plugin's real sbatch lines, checked by Slurm itself ------
# slurm_requests.capture runs the workflow with a recorder as `sbatch`: it logs the plugin's
# argument vector, hands it to the real `sbatch --test-only` (Slurm checks it against this node
# and queues nothing), and fails the submission. This node has no GPU, so a GPU request is
# checked as: Slurm refuses it for the gres alone, and accepts the same line without --gpus=1.


def captured(config: Path, device: str, *extra: str) -> list[dict]:
    rows = capture(REPO / config, device, shutil.which("sbatch"), extra=extra, timeout=RUN_LIMIT_S)
    assert rows, OUTPUTS[-1][-3000:]
    return rows


def test_cpu_jobs_ask_for_no_gpu_and_slurm_accepts_them(slurm_cluster):  # noqa: F811
    rows = captured(TINY, "cpu")
    assert len(rows) == 1 and len(rows[0]["members"]) == 3, rows  # the tiny study: one Slurm job
    for r in rows:
        assert r["gpus"] == 0 and not any("gpu" in a for a in r["argv"] if not a.startswith("--wrap")), r
        assert r["test_only"]["rc"] == 0, r["test_only"]


def test_cuda_jobs_ask_for_exactly_one_gpu_grouped_or_not(slurm_cluster):  # noqa: F811
    grouped = captured(TINY, "cuda")
    single = captured(TINY, "cuda", "--group-components", "none=1")  # no `study=N`: nothing grouped
    assert len(grouped) == 1 and len(grouped[0]["members"]) == 3, grouped
    assert len(single) == 3 and all(len(r["members"]) == 1 for r in single), single
    for r in grouped + single:
        gpu_args = [a for a in r["argv"] if "gpu" in a and not a.startswith("--wrap")]
        assert gpu_args == ["--gpus=1"], r["argv"]
        assert r["test_only"]["rc"] != 0 and "gres" in r["test_only"]["out"], r["test_only"]
        probe = slurm_cluster.run(["sbatch", "--test-only", *[a for a in r["argv"] if a != "--gpus=1"]], check=False)
        assert probe.returncode == 0, probe.stderr
    # members take turns on the one GPU: the group's time is the sum of its members', memory the largest
    assert grouped[0]["time_min"] == sum(r["time_min"] for r in single)
    assert grouped[0]["mem_mb"] == max(r["mem_mb"] for r in single)
    assert grouped[0]["cpus"] == max(r["cpus"] for r in single)
    # the pool is per Slurm job (scope local), not a limit on Slurm jobs at once: the scheduler
    # starts all of the default study's GPU jobs (several Slurm jobs) in one round
    first = len(OUTPUTS)
    default = captured(Path("config.yaml"), "cuda")
    assert len(default) > 1 and all(r["gpus"] == 1 for r in default), default
    # (the first pass also runs the local spec jobs, in rounds of their own: look at every pass)
    rounds = [int(n) for out in OUTPUTS[first:] for n in re.findall(r"^Execute (\d+) jobs\.\.\.$", out, re.M)]
    assert len(default) in rounds, (rounds, OUTPUTS[-1][-3000:])


def test_runtime_cap_splits_slurm_jobs(slurm_cluster, tmp_path):  # noqa: F811
    """jobs.max_runtime_min under a chain's time: its pretraining and its transfer jobs go to
    separate Slurm jobs, each within the cap, every job in exactly one, and Slurm accepts them."""
    config = yaml.safe_load((REPO / TINY).read_text())
    whole = captured(TINY, "cpu")[0]["time_min"]
    config.setdefault("jobs", {})["max_runtime_min"] = cap = whole - 1
    capped = tmp_path / "tiny.yaml"
    capped.write_text(yaml.safe_dump(config))
    rows = captured(capped, "cpu")
    assert len(rows) == 2, rows
    assert all(r["time_min"] <= cap and r["test_only"]["rc"] == 0 for r in rows), rows
    members = [m for r in rows for m in r["members"]]
    assert sorted(members) == sorted(set(members)) and len(members) == 3, members


def test_without_accounting_the_run_stops_before_submitting(slurm_cluster, tmp_path):  # noqa: F811
    """This cluster has no accounting: `sacct` fails. Without --slurm-status-command squeue the
    plugin would never see a job end; the workflow stops first, in one line naming the flag."""
    before = slurm_cluster.job_ids()
    workdir = tmp_path / "work"
    workdir.mkdir()
    args = ("--executor", "slurm", "--workflow-profile", str(REPO / SLURM_PROFILE))
    run = finish(start_snakemake(REPO, workdir, *args, limit_s=120), limit_s=120)
    assert run.returncode not in (0, 124, 137), tail(run)
    lines = [ln for ln in run.log.splitlines() if "--slurm-status-command squeue" in ln]
    assert len(lines) == 1 and "accounting" in lines[0], tail(run)
    assert "has been submitted" not in run.log, tail(run)
    assert slurm_cluster.job_ids() == before
    assert run.seconds < 60, tail(run)
