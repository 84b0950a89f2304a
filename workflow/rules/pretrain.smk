# Pretraining: one job per (run, chunk of seeds); the seeds of a chunk train batched in one process.


rule pretrain:
    output:
        checkpoint="results/pretrain/{run}/seeds{chunk}.safetensors",
        trajectory="results/pretrain/{run}/seeds{chunk}.trajectory.parquet",
        attention="results/pretrain/{run}/seeds{chunk}.attention.parquet",
    params:
        spec=lambda w: RUNS[w.run].spec_json,
        # resumable state lives outside the declared outputs so a killed job continues
        resume=lambda w: f"results/pretrain/{w.run}/.seeds{w.chunk}.resume.safetensors",
        resume_every=PRETRAIN_RESUME_EVERY,
    log:
        "results/logs/pretrain/{run}/seeds{chunk}.log",
    benchmark:
        "results/benchmarks/pretrain/{run}/seeds{chunk}.tsv"
    conda:
        CONDA_ENV
    threads: PRETRAIN_THREADS
    resources:
        mem_mb=pretrain_mem_mb,
        runtime=pretrain_runtime,
        gpu=GPU,
    shell:
        "groupsparse pretrain --spec {params.spec:q} --seeds {wildcards.chunk:q}"
        " --checkpoint {output.checkpoint:q} --trajectory {output.trajectory:q}"
        " --attention {output.attention:q} --resume-state {params.resume:q}"
        " --resume-every {params.resume_every:q} --threads {threads:q} > {log:q} 2>&1"
