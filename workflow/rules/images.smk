# Real-image runs (task.kind: images): attention over slots and example inputs with their weights.


rule image_figures:
    input:
        checkpoint=lambda w: checkpoint_of(w.run, RUNS[w.run].chunks[0]),
        attention=rules.aggregate.output.attention,
        spec=lambda w: spec_input(pretrain_spec_file(w.run)),
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
        f"{R}/logs/figures/{{run}}.image_figures.log",
    benchmark:
        f"{R}/benchmarks/figures/{{run}}.image_figures.tsv"
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


CIFAR_FETCH = sorted(
    {
        f
        for r in RUNS
        if RUNS[r].spec["task"].get("dataset") == "cifar10"
        for f in data_inputs(r)
    }
)


# CIFAR-10 fetched once where a study's task.path has no data yet (data/fetch.py: checked MD5,
# safe extraction, atomic rename); never runs when the folder is there. Offline it fails in one
# line saying what to download and where to put it. On the submitting host: it needs the internet.
if CIFAR_FETCH:

    localrules:
        fetch_cifar10,

    rule fetch_cifar10:
        output:
            [directory(f) for f in CIFAR_FETCH],
        log:
            f"{R}/logs/fetch_cifar10.log",
        benchmark:
            f"{R}/benchmarks/fetch_cifar10.tsv"
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=500,
            runtime=30,
        params:
            dests=[str(Path(f).parent) for f in CIFAR_FETCH],
        shell:
            "groupsparse fetch cifar10 --dest {params.dests:q} > {log:q} 2>&1"
