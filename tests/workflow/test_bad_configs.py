"""Bad studies fail before any job runs, name the key and the allowed values, and leave the
results of an earlier run exactly as they were (bytes and modification times).

Every case is a real `snakemake --cores 1` (not a dry run) in the folder of a finished run:
a process running snakemake's own command-line entry point, forked from one parent that
imported snakemake once (a second of imports saved per case), four at a time; each case's
exit status and output are then checked on their own.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import snakemake_cmd, snapshot, tiny_config

TINY = tiny_config()
# a traceback or a job start would show one of these; a parse-time refusal shows none
JOB_MARKERS = ("Select jobs to execute", "rule pretrain", "localrule", "Traceback")

pytestmark = pytest.mark.xdist_group("bad_configs")  # its module fixtures run once, on one worker


def snakemake_args(workdir: Path, *configfiles: Path, extra=()) -> list[str]:
    return snakemake_cmd(workdir, *configfiles, extra=extra, cores=1)[1:]  # without the program name


def snakemake(workdir: Path, *configfiles: Path, extra=(), timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["snakemake", *snakemake_args(workdir, *configfiles, extra=extra)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# Runs snakemake.cli.main (what the `snakemake` command runs) in forked children, 4 at a time;
# argv[1]: JSON {case: [snakemake arguments, output file]}; prints JSON {case: exit status}.
FORKING_RUNNER = """
import json, os, sys
import snakemake.cli
queue, running, status = list(json.loads(sys.argv[1]).items()), {}, {}
while queue or running:
    while queue and len(running) < 4:
        name, (argv, out) = queue.pop(0)
        pid = os.fork()
        if pid == 0:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            try:
                snakemake.cli.main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        running[pid] = name
    pid, wait_status = os.wait()
    status[running.pop(pid)] = os.waitstatus_to_exitcode(wait_status)
print(json.dumps(status))
"""


def cifar_folder(root: Path, missing: tuple[str, ...] = ()) -> Path:
    """A cifar-10-batches-py folder whose files exist (contents never read at parse time)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch"):
        if name not in missing:
            (folder / name).write_bytes(b"not read at parse time")
    return folder


def _a_file(path: Path) -> Path:
    path.write_text("not a folder\n")
    return path


def images_task(c, **task):
    c["tasks"]["base"]["task"] = {
        "kind": "images",
        "dataset": "cifar10",
        "D": 4,
        "d": 48,
        "classes": ["cat", "dog"],
        "transfer_classes": ["ship", "truck"],
        **task,
    }
    c["pretrain"]["sampling"] = "iid"


def setp(*path_and_value):
    """A mutation that sets config[path...] = value."""
    *path, key, value = path_and_value

    def mutate(c, tmp):
        node = c
        for part in path:
            node = node[part]
        node[key] = value

    return mutate


