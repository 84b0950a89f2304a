"""The jobs of a study, by workflow rule: one list for the Snakefile (which expands each rule's paths over
them), `groupsparse estimate` and the run's start line, so that all three count the same jobs as
snakemake's progress lines do ("x of N steps": every job below and the `all` target). Torch-free."""

from __future__ import annotations

from ..data import kinds

# the task kinds' own figure rules (data.kinds: image_figures), one job per named run of that kind
KIND_FIGURE_RULES = tuple(dict.fromkeys(rule for kind in kinds.KINDS.values() for rule in kind.figure_rules))


def has_analysis(runs: dict) -> bool:
    """The study has scaling runs or ablations: the predict and scaling rules run, with their spec file."""
    return any(run.role in ("scaling", "ablation") for run in runs.values())


def spec_stems(runs: dict) -> list[str]:
    """The stems of the study's spec files (results/<study>/specs/<stem>.<hash>.json), one `spec` job each."""
    stems = ["study"] + (["analysis"] if has_analysis(runs) else [])
    for name, run in runs.items():
        stems.append(f"{name}.pretrain")
        if run.transfer is not None:
            stems.append(f"{name}.transfer")
    return stems


def study_jobs(runs: dict) -> dict[str, list[dict]]:
    """The wildcards of every job of the study (``runs``: study.runs.expand's), by rule name; a spec job's
    are its stem alone (the Snakefile adds the hash of the file's bytes)."""
    named = [r for r, run in runs.items() if run.role == "task"]  # runs with their own figure set
    analysis = has_analysis(runs)
    return {
        "results_owner": [{}],
        "spec": [{"stem": stem} for stem in spec_stems(runs)],
        "pretrain": [{"run": r, "chunk": c} for r, run in runs.items() for c in run.chunks],
        "transfer": [
            {"run": r, "chunk": c, "group": g}
            for r, run in runs.items()
            if run.transfer is not None
            for c in run.chunks
            for g in run.method_groups
        ],
        "check_tables": [{}],
        "aggregate": [{}],
        "figures": [{"run": r} for r in named],
        "transfer_figure": [{"run": r} for r in named if runs[r].transfer is not None],
        "predict": [{}] if analysis else [],
        "scaling": [{}] if analysis else [],
        "review": [{}],
    } | {
        rule: [{"run": r} for r in named if rule in kinds.kind_of(runs[r].spec["task"]).figure_rules]
        for rule in KIND_FIGURE_RULES
    }


def job_count(runs: dict) -> int:
    """Every job of a fresh run of the study, as snakemake counts its steps: the jobs above and `all`."""
    return sum(len(each) for each in study_jobs(runs).values()) + 1
