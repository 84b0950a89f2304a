"""One cost model of the study's jobs: CPU time and memory, fitted to measured jobs.

Torch-free and numpy-free at import (the Snakefile imports it at parse time). Three users:
the workflow's ``resources:`` (:func:`pretrain_request`, :func:`transfer_request`), the
parse-time refusal of jobs that cannot fit (:func:`check_memory`), and ``groupsparse
estimate`` (:func:`estimate_study`).

Model (coefficients in ``costs.yaml`` in this package, refitted from
``benchmarks/costs/*.tsv`` by :func:`fit`; never edited by hand, a test checks):

pretrain, one job = S seeds x T steps of batch B, R recorded evaluations of E samples,
tokens of width m (= d + D with concatenated positions) over D positions, L layers::

    flops  = S L D m (m + D) (4 T B + 2 R E)            (the dense formula's GEMM count)
    draws  = S T B D d                                   (Gaussian numbers drawn)
    cpu_s  = c0 + path_flops * c_flop[dtype] * flops + path_draws * c_draw * draws
    mem_mb = m0 + m_img [image task] + m_p * S bytes(dtype) (E D (m + D) + B D d) / 2^20          (alive all run)
                + m_t * k L bytes(dtype) B D (m + D) / 2^20                (one step's temporaries)

with k = min(S, threads) seeds computed at once by the fast kernel (all S under autograd).

``path_flops = path_draws = path``: 1 for the paper model with antithetic batches (the fast kernel folds the
mirror half), and a fitted factor (median over their measured jobs) for i.i.d. batches and
for models trained by autograd (other positions/attention/layers). A path measured at three
points or more gets two factors, one on its flops and one on its draws (least squares of the
relative errors): population mode's numba loops run at about 1/17 of the GEMM path's rate
per flop and draw about half its numbers (the antithetic half).

transfer, one job = a method group x sample sizes x downstream tasks for S seeds; a job's
cost is the sum over the *fits it performs* (one per (downstream, n, method), plus
folds x grid points when ``selection: cv``) of a per-method fit cost, each::

    fit_s = f_method + a_method * steps + b_method * train_work + e_method * eval_work

(``steps``: python-level steps, e.g. one per sample for online SGD, per minibatch for nets,
per seed for scikit-learn fits; ``train_work``/``eval_work``: multiply-adds of training and
of predicting on the train and test sets), then::

    cpu_s  = j0 + j1 * sum(fit_s) + j_draw * S (test + sum n) D d x downstream tasks
             + j_gl * [group_lasso in the job]                           (numba compilation)

(the lines a transfer log prints per (downstream, n, method) are wall-clock; the fit uses them
times their job's CPU/wall ratio, and leaves out a method's first fit in a job, whose one-time
import and warm-up cost j0 carries)
    mem_mb = t0 + t_x * S (test_size + max n) D d 8 / 2^20           (samples, float64)
             + t_z * S (test_size + max n) D m 8 / 2^20 [a paper-model method in the job] (tokens)
             + t_sk [logreg or group_lasso in the job] + t_gl [group_lasso in the job]
             + t_net [mlp or std_transformer in the job]

GPU: no GPU measurement exists; a cuda job is estimated from its FLOPs at an assumed
sustained throughput plus a per-step launch overhead (``GPU_ASSUMPTIONS``), and every such
figure is labelled ``estimate (no GPU measurement)``.

Layout: :mod:`.work` (a job's work from its spec), :mod:`.model` (coefficients and predictions),
:mod:`.requests` (scheduler requests, the memory check, study totals), :mod:`.fit` (refitting
from the benchmark files and the measured-vs-predicted report), :mod:`.cluster` (caps on a
cluster job: seed chunks and the packing of runs into Slurm jobs). ``from groupsparse import costs``
gives all of them; none imports torch or (at import) numpy.
"""

from .cluster import DEFAULT_MAX_RUNTIME_MIN, chain_requests, fit_chunks, gpus_per_job, group_request, pack, slurm_jobs
from .fit import (
    DEFAULT_DATA,
    TABLES,
    fit,
    measured_vs_predicted,
    read_table,
    report,
    write_coefficients,
)
from .model import (
    COEFFS_PATH,
    FIT_TERMS,
    GPU_ASSUMPTIONS,
    GPU_NOTE,
    GPU_TIME_MARGIN,
    MEM_FLOOR_MB,
    MEM_MARGIN,
    TIME_FLOOR_MIN,
    TIME_MARGIN,
    Cost,
    coefficients,
    fit_seconds,
    pretrain_cost,
    set_coefficients,
    transfer_cost,
)
from .requests import (
    DEFAULT_MEM_LIMIT_MB,
    SMALL_JOBS,
    check_memory,
    estimate_study,
    pretrain_request,
    request,
    run_key,
    transfer_request,
)
from .work import (
    DTYPE_BYTES,
    Fit,
    coefficients_of,
    describe_pretrain,
    describe_transfer,
    fit_work,
    measured_methods,
    record_count,
    transfer_fits,
)

__all__ = [
    "DEFAULT_MAX_RUNTIME_MIN",
    "chain_requests",
    "fit_chunks",
    "gpus_per_job",
    "group_request",
    "pack",
    "slurm_jobs",
    "COEFFS_PATH",
    "DEFAULT_DATA",
    "DEFAULT_MEM_LIMIT_MB",
    "DTYPE_BYTES",
    "FIT_TERMS",
    "GPU_ASSUMPTIONS",
    "GPU_NOTE",
    "GPU_TIME_MARGIN",
    "MEM_FLOOR_MB",
    "MEM_MARGIN",
    "SMALL_JOBS",
    "TABLES",
    "TIME_FLOOR_MIN",
    "TIME_MARGIN",
    "Cost",
    "Fit",
    "coefficients_of",
    "check_memory",
    "coefficients",
    "describe_pretrain",
    "describe_transfer",
    "estimate_study",
    "fit",
    "fit_seconds",
    "fit_work",
    "measured_methods",
    "measured_vs_predicted",
    "pretrain_cost",
    "pretrain_request",
    "read_table",
    "record_count",
    "report",
    "request",
    "run_key",
    "set_coefficients",
    "transfer_cost",
    "transfer_fits",
    "transfer_request",
    "write_coefficients",
]
