"""One cost model of the study's jobs: CPU time and memory, fitted to measured jobs.

Torch-free and numpy-free at import (the Snakefile imports it at parse time). Three users:
the workflow's ``resources:`` (:func:`pretrain_request`, :func:`transfer_request`), the
parse-time refusal of jobs that cannot fit (:func:`check_memory`), and ``groupsparse
estimate`` (:func:`estimate_study`).

Model (coefficients in ``costs.yaml`` in this package, refitted from
``benchmarks/costs/*.tsv`` by :func:`fit`; never edited by hand, a test checks):

pretrain, one job = S seeds x T steps of batch B, R recorded evaluations of E samples,
tokens of width m (= d + D with concatenated positions) over D positions, L layers::

    flops  = S (T step_flops + R E eval_flops)          (the plan's FLOP model: ``dispatch.step_flops``,
                                                         ``dispatch.eval_flops``)
    draws  = S T B D d                                   (the values of the batches)
    cpu_s  = c0 + rate_flops * c_flop[dtype] * flops + rate_draws * c_draw * draws
    mem_mb = m0 + m_img [image task] + m_p * S bytes(dtype) (E D (m + D) + B D d) / 2^20          (alive all run)
                + m_t * k L bytes(dtype) B D (m + D) / 2^20                (one step's temporaries)

with k = min(S, threads) seeds computed at once by the fast kernel (all S under autograd).

The machine rates: ``c_flop[dtype]`` and ``c_draw`` are fitted on the general closed forms (rate
"gemm": torch's products and fused passes, counted by the dense formula of the batch, an i.i.d. batch
twice: it has no mirror half to fold), and each other rate a kernel runs at (``dispatch.RATES``: "autograd",
"torch", "loops", "subspace") gets a factor ``rate_flops = rate_draws`` (median over its measured
jobs), or, measured at three points or more, one on its flops and one on its draws (least squares of
the relative errors: population mode's loops from the coefficients run at about 1/10 of the GEMM rate
per flop and draw about half its numbers). A new kernel names its FLOP model and its rate in the
dispatch: no cost path of its own.

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
gives every name of each module's ``__all__``; none imports torch or (at import) numpy.
"""

from . import cluster, model, requests, work
from . import fit as fitting
from .cluster import *  # noqa: F403
from .fit import *  # noqa: F403  (its fit() stands for the module's name here)
from .model import *  # noqa: F403
from .requests import *  # noqa: F403
from .work import *  # noqa: F403

__all__ = [*cluster.__all__, *fitting.__all__, *model.__all__, *requests.__all__, *work.__all__]
