# The study's own files, written by jobs (never while the workflow is parsed: `snakemake -n` writes
# nothing): which config files own results/<study>/, and every spec file, named by its bytes.


localrules:
    results_owner,
    spec,


# Once, by the study's first job: later parses refuse another config file with the same study_name.
rule results_owner:
    output:
        OWNER_FILE,
    log:
        f"{R}/logs/results_owner.log",
    benchmark:
        f"{R}/benchmarks/results_owner.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        json=OWNER_JSON,
    shell:
        "groupsparse write-spec --json {params.json:q} --out {output:q} > {log:q} 2>&1"


rule spec:
    input:
        ancient(OWNER_FILE),
    output:
        f"{R}/specs/{{stem}}.{{digest}}.json",
    log:
        f"{R}/logs/specs/{{stem}}.{{digest}}.log",
    benchmark:
        f"{R}/benchmarks/specs/{{stem}}.{{digest}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        json=lambda w, output: SPEC_TEXTS[output[0]],
    shell:
        "groupsparse write-spec --json {params.json:q} --out {output:q} > {log:q} 2>&1"
