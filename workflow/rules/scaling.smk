# Scaling laws, ablations and the claims table (section 6), from the aggregated tables.


localrules:
    scaling,


rule scaling:
    input:
        trajectories="results/tables/pretrain_trajectories.parquet",
        transfer=transfer_table_files()[:1],
    output:
        claims="results/tables/claims.parquet",
        claims_csv=report("results/tables/claims.csv", caption="../report/table_claims.rst", category="Tables"),
        fits="results/tables/scaling_fits.parquet",
        ablations="results/tables/ablations.parquet",
        points="results/tables/scaling_points.parquet",
        crossings="results/tables/scaling_crossings.parquet",
        figures=[
            report(
                f"results/figures/scaling/{f}.png",
                caption=f"../report/scaling_{f}.rst",
                category="Scaling and ablations",
            )
            for f in SCALING_FIGURES
        ],
        pdfs=[f"results/figures/scaling/{f}.pdf" for f in SCALING_FIGURES],
    params:
        transfer=lambda w, input: ["--transfer", *input.transfer] if input.transfer else [],
        options=scaling_args(),
        study_seed=config["study_seed"],
    log:
        "results/logs/scaling.log",
    benchmark:
        "results/benchmarks/scaling.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "groupsparse scaling --trajectories {input.trajectories:q} {params.transfer:q}"
        " --out-claims {output.claims:q} --out-fits {output.fits:q} --out-ablations {output.ablations:q}"
        " --out-points {output.points:q} --out-crossings {output.crossings:q}"
        " --out-claims-csv {output.claims_csv:q} --figures results/figures/scaling"
        " {params.options:q} --study-seed {params.study_seed:q} > {log:q} 2>&1"