# id -> (mutation of the tiny study, strings the error must contain: the key, the allowed values)
BAD_CONFIGS = {
    "unknown_top_level_key": (setp("surprise", 1), ["surprise", "unknown key", "allowed keys: ablations, device"]),
    "unknown_pretrain_key": (setp("pretrain", "stepz", 10), ["pretrain.stepz", "unknown key", "steps"]),
    "unknown_task_key": (setp("tasks", "base", "task", "dd", 3), ["tasks.base.task.dd", "allowed keys", "sigma_x"]),
    "steps_wrong_type": (setp("pretrain", "steps", "many"), ["pretrain.steps", "'many'", "integer >= 1"]),
    "eta_wrong_type": (setp("pretrain", "eta", "fast"), ["pretrain.eta", "'fast'", "number > 0"]),
    "steps_zero": (setp("pretrain", "steps", 0), ["pretrain.steps", "integer >= 1"]),
    "batch_negative": (setp("pretrain", "batch", -4), ["pretrain.batch", "integer >= 2"]),
    "seeds_zero": (setp("pretrain", "seeds", 0), ["pretrain.seeds", "integer >= 1"]),
    "d_zero": (setp("tasks", "base", "task", "d", 0), ["tasks.base.task.d", "integer >= 1"]),
    "threads_zero": (setp("jobs", "pretrain_threads", 0), ["jobs.pretrain_threads", "integer >= 1"]),
    "eta_zero": (setp("pretrain", "eta", 0), ["pretrain.eta", "number > 0"]),
    "eta_negative": (setp("pretrain", "eta", -0.5), ["pretrain.eta", "number > 0"]),
    "j_star_not_below_D": (setp("tasks", "base", "task", "j_star", 4), ["tasks.base.task.j_star", "0..3", "D=4"]),
    "odd_batch_antithetic": (setp("pretrain", "batch", 129), ["pretrain.batch", "even", "antithetic"]),
    "odd_eval_size": (setp("pretrain", "eval_size", 255), ["pretrain.eval_size", "even"]),
    "sampling_unknown": (setp("pretrain", "sampling", "sobol"), ["pretrain.sampling", "antithetic, iid"]),
    "on_diverge_unknown": (setp("pretrain", "on_diverge", "ignore"), ["pretrain.on_diverge", "record, fail"]),
    "device_unknown": (setp("device", "tpu"), ["device", "'tpu'", "cpu, cuda"]),
    "label_noise_half": (
        setp("tasks", "base", "task", "label_noise", 0.5),
        ["tasks.base.task.label_noise", "number >= 0 and < 0.5"],
    ),
    "tasks_not_a_mapping": (setp("tasks", None), ["tasks", "None", "allowed: object"]),
    "task_name_not_identifier": (
        lambda c, tmp: c["tasks"].__setitem__("1base", c["tasks"].pop("base")),
        ["tasks", "'1base'", "string matching ^[A-Za-z]"],
    ),
    "methods_empty": (setp("transfer", "methods", []), ["transfer.methods", "at least 1"]),
    "method_unknown": (
        lambda c, tmp: (
            c["transfer"]["methods"].append("magic"),
            c["transfer"]["method_groups"]["baselines"].append("magic"),
        ),
        ["transfer.methods", "'magic'", "allowed: pretrained_finetune, pretrained_finetune_v0, "],
    ),
    "method_in_no_group": (
        lambda c, tmp: c["transfer"]["method_groups"]["baselines"].remove("logreg"),
        ["transfer.method_groups", "logreg", "no group"],
    ),
    "sizes_not_increasing": (setp("transfer", "sizes", [32, 8, 128]), ["transfer.sizes", "strictly increasing"]),
    "sizes_repeated": (setp("transfer", "sizes", [8, 8, 128]), ["transfer.sizes", "strictly increasing"]),
    "sizes_above_max_n": (lambda c, tmp: c["transfer"].__setitem__("max_n", 64), ["transfer.sizes", "max_n = 64"]),
    "transfer_selection_unknown": (
        setp("transfer", "selection", "guess"),
        ["transfer.selection", "'guess'", "fixed, cv"],
    ),
    "hyperparameters_unknown_method": (
        setp("transfer", "hyperparameters", {"magic": {"lr": 0.1}}),
        ["transfer.hyperparameters.magic", "unknown method", "pretrained_finetune"],
    ),
    "scaling_enabled_without_D_grid": (
        setp("scaling", {"enabled": True}),
        ["scaling.D_grid", "required key is missing when scaling.enabled is true"],
    ),
    "scaling_analysis_method_unknown_with_scaling_off": (
        setp("scaling", {"enabled": False, "analysis": {"methods": ["magic"]}}),
        ["scaling.analysis.methods[0]", "'magic'", "logreg"],
    ),
    "cifar_path_empty": (lambda c, tmp: images_task(c), ["tasks.base.task.path", "cifar-10-batches-py"]),
    "cifar_path_a_file": (  # a missing folder is fetched (test_fetch.py); a file in its place is refused
        lambda c, tmp: images_task(c, path=str(_a_file(tmp / "not_a_folder"))),
        ["tasks.base.task.path", "not_a_folder", "is not a folder", "cifar-10-batches-py"],
    ),
    "cifar_path_incomplete": (
        lambda c, tmp: images_task(c, path=str(cifar_folder(tmp / "partial", ("data_batch_3",)))),
        ["tasks.base.task.path", "missing data_batch_3"],
    ),
}


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    """A finished tiny study (pretraining and tables) whose results must survive every bad config."""
    work = tmp_path_factory.mktemp("earlier")
    cfg = copy.deepcopy(TINY) | {"transfer": {"enabled": False}}
    cfg["pretrain"] |= {"steps": 20}
    path = work / "earlier.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = snakemake(work, path, extra=["results/tiny/tables/pretrain_summary.parquet"])
    assert res.returncode == 0, res.stderr[-3000:]
    return work, snapshot(work / "results")


@pytest.fixture(scope="module")
def bad_runs(earlier_run, tmp_path_factory):
    """Every bad config tried in the earlier run's folder; -> {id: CompletedProcess}."""
    work, _ = earlier_run
    cases = {}
    for name, (mutate, _) in BAD_CONFIGS.items():
        tmp = tmp_path_factory.mktemp(name)
        cfg = copy.deepcopy(TINY)
        mutate(cfg, tmp)
        path = tmp / "bad.yaml"
        path.write_text(yaml.safe_dump(cfg))
        # snakemake merges a --configfile into the Snakefile's config.yaml (dicts key by key),
        # so each case is the tiny study with one thing wrong; a key cannot be deleted this way
        cases[name] = (snakemake_args(work, path), str(tmp / "snakemake.out"))
    runner = subprocess.run(
        [sys.executable, "-c", FORKING_RUNNER, json.dumps(cases)], capture_output=True, text=True, timeout=600
    )
    assert runner.returncode == 0, runner.stderr[-3000:]
    status = json.loads(runner.stdout.splitlines()[-1])
    return {
        name: subprocess.CompletedProcess(argv, status[name], Path(out).read_text(), "")
        for name, (argv, out) in cases.items()
    }


