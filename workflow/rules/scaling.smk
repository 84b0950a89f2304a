# Scaling laws, ablations and the claims table (section 6), from the aggregated tables.


localrules:
    scaling,
    predict,


# The out-of-sample test's predictions: fitted on the grid runs with D <= fit_D_max alone (their
# per-run files are the rule's only trajectory inputs), before any larger-D run is read.
rule predict:
    input:
        trajectories=prediction_inputs,
        spec=spec_input(scaling_spec_file()),
        external=external_predictions(),
    output:
        predictions=f"{R}/tables/predictions.parquet",
        predictions_csv=report(
            f"{R}/tables/predictions.csv",
            caption="../report/table_predictions.rst",
            category="Tables",
        ),
        kappa_c=f"{R}/tables/kappa_c_predictions.csv",
    log:
        f"{R}/logs/predict.log",
    benchmark:
        f"{R}/benchmarks/predict.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "groupsparse predict --trajectories {input.trajectories:q} --spec {input.spec:q}"
        " --external {input.external:q}"
        " --out {output.predictions:q} --out-csv {output.predictions_csv:q}"
        " --kappa-c-out {output.kappa_c:q} > {log:q} 2>&1"


rule scaling:
    input:
        trajectories=rules.aggregate.output.trajectories,
        transfer=rules.aggregate.output.transfer_tables[:1],
        spec=spec_input(scaling_spec_file()),
        predictions=rules.predict.output.predictions,
        references=committed_tables("reference_by_D"),
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
        by_D=f"{R}/tables/theorem_by_D.csv",
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
        figures=lambda w, output: str(Path(output.figures[0]).parent),
        figure_names=SCALING_FIGURES,
    shell:
        "groupsparse scaling --trajectories {input.trajectories:q} {params.transfer:q}"
        " --out-claims {output.claims:q} --out-fits {output.fits:q} --out-ablations {output.ablations:q}"
        " --out-points {output.points:q} --out-crossings {output.crossings:q} --out-by-D {output.by_D:q}"
        " --out-claims-csv {output.claims_csv:q} --figures {params.figures:q}"
        " --figure-names {params.figure_names:q}"
        " --spec {input.spec:q} --predictions {input.predictions:q}"
        " --references {input.references:q} > {log:q} 2>&1"
