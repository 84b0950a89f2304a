# Transfer: one job per (pretrained checkpoint, method group); a job runs every sample size.


rule transfer:
    input:
        checkpoint=rules.pretrain.output.checkpoint,
        spec=lambda w: spec_input(transfer_spec_file(w.run)),
    output:
        table=f"{R}/transfer/{{run}}/seeds{{chunk}}/{{group}}.parquet",
    log:
        f"{R}/logs/transfer/{{run}}/seeds{{chunk}}/{{group}}.log",
    benchmark:
        f"{R}/benchmarks/transfer/{{run}}/seeds{{chunk}}/{{group}}.tsv"
    group:
        lambda w: slurm_group("transfer", w)
    conda:
        CONDA_ENV
    threads: TRANSFER_THREADS
    resources:
        mem_mb=lambda w: transfer_resources(w)["mem_mb"],
        runtime=lambda w: transfer_resources(w)["runtime"],
        gpu=GPU,
    params:
        methods=lambda w: ",".join(RUNS[w.run].method_groups[w.group]),
        sizes=lambda w: ",".join(map(str, RUNS[w.run].sizes)),
    shell:
        "groupsparse transfer --spec @{input.spec:q} --checkpoint {input.checkpoint:q}"
        " --methods {params.methods:q} --sizes {params.sizes:q} --out {output.table:q}"
        " --threads {threads:q} > {log:q} 2>&1"
