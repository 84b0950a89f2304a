# Helpers shared by the rules: config validation, the run table, file lists, resources.
import json
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# The package lives in src/; make it importable at parse time even without `pip install -e`.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from groupsparse import costs  # noqa: E402  (torch-free
from groupsparse.config.schema import study_schema
from groupsparse.costs import calibrate  # torch-free: its probe runs in a subprocess
from groupsparse.io import files as io
from groupsparse.io import report as report_text
from groupsparse.io import tables as names
from groupsparse.study import outputs, preflight, trust
from groupsparse.study.runs import is_check_variant

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


# Specs travel by file, not inline on the shell line: results/<study>/specs/<name>.<hash>.json,
# written once when the workflow is parsed. A changed spec is a new file, so exactly the jobs it
# affects rerun; the printed commands stay short. Each carries the stamp of the check above
# (<file>.checked, study.trust): the job trusts it and validates nothing again.
def pretrain_spec_file(run):
    return str(
        trust.write_checked(f"{R}/specs", f"{run}.pretrain", RUNS[run].spec_json)
    )


def transfer_spec_file(run):
    return str(
        trust.write_checked(f"{R}/specs", f"{run}.transfer", RUNS[run].transfer_json())
    )


CHUNK = r"\d+-\d+"


wildcard_constraints:
    run="[A-Za-z][A-Za-z0-9_]*",
    chunk=CHUNK,
    group="[A-Za-z][A-Za-z0-9_]*",


# settings with the schema's defaults filled in (preflight.check_study above)
JOBS = config["jobs"]
PRETRAIN_THREADS = JOBS["pretrain_threads"]
TRANSFER_THREADS = JOBS["transfer_threads"]
# steps between a pretraining job's saved resume states (the numbers do not depend on it)
PRETRAIN_RESUME_EVERY = JOBS["pretrain_resume_every"]
GPU = costs.gpus_per_job(config["device"])


def pretrain_prefix(run, chunk):
    return f"{R}/pretrain/{run}/seeds{chunk}"


def checkpoint_path(run, chunk):
    return pretrain_prefix(run, chunk) + ".safetensors"


def all_trajectories():
    return [
        pretrain_prefix(r, c) + ".trajectory.parquet"
        for r, run in RUNS.items()
        for c in run.chunks
    ]


def all_attention():
    return [
        pretrain_prefix(r, c) + ".attention.parquet"
        for r, run in RUNS.items()
        for c in run.chunks
    ]


def all_transfer_tables():
    return [
        f"{R}/transfer/{r}/seeds{c}/{g}.parquet"
        for r, run in RUNS.items()
        if run.transfer is not None
        for c in run.chunks
        for g in run.method_groups
    ]


# output names: the one registry in groupsparse.io.tables
FIGURES_PER_RUN = list(names.RUN_FIGURES)
TRANSFER_TABLES = [f"{t}.parquet" for t in names.TRANSFER_TABLES]
TRANSFER_TABLES_CSV = [
    f"{t}.csv" for t in names.TRANSFER_TABLES if t in names.CSV_TABLES
]


def transfer_table_outputs():
    if not all_transfer_tables():
        return []
    csv = [f"{R}/tables/{t}" for t in TRANSFER_TABLES_CSV]
    return [f"{R}/tables/{t}" for t in TRANSFER_TABLES] + [
        as_report_table(p) for p in csv
    ]


def as_report_table(path):
    caption = f"../report/table_{Path(path).stem}.rst"
    return report(path, caption=caption, category="Tables")


def run_figure_names(run):
    stems = list(FIGURES_PER_RUN)
    if RUNS[run].transfer is not None:
        stems.append(names.TRANSFER_FIGURE)
    if RUNS[run].spec["task"]["kind"] == "images":
        stems += names.IMAGE_FIGURES
    return stems


def figure_runs():
    """Runs that get their own figure set: the named tasks (scaling points and ablations are
    summarised by the scaling figures instead)."""
    return [r for r, run in RUNS.items() if run.role == "task"]


def figure_files():
    return [
        f"{R}/figures/{r}/{name}.{ext}"
        for r in figure_runs()
        for name in run_figure_names(r)
        for ext in names.FIGURE_FORMATS
    ]


# CIFAR-10 runs read their task.path folder, fetched by the fetch_cifar10 job (images.smk) if missing.
def cifar_folders():
    from groupsparse.data.cifar import data_folder

    return {
        r: str(data_folder(run.spec["task"]["path"]))
        for r, run in RUNS.items()
        if run.spec["task"].get("kind") == "images"
        and run.spec["task"].get("dataset") == "cifar10"
    }