def test_at_least_fifteen_bad_configs_are_tried():
    assert len(BAD_CONFIGS) >= 15


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_fails_before_any_job_and_names_the_key(case, bad_runs, earlier_run):
    res = bad_runs[case]
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-2000:]
    first = next((line for line in out.splitlines() if "invalid configuration" in line or "cannot run" in line), "")
    for needle in BAD_CONFIGS[case][1]:
        assert needle in first, f"{needle!r} not in the error line {first!r}\n{out[-2000:]}"
    assert not re.search(r"\b(\w+)\.\1\.", first), f"a key path with a doubled part: {first!r}"
    for marker in JOB_MARKERS:
        assert marker not in out, f"{marker!r}: a job started or the error was a traceback\n{out[-2000:]}"


def test_earlier_results_are_untouched(bad_runs, earlier_run):
    work, before = earlier_run
    assert all(r.returncode != 0 for r in bad_runs.values())
    assert snapshot(work / "results") == before  # same files, same bytes, same mtimes


def _unwritable_results(work: Path):
    """Make ``work/results`` refuse writes, as this user can; -> undo function, or skip."""
    results = work / "results/tiny"
    if os.geteuid() != 0:
        results.chmod(0o555)
        return lambda: results.chmod(0o755)
    # root writes through permission bits; the immutable attribute stops root too
    chattr = shutil.which("chattr")
    if chattr and subprocess.run([chattr, "+i", str(results)], capture_output=True).returncode == 0:
        return lambda: subprocess.run([chattr, "-i", str(results)], check=True)
    pytest.skip("running as root on a file system without chattr +i: cannot make a folder unwritable")


def test_unwritable_results_folder_fails_before_any_job(earlier_run, tmp_path):
    work, before = earlier_run
    good = tmp_path / "good.yaml"
    cfg = copy.deepcopy(TINY) | {"transfer": {"enabled": False}}
    cfg["pretrain"] |= {"steps": 30}  # would rerun pretraining if it were allowed to start
    good.write_text(yaml.safe_dump(cfg))
    undo = _unwritable_results(work)
    try:
        res = snakemake(work, good)
    finally:
        undo()
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "results folder is not writable" in out and str(work / "results/tiny") in out, out[-2000:]
    assert not any(m in out for m in JOB_MARKERS), out[-2000:]
    assert snapshot(work / "results") == before


def test_results_folder_that_is_a_file_fails_before_any_job(tmp_path):
    (tmp_path / "results").write_text("a file where the results folder should be\n")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(copy.deepcopy(TINY)))
    res = snakemake(tmp_path, good)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "the results folder is a file" in out and str(tmp_path / "results") in out, out[-2000:]
    assert not any(m in out for m in JOB_MARKERS), out[-2000:]
    assert (tmp_path / "results").read_text() == "a file where the results folder should be\n"


@pytest.mark.parametrize("where", ["tables", "tables/summary.csv"])
def test_a_study_path_of_the_wrong_type_fails_before_any_job_naming_it(where, tmp_path):
    """results/<study>/tables as a file (a folder goes there), or a table's path as a folder."""
    path = tmp_path / "results" / "tiny" / where
    path.parent.mkdir(parents=True)
    path.mkdir() if where.endswith(".csv") else path.write_text("in the way\n")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(copy.deepcopy(TINY)))
    res = snakemake(tmp_path, good)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    line = next(x for x in out.splitlines() if "cannot run the study" in x)
    assert str(path) in line and ("but it is a file" in line or "but it is a folder" in line), line
    assert not any(m in out for m in JOB_MARKERS), out[-2000:]
    assert sorted(p.name for p in (tmp_path / "results" / "tiny").iterdir()) == ["tables"]


def test_a_complete_cifar_folder_passes_the_parse_time_check(tmp_path):
    """The CIFAR cases above fail because of the path, not because image tasks are refused."""
    cfg = copy.deepcopy(TINY)
    images_task(cfg, path=str(cifar_folder(tmp_path / "data")))
    path = tmp_path / "images.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = snakemake(tmp_path / "wd", path, extra=["-n"])
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]
    assert "pretrain" in res.stdout
