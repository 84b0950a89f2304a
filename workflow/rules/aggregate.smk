# Aggregation, figures and the report's inputs: cheap, so they run on the submitting host.


localrules:
    check_tables,
    aggregate,
    figures,
    transfer_figure,
    image_figures,
    review,


# Every per-job table is checked (schema only) in its own job first: Snakemake removes a job's
# outputs before the job starts, so a corrupt input must stop the DAG before `aggregate` does.
rule check_tables:
    input:
        trajectories=all_trajectories(),
        attention=all_attention(),
        transfer=all_transfer_tables(),
    output:
        temp(f"{R}/tables/.inputs_checked"),
    log:
        f"{R}/logs/check_tables.log",
    benchmark:
        f"{R}/benchmarks/check_tables.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "groupsparse check-tables --trajectories {input.trajectories:q} --attention {input.attention:q}"
        " --transfer {input.transfer:q} --out {output:q} > {log:q} 2>&1"


rule aggregate:
    input:
        checked=rules.check_tables.output[0],
        study=spec_input(STUDY_FILE),
        trajectories=all_trajectories(),
        attention=all_attention(),
        transfer=all_transfer_tables(),
    output:
        trajectories=f"{R}/tables/pretrain_trajectories.parquet",
        attention=f"{R}/tables/pretrain_attention.parquet",
        pretrain_summary=f"{R}/tables/pretrain_summary.parquet",
        pretrain_summary_csv=report(
            f"{R}/tables/pretrain_summary.csv",
            caption="../report/table_pretrain_summary.rst",
            category="Tables",
        ),
        provenance=f"{R}/provenance.json",
        transfer_tables=transfer_table_outputs(),
    log:
        f"{R}/logs/aggregate.log",
    benchmark:
        f"{R}/benchmarks/aggregate.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        transfer=lambda w, input: (
            ["--transfer", *input.transfer] if input.transfer else []
        ),
        outdir=lambda w, output: str(Path(output.trajectories).parent),
    shell:
        "groupsparse aggregate --trajectories {input.trajectories:q} --attention {input.attention:q}"
        " {params.transfer:q} --study-json {input.study:q} --outdir {params.outdir:q}"
        " --provenance-json {output.provenance:q} > {log:q} 2>&1"


rule figures:
    input:
        rules.aggregate.output.trajectories,
        rules.aggregate.output.attention,
    output:
        [
            report(
                f"{R}/figures/{{run}}/{name}.png",
                caption=f"../report/{name}.rst",
                category="Figures",
                subcategory="{run}",
            )
            for name in FIGURES_PER_RUN
        ],
        [f"{R}/figures/{{run}}/{name}.pdf" for name in FIGURES_PER_RUN],
    log:
        f"{R}/logs/figures/{{run}}.log",
    benchmark:
        f"{R}/benchmarks/figures/{{run}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        tables=lambda w, input: str(Path(input[0]).parent),
        outdir=lambda w, output: str(Path(output[0]).parent),
    shell:
        "groupsparse plot --kind pretrain --tables {params.tables:q} --run {wildcards.run:q}"
        " --outdir {params.outdir:q} > {log:q} 2>&1"


rule transfer_figure:
    input:
        rules.aggregate.output.transfer_tables[:1],
        rules.aggregate.output.trajectories,
    output:
        report(
            f"{R}/figures/{{run}}/transfer_accuracy.png",
            caption="../report/transfer_accuracy.rst",
            category="Figures",
            subcategory="{run}",
        ),
        f"{R}/figures/{{run}}/transfer_accuracy.pdf",
    log:
        f"{R}/logs/figures/{{run}}.transfer.log",
    benchmark:
        f"{R}/benchmarks/figures/{{run}}.transfer.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        tables=lambda w, input: str(Path(input[0]).parent),
        outdir=lambda w, output: str(Path(output[0]).parent),
    shell:
        "groupsparse plot --kind transfer --tables {params.tables:q} --run {wildcards.run:q}"
        " --outdir {params.outdir:q} > {log:q} 2>&1"


# The review's one-screen summary (groupsparse review) as the HTML report's front page: the study's
# description, then the summary of this run. Until the rule has run, the report opens on the description.
FRONT_PAGE = f"{R}/report_front.rst"
REPORT_INTRO = f"{workflow.basedir}/workflow/report/workflow.rst"
REPORT_FRONT = (
    str(Path(FRONT_PAGE).resolve()) if Path(FRONT_PAGE).is_file() else REPORT_INTRO
)
REVIEW_TABLES = (
    [f"{R}/tables/pretrain_summary.parquet", f"{R}/provenance.json"]
    + [str(t) for t in transfer_table_outputs() if str(t).endswith(".parquet")]
    + ([f"{R}/tables/claims.parquet"] if scaling_enabled() else [])
)


rule review:
    input:
        tables=REVIEW_TABLES,
        intro=REPORT_INTRO,
    output:
        FRONT_PAGE,
    log:
        f"{R}/logs/review.log",
    benchmark:
        f"{R}/benchmarks/review.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        results=lambda w, input: str(Path(input.tables[0]).parent.parent),
    shell:
        "groupsparse review {params.results:q} --intro {input.intro:q} --out {output:q} > {log:q} 2>&1"