def data_inputs(run):
    folder = cifar_folders().get(run)
    return [folder] if folder else []


CIFAR_FETCH = sorted(set(cifar_folders().values()))


def rerun_command(options=""):
    """The snakemake command of this study (--configfile last: it takes every argument after it)."""
    files = " ".join(str(f) for f in workflow.overwrite_configfiles or [])
    return " ".join(
        ["snakemake", options] + ([f"--configfile {files}"] if files else [])
    ).replace("  ", " ")


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


def transfer_table_files():
    return (
        [f"{R}/tables/{t}" for t in TRANSFER_TABLES + TRANSFER_TABLES_CSV]
        if all_transfer_tables()
        else []
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
# to `groupsparse scaling` and `groupsparse predict` as one spec file, like the run specs.
SCALING_SPEC_JSON = json.dumps(
    {
        "scaling": config["scaling"]["analysis"],
        "ablations": config["ablations"]["analysis"],
        "study_seed": config["study_seed"],
    },
    sort_keys=True,
    separators=(",", ":"),
)


def scaling_spec_file():
    return str(io.content_file(f"{R}/specs", "analysis", SCALING_SPEC_JSON))


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


def prediction_inputs(wildcards):
    return [
        pretrain_prefix(r, c) + ".trajectory.parquet"
        for r in prediction_runs()
        for c in RUNS[r].chunks
    ]


SCALING_FIGURES = list(names.SCALING_FIGURES)
SCALING_TABLES = list(names.SCALING_TABLES)


def scaling_enabled():
    return any(run.role in ("scaling", "ablation") for run in RUNS.values())


def scaling_outputs():
    if not scaling_enabled():
        return []
    return (
        [f"{R}/tables/{t}.parquet" for t in SCALING_TABLES]
        + [f"{R}/tables/{t}.csv" for t in SCALING_TABLES if t in names.CSV_TABLES]
        + [
            f"{R}/figures/scaling/{f}.{ext}"
            for f in SCALING_FIGURES
            for ext in names.FIGURE_FORMATS
        ]
    )


# --- every path the study writes: absent or of the right type, checked before anything is written


def written_files():
    """The files the study writes (spec files, per-job outputs, logs, benchmarks, tables, figures)."""
    files = [io.content_path(f"{R}/specs", "study", STUDY_JSON)]
    for r, run in RUNS.items():
        files.append(io.content_path(f"{R}/specs", f"{r}.pretrain", run.spec_json))
        if run.transfer is not None:
            files.append(
                io.content_path(f"{R}/specs", f"{r}.transfer", run.transfer_json())
            )
        for c in run.chunks:
            files += [
                checkpoint_path(r, c),
                f"{pretrain_prefix(r, c)}.trajectory.parquet",
                f"{pretrain_prefix(r, c)}.attention.parquet",
            ]
            files += [
                f"{R}/logs/pretrain/{r}/seeds{c}.log",
                f"{R}/benchmarks/pretrain/{r}/seeds{c}.tsv",
            ]
            for g in run.method_groups if run.transfer is not None else []:
                files += [
                    f"{R}/transfer/{r}/seeds{c}/{g}.parquet",
                    f"{R}/logs/transfer/{r}/seeds{c}/{g}.log",
                    f"{R}/benchmarks/transfer/{r}/seeds{c}/{g}.tsv",
                ]
    tables = [
        "pretrain_trajectories.parquet",
        "pretrain_attention.parquet",
        "pretrain_summary.parquet",
        "pretrain_summary.csv",
        ".inputs_checked",
    ]
    files += [f"{R}/tables/{t}" for t in tables] + [f"{R}/provenance.json"]
    files += [
        f"{R}/{kind}/{job}"
        for kind, job in (("logs", "aggregate.log"), ("benchmarks", "aggregate.tsv"))
    ]
    return files + figure_files() + transfer_table_files() + scaling_outputs()


_problem = outputs.wrong_type_problem(R, written_files())
if _problem:
    print(f"snakemake: cannot run the study: {_problem}", file=sys.stderr, flush=True)
    raise SystemExit(1)
# every check passed: the folder now belongs to this config file
preflight.record_owner(R, workflow.configfiles)
STUDY_FILE = str(io.content_file(f"{R}/specs", "study", STUDY_JSON))
