# Pretraining: one job per (run, chunk of seeds); the seeds of a chunk train batched in one process.


rule pretrain:
    input:
        spec=lambda w: spec_input(pretrain_spec_file(w.run)),
        data=lambda w: data_inputs(w.run),  # CIFAR-10 runs: the folder (fetched if missing)
    output:
        checkpoint=f"{R}/pretrain/{{run}}/seeds{{chunk}}.safetensors",
        trajectory=f"{R}/pretrain/{{run}}/seeds{{chunk}}.trajectory.parquet",
        attention=f"{R}/pretrain/{{run}}/seeds{{chunk}}.attention.parquet",
    log:
        f"{R}/logs/pretrain/{{run}}/seeds{{chunk}}.log",
    benchmark:
        f"{R}/benchmarks/pretrain/{{run}}/seeds{{chunk}}.tsv"
    group:
        lambda w: slurm_group("pretrain", w)
    conda:
        CONDA_ENV
    threads: PRETRAIN_THREADS
    resources:
        mem_mb=lambda w: pretrain_resources(w)["mem_mb"],
        runtime=lambda w: pretrain_resources(w)["runtime"],
        gpu=GPU,
    params:
        # resumable state lives outside the declared outputs so a killed job continues
        resume=lambda w: f"{R}/pretrain/{w.run}/.seeds{w.chunk}.resume.safetensors",
        resume_every=PRETRAIN_RESUME_EVERY,
    shell:
        "groupsparse pretrain --spec @{input.spec:q} --seeds {wildcards.chunk:q}"
        " --checkpoint {output.checkpoint:q} --trajectory {output.trajectory:q}"
        " --attention {output.attention:q} --resume-state {params.resume:q}"
        " --resume-every {params.resume_every:q} --threads {threads:q} > {log:q} 2>&1"
