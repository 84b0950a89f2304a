"""Words for the code names the tables use (methods, metrics, variants, run groups), so a figure reads
without the code: each figure shows the words, and the code name beside them only where a reader needs
it to find the rows (``label(..., code=True)``).

Variants are described from their settings in the study's config (the same dict a snapshot commits as
``docs/<study>/tables/config.yaml``), not from their names; a name the config does not define is shown
as it is, underscores as spaces.
"""

from __future__ import annotations

import math

import numpy as np

from ..study.runs import CHECK_VARIANT, is_check_variant

# docs/STUDY.md section 4's table of methods, short enough for a legend
METHOD_WORDS = {
    "pretrained_finetune": "pretrained, all parameters fine-tuned",
    "pretrained_finetune_v0": "pretrained W, v reset to 0, all fine-tuned",
    "pretrained_frozen_W": "pretrained, W frozen, v fine-tuned",
    "pretrained_frozen_W_v0": "pretrained W frozen, v reset to 0",
    "pretrained_probe": "linear probe of the pretrained model",
    "scratch_transformer": "the same transformer from scratch",
    "logreg": "logistic regression on all dD features",
    "group_lasso": "group-lasso logistic regression",
    "mlp": "MLP on all dD features",
    "std_transformer": "standard 2-layer transformer",
}

# the trajectory and summary columns a figure plots
METRIC_WORDS = {
    "attention_on_relevant": "mean attention on the label's group j*",
    "attention_min_on_relevant": "min over queries of the attention on j*",
    "cos_v1_vstar": "cos(v1, v*): read-out aligned with the label's direction",
    "eval_loss": "evaluation loss",
    "eval_accuracy": "evaluation accuracy",
    "test_accuracy": "transfer test accuracy",
    "v1_norm": "|v1|",
    "v2_norm": "|v2|",
}

DOWNSTREAM_WORDS = {
    "transfer": "transfer: a new label direction, the same group j*",
    "negative_control": "negative control: the label moved to another group",
}

GRADIENT_WORDS = {
    "population": "population GD",
    "autograd": "autograd GD",
    "closed_form": "batch GD (closed-form gradient)",
    "auto": "batch GD",
}
FEATURE_WORDS = {
    "correlated": "correlated features",
    "student_t": "Student-t features",
    "gaussian": "Gaussian features",
}


def method_words(method: str) -> str:
    return METHOD_WORDS.get(method, method.replace("_", " "))


def metric_words(metric: str) -> str:
    return METRIC_WORDS.get(metric, metric.replace("_", " "))


def label(words: str, code: str, code_too: bool = True) -> str:
    """``words (code)``: the code name only where it says something the words do not."""
    return f"{words} ({code})" if code_too and code and code != words else words


def method_label(method: str, code: bool = True) -> str:
    return label(method_words(method), method, code)


def eta_words(eta: float | None, limit: float | None) -> str:
    """The step-size rule: 'eta = 0.5' or 'eta = min(0.5, 6/D)'."""
    if eta is None:
        return ""
    return f"eta = min({eta:g}, {limit:g}/D)" if limit else f"eta = {eta:g}"


def setting_phrases(
    overrides: dict | None, *, step_size: bool | None = None, start: bool = False, reference: dict | None = None
) -> list[str]:
    """Phrases for the settings ``overrides`` (a variant's ``model``/``pretrain``/``task``/``dtype``) sets.
    ``step_size``: True always names the step-size rule (``reference``'s pretrain fills what the variant
    keeps), False never, None where the variant sets it; ``start``: always name the start (zero or random)."""
    o = overrides or {}
    model, pre, task = o.get("model") or {}, o.get("pretrain") or {}, o.get("task") or {}
    ref_pre = (reference or {}).get("pretrain") or {}
    phrases = []
    if "optimizer" in pre and pre["optimizer"] == "adam":
        phrases.append(f"Adam, step {pre.get('eta', ref_pre.get('eta')):g}")
    elif "gradient" in pre:
        phrases.append(GRADIENT_WORDS.get(pre["gradient"], pre["gradient"]))
    if model.get("attention") == "separate":
        phrases.append("separate W_K, W_Q")
    if model.get("init") == "random":
        scale = model.get("init_scale")
        phrases.append(f"random start N(0, {scale:g}^2)" if scale is not None else "random start")
    elif start and model.get("init", "zero") == "zero":
        phrases.append("zero start")
    if model.get("positions") == "add":
        phrases.append("positions added to the features")
    if model.get("score_scale") == "sqrt":
        phrases.append("scores scaled by 1/sqrt(dim)")
    if model.get("layers", 1) != 1:
        phrases.append(f"{model['layers']} layers")
    if pre.get("sampling") == "iid":
        phrases.append("i.i.d. batches")
    if "batch" in pre:
        phrases.append(f"batch {pre['batch']}")
    named = step_size if step_size is not None else ("eta" in pre or "eta_D_limit" in pre)
    if pre.get("optimizer") != "adam" and named:
        merged = ref_pre | pre
        phrases.append(eta_words(merged.get("eta"), merged.get("eta_D_limit")))
    if task.get("relevant_groups", 1) != 1:
        phrases.append(f"{task['relevant_groups']} relevant groups")
    if task.get("label_noise"):
        phrases.append(f"{task['label_noise']:.0%} label noise")
    if task.get("features", "gaussian") != "gaussian":
        phrases.append(FEATURE_WORDS.get(task["features"], task["features"]))
    if o.get("dtype") == "float64":
        phrases.append("float64")
    elif o.get("dtype") == "float32" and phrases and phrases[0] == GRADIENT_WORDS["autograd"]:
        phrases.append("float32")  # beside its float64 twin
    return [p for p in phrases if p]


