# Real-image runs (task.kind: images): attention over slots and example inputs with their weights.


rule image_figures:
    input:
        checkpoint=lambda w: checkpoint_path(w.run, RUNS[w.run].chunks[0]),
        attention="results/tables/pretrain_attention.parquet",
    output:
        attention=report(
            "results/figures/{run}/image_attention.png",
            caption="../report/image_attention.rst",
            category="Figures",
            subcategory="{run}",
        ),
        examples=report(
            "results/figures/{run}/image_examples.png",
            caption="../report/image_examples.rst",
            category="Figures",
            subcategory="{run}",
        ),
        pdfs=["results/figures/{run}/image_attention.pdf", "results/figures/{run}/image_examples.pdf"],
    params:
        spec=lambda w: RUNS[w.run].spec_json,
    log:
        "results/logs/figures/{run}.images.log",
    benchmark:
        "results/benchmarks/figures/{run}.images.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "groupsparse image-figures --spec {params.spec:q} --checkpoint {input.checkpoint:q}"
        " --attention {input.attention:q} --outdir results/figures/{wildcards.run:q}"
        " --threads {threads:q} > {log:q} 2>&1"
