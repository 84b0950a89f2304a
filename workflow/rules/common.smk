# Helpers shared by the rules: config validation, the run table, file lists, resources.
import json
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# The package lives in src/; make it importable at parse time even without `pip install -e`.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from groupsparse import costs  # noqa: E402  (torch-free
from groupsparse.analysis import settings as analysis_settings
from groupsparse.config.schema import study_schema
from groupsparse.costs import calibrate  # torch-free: its probe runs in a subprocess
from groupsparse.data import kinds
from groupsparse.io import files as io
from groupsparse.io import report as report_text
from groupsparse.io import tables as names
from groupsparse.study import jobstate, outputs, preflight, stopping
from groupsparse.study.jobs import KIND_FIGURE_RULES, has_analysis, spec_stems
from groupsparse.study.jobs import study_jobs as study_jobs_of
from groupsparse.study.runs import is_check_variant
from snakemake.io import apply_wildcards, is_flagged

# Config files read strictly, schema (with finite numbers and true integers), defaults filled in,
# cross-field rules, names that must refer to runs or methods, input files, a writable results
# folder: all before any job, each problem one line naming the key, file or value.
_schema = study_schema()  # the package's schema file (workflow/schemas/ links to it)
try:
    # Each study writes under results/<study_name>/ only, so two studies never overwrite or mix.
    STUDY_NAME = preflight.study_name(config, workflow.configfiles)
    R = f"results/{STUDY_NAME}"
    RUNS = preflight.check_study(
        config, _schema, config_files=workflow.configfiles, results=R
    )
