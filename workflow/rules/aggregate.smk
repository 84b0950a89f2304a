# Aggregation, figures and the report's inputs: cheap, so they run on the submitting host.

localrules:
    check_tables,
    aggregate,
    figures,
    transfer_figure,
    image_figures,


# Every per-job table is checked (schema only) in its own job first: Snakemake removes a job's
# outputs before the job starts, so a corrupt input must stop the DAG before `aggregate` does.
rule check_tables:
    input:
        trajectories=all_trajectories(),
        attention=all_attention(),
        transfer=all_transfer_tables(),
    output:
        temp("results/tables/.inputs_checked"),
    log:
        "results/logs/check_tables.log",
    benchmark:
        "results/benchmarks/check_tables.tsv"
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
        checked="results/tables/.inputs_checked",
        trajectories=all_trajectories(),
        attention=all_attention(),
        transfer=all_transfer_tables(),
    output:
        trajectories="results/tables/pretrain_trajectories.parquet",
        attention="results/tables/pretrain_attention.parquet",
        pretrain_summary="results/tables/pretrain_summary.parquet",
        pretrain_summary_csv=report(
            "results/tables/pretrain_summary.csv",
            caption="../report/table_pretrain_summary.rst",
            category="Tables",
        ),
        provenance="results/provenance.json",
        transfer_tables=transfer_table_outputs(),
    params:
        study=STUDY_JSON,
        transfer=lambda w, input: ["--transfer", *input.transfer] if input.transfer else [],
    log:
        "results/logs/aggregate.log",
    benchmark:
        "results/benchmarks/aggregate.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "groupsparse aggregate --trajectories {input.trajectories:q} --attention {input.attention:q}"
        " {params.transfer:q} --study-json {params.study:q} --outdir results/tables"
        " --provenance-json {output.provenance:q} > {log:q} 2>&1"


rule figures:
    input:
        "results/tables/pretrain_trajectories.parquet",
        "results/tables/pretrain_attention.parquet",
    output:
        [
            report(
                f"results/figures/{{run}}/{name}.png",
                caption=f"../report/{name}.rst",
                category="Figures",
                subcategory="{run}",
            )
            for name in FIGURES_PER_RUN
        ],
        [f"results/figures/{{run}}/{name}.pdf" for name in FIGURES_PER_RUN],
    log:
        "results/logs/figures/{run}.log",
    benchmark:
        "results/benchmarks/figures/{run}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "groupsparse plot --kind pretrain --tables results/tables --run {wildcards.run:q}"
        " --outdir results/figures/{wildcards.run:q} > {log:q} 2>&1"


rule transfer_figure:
    input:
        "results/tables/transfer.parquet",
        "results/tables/pretrain_trajectories.parquet",
    output:
        report(
            "results/figures/{run}/transfer_accuracy.png",
            caption="../report/transfer_accuracy.rst",
            category="Figures",
            subcategory="{run}",
        ),
        "results/figures/{run}/transfer_accuracy.pdf",
    log:
        "results/logs/figures/{run}.transfer.log",
    benchmark:
        "results/benchmarks/figures/{run}.transfer.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "groupsparse plot --kind transfer --tables results/tables --run {wildcards.run:q}"
        " --outdir results/figures/{wildcards.run:q} > {log:q} 2>&1"