def check_words(variant: str) -> str:
    """The batch check's runs (variant batch<b> or batch<b>_eta<f>, study.runs.check_variant) and the flow
    check's (samples<N>, rtol<x>: study.runs.flow_check_variant)."""
    if variant.startswith("samples"):
        return f"sample-size check: N = {variant.removeprefix('samples')} outer samples"
    if variant.startswith("rtol"):
        return f"solver-tolerance check: rtol {variant.removeprefix('rtol').replace('m', '-').replace('p', '.')}"
    batch, _, factor = variant.removeprefix("batch").partition("_eta")
    if factor:
        return f"step-size check: eta x {factor.replace('p', '.')}, batch {batch}"
    return f"batch-size check: batch {batch}"


def _scaling_pretrain(config: dict | None) -> dict:
    """The scaling runs' pretraining settings: the study's, then the scaling section's over them."""
    config = config or {}
    return (config.get("pretrain") or {}) | (((config.get("scaling") or {}).get("pretrain")) or {})


def grid_words(config: dict | None) -> str:
    """The scaling grid's own runs: their algorithm, batch and step-size rule."""
    pre = _scaling_pretrain(config)
    if pre.get("solver") == "flow":  # an ODE: its samples and tolerance, no batch or step size
        flow = pre.get("flow") or {}
        return f"population flow, N = {flow.get('samples', '?')} samples, rtol {flow.get('rtol', '?'):g}"
    algorithm = GRADIENT_WORDS.get(pre.get("gradient", "auto"), "batch GD")
    parts = [algorithm]
    if "batch" in pre:
        # scaling.batch_by_D: other batches at some D (a large D's cost)
        others = [
            f"{entry['batch']} at D = {', '.join(str(D) for D in np.atleast_1d(entry['D']))}"
            for entry in (((config or {}).get("scaling") or {}).get("batch_by_D") or [])
        ]
        parts.append(f"batch {pre['batch']}" + (f" ({'; '.join(others)})" if others else ""))
    eta = eta_words(pre.get("eta"), pre.get("eta_D_limit"))
    return ", ".join(parts + ([eta] if eta else []))


def variant_words(variant: str | None, config: dict | None, step_size: bool = True) -> str:
    """Words for a run group: the grid ('' or None), a batch check, a stability or an ablation variant;
    ``step_size``: name a stability variant's step-size rule (not where a panel's title names it)."""
    if variant is None or (isinstance(variant, float) and math.isnan(variant)) or variant == "":
        return grid_words(config)
    variant = str(variant)
    if variant.startswith("check:"):
        variant = variant.removeprefix("check:")
    if is_check_variant(variant) and CHECK_VARIANT.fullmatch(variant):
        return check_words(variant)
    scaling = (config or {}).get("scaling") or {}
    stability = ((scaling.get("stability") or {}).get("variants") or {}).get(variant)
    if stability is not None:
        reference = {"pretrain": _scaling_pretrain(config)}
        phrases = setting_phrases(stability, step_size=step_size, start=True, reference=reference)
        return ", ".join(phrases) or variant.replace("_", " ")
    if variant == "none":
        return "no change (the reference run)"
    ablation = (((config or {}).get("ablations") or {}).get("variants") or {}).get(variant)
    if ablation is not None:
        return ", ".join(setting_phrases(ablation)) or variant.replace("_", " ")
    return variant.replace("_", " ")


def variant_label(variant: str | None, config: dict | None, code: bool = True) -> str:
    words = variant_words(variant, config)
    if variant is None or (isinstance(variant, float) and math.isnan(variant)) or variant == "":
        return f"reference runs: {words}"  # the scaling grid's own (group '' in the tables)
    return label(words, str(variant).removeprefix("check:"), code)
