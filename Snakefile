# groupsparse: do transformers learn optimal variable selection in group-sparse classification?
# DAG: pretrain (per run x seed chunk) -> transfer (per checkpoint x method group)
#      -> aggregate -> figures -> report.   Parsing never imports torch.

# The embedded default study, unless the command line names its own config file(s):
# `--configfile configs/tiny.yaml` then means that study alone, not a merge with this one.
if not workflow.overwrite_configfiles:

    configfile: f"{workflow.basedir}/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/study.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/transfer.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/scaling.smk"
include: "workflow/rules/images.smk"


# The report opens on the run's summary (rule review, aggregate.smk) once it exists.
report: REPORT_FRONT


rule all:
    default_target: True
    input:
        final_outputs(),


# One line at each end: where the results are, or what finished and how to resume. The whole-study
# estimate comes from the cost model calibrated on this machine (groupsparse.costs.calibrate).
onstart:
    check_slurm_accounting()
    # the study's jobs, for groupsparse status (study/jobstate.py)
    io.write_text_atomic(f"{R}/{jobstate.JOBS_FILE}", jobs_record())
    if (
        local_cores() is not None
    ):  # a cluster run has no total of cores: each job asks for its own
        # the jobs snakemake will run, counted as its progress lines count them
        print(
            calibrate.study_estimate_line(
                RUNS, config, local_cores(), R, jobs_to_run(), len(workflow.dag)
            ),
            file=sys.stderr,
        )
    # from here a SIGINT or SIGTERM to snakemake alone reaches the running jobs too (study/stopping.py)
    stopping.forward_stop_signals(
        running_job_shells, local=local_cores() is not None
    )


onsuccess:
    # "done" only for a finished study: every output of the run's jobs there, every job table whole
    problem = jobstate.done_problem(run_outputs())
    if problem:
        print(
            f"not done: {problem}; run `{stopping.resume_command(sys.argv)}` again to finish it",
            file=sys.stderr,
        )
        raise SystemExit(1)
    print(
        f"done: results in {R}/ (tables/summary.csv, tables/claims.csv where made); "
        f"review: groupsparse review {R}; report: {stopping.report_command(sys.argv, f'{R}/report.html')}",
        file=sys.stderr,
    )


onerror:
    print(
        report_text.end_line(
            R,
            log,
            stopping.resume_command(sys.argv),
            interrupted=stopping.stop_requested() is not None or None,
            finished=jobstate.finished_jobs(R),
        ),
        file=sys.stderr,
    )
    # the end line is the last line (snakemake would add its own WorkflowError)
    raise SystemExit(1)


# By here every rule is defined: each report() caption must exist, for every config, and each path the
# study writes must be absent or of the right type.
check_report_captions()
check_written_paths()
check_handed_over_tables()
