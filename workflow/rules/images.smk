# Real-image runs (task.kind: images): attention over slots and example inputs with their weights.


rule image_figures:
    input:
        checkpoint=lambda w: checkpoint_path(w.run, RUNS[w.run].chunks[0]),
        attention=f"{R}/tables/pretrain_attention.parquet",
        spec=lambda w: pretrain_spec_file(w.run),
    output:
        attention=report(
            f"{R}/figures/{{run}}/image_attention.png",
            caption="../report/image_attention.rst",
            category="Figures",
            subcategory="{run}",
        ),
        examples=report(
            f"{R}/figures/{{run}}/image_examples.png",
            caption="../report/image_examples.rst",
            category="Figures",
            subcategory="{run}",
        ),
        pdfs=[
            f"{R}/figures/{{run}}/image_attention.pdf",
            f"{R}/figures/{{run}}/image_examples.pdf",
        ],
    log:
        f"{R}/logs/figures/{{run}}.images.log",
    benchmark:
        f"{R}/benchmarks/figures/{{run}}.images.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        outdir=lambda w, output: str(Path(output.attention).parent),
    shell:
        "groupsparse image-figures --spec @{input.spec:q} --checkpoint {input.checkpoint:q}"
        " --attention {input.attention:q} --outdir {params.outdir:q}"
        " --threads {threads:q} > {log:q} 2>&1"