except preflight.StudyRefused as exc:
    # one line, no WorkflowError header or File line: SystemExit passes snakemake's wrapping
    print(f"snakemake: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(1) from None

STUDY_JSON = json.dumps(config, sort_keys=True, separators=(",", ":"))


# Specs travel by file, not inline on the shell line: results/<study>/specs/<name>.<hash>.json, named
# by the hash of its bytes and written by a `spec` job (workflow/rules/study.smk), never while the
# workflow is parsed. A changed spec is a new file, so exactly the jobs it affects rerun; the printed
# commands stay short. A job validates its spec file itself (milliseconds).
SPEC_TEXTS = {}  # spec file -> its bytes, every spec file of the study
# The `spec` job gets the bytes on its shell line, one argument, which Linux caps at 128 KiB.
MAX_SPEC_BYTES = 100_000


def spec_file(stem, text):
    path = str(io.content_path(f"{R}/specs", stem, text))
    if len(text.encode()) > MAX_SPEC_BYTES:
        print(
            f"snakemake: cannot run the study: the spec {path} would hold {len(text.encode())} bytes, "
            f"more than {MAX_SPEC_BYTES}; split the study into smaller configs",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)
    SPEC_TEXTS[path] = text
    return path


def pretrain_spec_file(run):
    return spec_file(f"{run}.pretrain", RUNS[run].spec_json)


def transfer_spec_file(run):
    return spec_file(f"{run}.transfer", RUNS[run].transfer_json())


# A spec file is named by its bytes: rewriting it (its rule's code changed) must rerun nothing.
def spec_input(path):
    return ancient(path)


CHUNK = r"\d+-\d+"


wildcard_constraints:
    run="[A-Za-z][A-Za-z0-9_]*",
    chunk=CHUNK,
    group="[A-Za-z][A-Za-z0-9_]*",
    stem="[A-Za-z][A-Za-z0-9_.]*",
    digest="[0-9a-f]{12}",


# settings with the schema's defaults filled in (preflight.check_study above)
JOBS = config["jobs"]
PRETRAIN_THREADS = JOBS["pretrain_threads"]
TRANSFER_THREADS = JOBS["transfer_threads"]
# steps between a pretraining job's saved resume states (the numbers do not depend on it)
PRETRAIN_RESUME_EVERY = JOBS["pretrain_resume_every"]
GPU = costs.gpus_per_job(config["device"])


# --- the jobs of the study, and the files each writes ----------------------------------------
# Each file's path is written once, in its rule's output, log or benchmark; everything else (the
# inputs of later rules, the `all` target, the paths checked below) expands those templates over
# the jobs listed here.


def study_jobs():
    """The wildcards of every job of the study, by rule name; computed once (the runs are fixed once parsed)."""
    if not _JOBS:
        _JOBS.update(_study_jobs())
    return _JOBS


_JOBS = {}


def _study_jobs():
    # groupsparse.study.jobs: also what `groupsparse estimate` counts
    listed = study_jobs_of(RUNS)
    listed["spec"] = [spec_wildcards(path) for path in all_spec_files()]
    return listed


def flat(items):
    return [f for item in items for f in (item if isinstance(item, list) else [item])]


def outputs_of(rule, name=None, jobs=None):
    """The files a rule's jobs (all of them, or ``jobs``) write as its output (or output ``name``)."""
    out = getattr(rules, rule).output
    templates = flat([getattr(out, name)] if name else list(out))
    jobs = study_jobs()[rule] if jobs is None else jobs
    return [apply_wildcards(str(t), w) for w in jobs for t in templates]


def written_files():
    """Every file the study writes under its results folder: each job's outputs, log and benchmark."""
    files = []
    for rule, jobs in study_jobs().items():
        each = getattr(rules, rule)
        templates = flat(list(each.output)) + list(each.log) + [each.benchmark]
        files += [apply_wildcards(str(t), w) for w in jobs for t in templates]
    return [f for f in files if Path(R) in Path(f).parents]


def jobs_record():
    """Every job of the study with its outputs, log and benchmark (results/<study>/jobs.json, written when
    a run starts): what `groupsparse status` and the end lines read (groupsparse.study.jobstate).
    """
    jobs = {}
    for rule, wildcards in study_jobs().items():
        each = getattr(rules, rule)
        templates = flat(list(each.output))
        # the rule's own outputs keep their flags (the proxy's, used as later rules' inputs, lose them)
        temp = [str(t) for t in workflow.get_rule(rule).output if is_flagged(t, "temp")]
        for w in wildcards:
            log = apply_wildcards(str(each.log[0]), w)
            jobs[str(Path(log).relative_to(f"{R}/logs").with_suffix(""))] = {
                "rule": rule,
                "outputs": [apply_wildcards(str(t), w) for t in templates],
                "temp": [apply_wildcards(t, w) for t in temp],
                "log": log,
                "benchmark": apply_wildcards(str(each.benchmark), w),
            }
    return jobstate.jobs_record(jobs)


def all_spec_files():
    """Every spec file of the study (a job's spec, the study's, the analysis'), in study.jobs' order."""
    return [spec_file(stem, spec_text(stem)) for stem in spec_stems(RUNS)]


def spec_text(stem):
    if stem == "study":
        return STUDY_JSON
    if stem == "analysis":
        return SCALING_SPEC_JSON
    run, kind = stem.rsplit(".", 1)
    return RUNS[run].spec_json if kind == "pretrain" else RUNS[run].transfer_json()


def spec_wildcards(path):
    stem, digest, _ = Path(path).name.rsplit(".", 2)
    return {"stem": stem, "digest": digest}


def checkpoint_of(run, chunk):
    return outputs_of("pretrain", "checkpoint", [{"run": run, "chunk": chunk}])[0]


def all_trajectories():
    return outputs_of("pretrain", "trajectory")


def all_attention():
    return outputs_of("pretrain", "attention")


def all_transfer_tables():
    return outputs_of("transfer", "table")


# output names: the one registry in groupsparse.io.tables
FIGURES_PER_RUN = list(names.RUN_FIGURES)


def transfer_table_outputs():
    """The aggregated transfer tables (aggregate's output), in a study with transfer jobs."""
    if not study_jobs()["transfer"]:
        return []
    stems = names.TRANSFER_TABLES
    return [f"{R}/tables/{t}.parquet" for t in stems] + [
        as_report_table(f"{R}/tables/{t}.csv") for t in stems if t in names.CSV_TABLES
    ]


def as_report_table(path):
    caption = f"../report/table_{Path(path).stem}.rst"
    return report(path, caption=caption, category="Tables")


def kind_of_run(run):
    return kinds.kind_of(RUNS[run].spec["task"])


def figure_runs():
    """Runs that get their own figure set: the named tasks (scaling points and ablations are
    summarised by the scaling figures instead)."""
    return [r for r, run in RUNS.items() if run.role == "task"]


def final_outputs():
    """The default target (`all`): the tables, the figures, the claims."""
    finals = (
        "aggregate",
        "figures",
        "transfer_figure",
        *KIND_FIGURE_RULES,
        "predict",
        "scaling",
        "review",
    )
    return [f for rule in finals for f in outputs_of(rule)]


# The folders a run reads, by its task kind (data.kinds): CIFAR-10 runs read their task.path folder,
# fetched by the fetch_cifar10 job (images.smk) if missing.
def data_inputs(run):
    return kind_of_run(run).data_folders(RUNS[run].spec["task"])


# --- stopping: a signal to snakemake reaches its running jobs (study/stopping.py) ---------------


def running_job_shells():
    """The pids of the shells snakemake runs the local jobs in (none under a cluster executor, whose
    own cancel reaches the jobs)."""
    from snakemake.shell import shell as snakemake_shell

    return [p.pid for p in list(getattr(snakemake_shell, "_processes", {}).values())]


# A job's shell waits for its job and exits as the job does when it gets SIGTERM (a terminal's or a
# scheduler's signal to the whole process group): bash would otherwise exit at once, leave the job
# running on its own, and snakemake would take the job for stopped while it still saves its state.
if Path(shell.get_executable() or "").name == "bash":
    shell.prefix("set -euo pipefail; trap : TERM; ")


def check_report_captions():
    """Every caption a rule's report() names exists (else `snakemake --report` fails at the end
    of a study): checked at parse time, so every config's dry run checks it."""
    for each in workflow.rules:
        for item in each.output:
            caption = getattr(
                (getattr(item, "flags", None) or {}).get("report"), "caption", None
            )
            if (
                caption is not None
                and not Path(caption.get_path_or_uri(secret_free=True)).is_file()
            ):
                print(
                    f"snakemake: {each.name}: report caption {caption.get_path_or_uri(secret_free=True)} does not exist",
                    file=sys.stderr,
                    flush=True,
                )
                raise SystemExit(1)


# --- resources: from the one cost model (groupsparse.costs, fitted to measured jobs) ---------


# A job's memory request never exceeds jobs.max_mem_mb: the prediction itself fits (preflight
# refused the study otherwise); only the safety margin is trimmed.
MAX_MEM_MB = JOBS["max_mem_mb"]
MAX_RUNTIME_MIN = JOBS["max_runtime_min"]


def pretrain_resources(wildcards):
    run = RUNS[wildcards.run]
    return costs.pretrain_request(
        run, wildcards.chunk, config["device"], PRETRAIN_THREADS, MAX_MEM_MB
    )


def transfer_resources(wildcards):
    run = RUNS[wildcards.run]
    return costs.transfer_request(
        run,
        wildcards.chunk,
        wildcards.group,
        config["device"],
        TRANSFER_THREADS,
        MAX_MEM_MB,
    )


# --- Slurm jobs: which pretraining and transfer jobs share one --------------------------------
# Grouping is on when the profile (workflow/profiles/slurm) sets `group-components: [study=N]`:
# N is the most (run, seed chunk) chains one Slurm job holds. The chains are packed by the cost
# model (groupsparse.costs.cluster.pack) into groups study_<i> whose requests stay under
# jobs.max_runtime_min and jobs.max_mem_mb; each is registered under its parent "study" (as
# snakemake does for a group name with wildcards) so that study=N merges a group's chains into one
# Slurm job. Without that setting (local runs) no job is grouped.
_SLURM_GROUPS = {}


def slurm_group(kind, wildcards):
    per_job = workflow.group_settings.group_components.get("study")
    if per_job is None:
        return None
    if not _SLURM_GROUPS:
        _SLURM_GROUPS.update(
            costs.pack(
                RUNS,
                config["device"],
                PRETRAIN_THREADS,
                TRANSFER_THREADS,
                MAX_RUNTIME_MIN,
                MAX_MEM_MB,
                per_job,
            )
        )
    key = (kind, wildcards.run, wildcards.chunk, wildcards.get("group", ""))
    gid = _SLURM_GROUPS[key]
    workflow.parent_groupids[gid] = "study"
    return gid


# Before the first Slurm job: where Slurm has no accounting, the executor plugin's default status
# command (sacct) never sees a job finish and snakemake waits forever; stop with the flag instead.
def check_slurm_accounting():
    plugin = workflow.executor_plugin
    status = getattr(workflow.executor_settings, "status_command", None)
    if plugin is not None and plugin.name == "slurm" and status == "sacct":
        problem = preflight.sacct_problem()
        if problem:
            raise WorkflowError(
                f"{problem}: Slurm accounting is off, so the executor could never see a job "
                f"finish; add `{preflight.STATUS_FLAG}` (or `slurm-status-command: squeue` in "
                f"your profile)"
            )


def local_cores():
    """snakemake's --cores on a local run; None under a cluster executor, which has no total."""
    try:
        return workflow.cores
    except WorkflowError:
        return None


CONDA_ENV = "../envs/groupsparse.yaml"


# --- scaling and ablations ------------------------------------------------------------


# The whole scaling.analysis and ablations.analysis sections (the schema filled their defaults) travel
# to `groupsparse scaling` and `groupsparse predict` as one spec file, like the run specs, with
# transfer.test_size (the simulated power's test noise).
SCALING_SPEC_JSON = json.dumps(
    analysis_settings.Settings.spec(config),
    sort_keys=True,
    separators=(",", ":"),
)


def scaling_spec_file():
    return spec_file("analysis", SCALING_SPEC_JSON)


# The out-of-sample test: `predict` reads the grid runs with D <= fit_D_max, and no other run.
SCALING_FIT_D_MAX = config["scaling"]["analysis"]["fit_D_max"]


def prediction_runs():
    """The scaling runs with D <= scaling.analysis.fit_D_max: the grid's own (variant '') and the
    stability variants' (each a group of its own), not the batch check's (variant batch<b>).
    """
    return [
        r
        for r, run in RUNS.items()
        if run.role == "scaling"
        and not is_check_variant(run.spec["variant"])
        and run.spec["task"]["D"] <= SCALING_FIT_D_MAX
    ]


def committed_tables(key):
    """scaling.analysis.<key> (external_predictions, reference_by_D): committed tables, relative to the
    repository (the Snakefile's folder) unless absolute."""
    paths = (config.get("scaling") or {}).get("analysis", {}).get(key) or []
    return [
        str(Path(p) if Path(p).is_absolute() else Path(workflow.basedir) / p)
        for p in paths
    ]


def external_predictions():
    return committed_tables("external_predictions")


def prediction_inputs(wildcards):
    jobs = [{"run": r, "chunk": c} for r in prediction_runs() for c in RUNS[r].chunks]
    return outputs_of("pretrain", "trajectory", jobs)


SCALING_FIGURES = names.scaling_figures(RUNS)  # those the study has data for


def scaling_enabled():
    return has_analysis(RUNS)


# --- every path the study writes: absent or of the right type, checked before anything is written


def check_written_paths():
    """Called once every rule is defined (the Snakefile's last lines)."""
    problem = outputs.wrong_type_problem(R, written_files())
    if problem:
        print(
            f"snakemake: cannot run the study: {problem}", file=sys.stderr, flush=True
        )
        raise SystemExit(1)


# A folder handed over (its study_config.json deleted, as the refusal of another config's study_name says)
# holds tables no check of this config has read; a normal run rereads a table it reruns, but snakemake
# reruns nothing downstream of the owner's new record, so the handed-over tables are checked here.
def check_handed_over_tables():
    if Path(OWNER_FILE).exists():
        return
    tables = [("trajectory", p) for p in all_trajectories()]
    tables += [("attention", p) for p in all_attention()]
    tables += [("transfer", p) for p in all_transfer_tables()]
    problem = preflight.tables_problem([(k, p) for k, p in tables if Path(p).exists()])
    if problem:
        print(
            f"snakemake: cannot run the study: {problem} (a folder handed over: its tables are checked first)",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)


def jobs_to_run():
    """The jobs this run will run, keyed as their logs (results/<study>/logs/<key>.log)."""
    keys = []
    for job in workflow.dag.needrun_jobs():
        if job.log and Path(R) / "logs" in Path(str(job.log[0])).parents:
            keys.append(
                str(Path(str(job.log[0])).relative_to(f"{R}/logs").with_suffix(""))
            )
    return keys


def run_outputs():
    """The outputs of every job of this run's DAG (temporary ones left out), by rule: what "done" means;
    with --until, --omit-from or --allowed-rules (a part of the study asked for), those of the jobs run.
    """
    settings = workflow.dag_settings
    partial = any(
        getattr(settings, name, None)
        for name in ("until", "omit_from", "allowed_rules")
    )
    by_rule = {}
    for job in (
        workflow.dag.needrun_jobs(exclude_finished=False)
        if partial
        else workflow.dag.jobs
    ):
        files = [str(f) for f in job.output if not is_flagged(f, "temp")]
        by_rule.setdefault(job.rule.name, []).extend(files)
    return by_rule


STUDY_FILE = spec_file("study", STUDY_JSON)
OWNER_FILE = f"{R}/{preflight.OWNER_FILE}"
OWNER_JSON = preflight.owner_record(workflow.configfiles)
