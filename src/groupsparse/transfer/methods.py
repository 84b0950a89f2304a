"""The compared methods: one fit function each, and the registry ``METHODS``.

Every method fits a batch of entries at once on tensors with a leading entry axis,
X (S, n, D, d) float64 and y (S, n) in {-1, +1}, with one hyperparameter setting per entry
(``hps``, a list of S dicts: an entry is a seed, or a (grid point, fold, seed) of the
cross-validation), and returns its real-valued output f (the logit; predicted label sign(f))
on each set in ``evals`` (each (S, m, D, d)), as float64 CPU tensors (S, m). The torch methods
let only the step size (eta / eta_rel; lr / weight_decay) differ across entries. ``gens`` holds
each entry's own generator (initialisation, sample order). An entry a library cannot fit
(e.g. one class only in its n samples) gets NaN outputs and its reason in ``errors``. The
online-SGD methods, given ``online``, also return each entry's average online error.
"""

from __future__ import annotations

from .baselines import (  # noqa: F401 (re-exported: the runner and tests use them from here)
    encoder_layer,
    fit_group_lasso,
    fit_logreg,
    fit_mlp,
    fit_std_transformer,
    net_steps,
    warm_up_group_lasso,
)
from .fitting import Context, FitOutput, Method, OnlineEval  # noqa: F401
from .paper_model import (  # noqa: F401
    _sgd_grads,
    average_online_error,
    fit_pretrained_finetune,
    fit_pretrained_frozen_W,
    fit_pretrained_probe,
    fit_scratch_transformer,
    online_iterates,
)
from .spec import METHODS as METHOD_NAMES

METHODS: dict[str, Method] = {
    "pretrained_finetune": Method(fit_pretrained_finetune, True, "pretrained W, v; all fine-tuned by online SGD"),
    "pretrained_finetune_v0": Method(
        fit_pretrained_finetune, True, "pretrained W, v reset to 0; all fine-tuned by online SGD"
    ),
    "pretrained_frozen_W": Method(fit_pretrained_frozen_W, True, "pretrained W frozen; v fine-tuned by online SGD"),
    "pretrained_frozen_W_v0": Method(fit_pretrained_frozen_W, True, "pretrained W frozen; v from 0 by online SGD"),
    "pretrained_probe": Method(
        fit_pretrained_probe, True, "pretrained W frozen; L2 logistic regression on u(X) = Z S 1"
    ),
    "scratch_transformer": Method(fit_scratch_transformer, False, "the paper's model from its init, online SGD"),
    "logreg": Method(fit_logreg, False, "scikit-learn L2 logistic regression on vec(X)"),
    "group_lasso": Method(fit_group_lasso, False, "skglm group-lasso logistic regression on vec(X), D groups"),
    "mlp": Method(fit_mlp, False, "torch ReLU MLP on vec(X), AdamW"),
    "std_transformer": Method(fit_std_transformer, False, "standard multi-head softmax transformer, AdamW"),
}
assert tuple(METHODS) == METHOD_NAMES, "methods.METHODS must list spec.METHODS in order"
