# Scaling laws, ablations and the claims table (section 6), from the aggregated tables.


localrules:
    scaling,


rule scaling:
    input:
        trajectories=f"{R}/tables/pretrain_trajectories.parquet",
        transfer=transfer_table_files()[:1],
    output:
        claims=f"{R}/tables/claims.parquet",
        claims_csv=report(
            f"{R}/tables/claims.csv",
            caption="../report/table_claims.rst",
            category="Tables",
        ),
        fits=f"{R}/tables/scaling_fits.parquet",
        ablations=f"{R}/tables/ablations.parquet",
        points=f"{R}/tables/scaling_points.parquet",
        crossings=f"{R}/tables/scaling_crossings.parquet",
        figures=[
            report(
                f"{R}/figures/scaling/{f}.png",
                caption=f"../report/scaling_{f}.rst",
                category="Scaling and ablations",
            )
            for f in SCALING_FIGURES
        ],
        pdfs=[f"{R}/figures/scaling/{f}.pdf" for f in SCALING_FIGURES],
    log:
        f"{R}/logs/scaling.log",
    benchmark:
        f"{R}/benchmarks/scaling.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    params:
        transfer=lambda w, input: (
            ["--transfer", *input.transfer] if input.transfer else []
        ),
        options=scaling_args(),
        study_seed=config["study_seed"],
        figures=lambda w, output: str(Path(output.figures[0]).parent),
    shell:
        "groupsparse scaling --trajectories {input.trajectories:q} {params.transfer:q}"
        " --out-claims {output.claims:q} --out-fits {output.fits:q} --out-ablations {output.ablations:q}"
        " --out-points {output.points:q} --out-crossings {output.crossings:q}"
        " --out-claims-csv {output.claims_csv:q} --figures {params.figures:q}"
        " {params.options:q} --study-seed {params.study_seed:q} > {log:q} 2>&1"
