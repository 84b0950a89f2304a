"""One claims-table row (docs/STUDY.md section 7): the claim, its prediction, the measurement, its verdict.

A row is made from a statement (:data:`.statements.STATEMENTS`) and its typed columns (an
:class:`.statements.About`): its text, analysis, question and quantity follow from them, and its
prediction's kind, value and tolerance are columns of their own, so no reader parses its text.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from .statements import STATEMENTS, About, claim_text
from .stats import CONFIDENCE, Prediction, verdict

# the claims table's columns: the display text and the verdict first, then the typed columns
CLAIM_COLUMNS = [
    "claim",
    "theory",
    "prediction",
    "predicted_value",
    "measured",
    "low",
    "high",
    "confidence",
    "verdict",
    "why",
    "n",
    "config",
    "analysis",
    "role",
    "run",
    "d",
    "D",
    "power",
    "power_plugin",
    "power_pipeline",
    "alternative",
    # typed columns (analysis.statements): what the claim is about, as data
    "statement",
    "question",
    "quantity",
    "subject",
    "reference",
    "law",
    "variant",
    "algorithm",
    "batch",
    "eta",
    "eta_rule",
    "reference_batch",
    "reference_eta",
    "fitted_on",
    "samples",
    "rtol",
    "reference_samples",
    "reference_rtol",
    "downstream",
    "D_grid",
    "kappa",
    "c",
    "c_when",
    "target",
    "form",
    "window",
    "at_n",
    "exponent_b",
    "exponent_b_low",
    "exponent_b_high",
    "regions",
    "replicates",
    "prediction_kind",
    "tolerance",
    "alternative_name",
    "alternative_value",
    "power_veto",  # the verdict was turned 'undecided' by its power (analysis.power)
    "computed_from",  # "run": written by the study's analysis; "committed tables": added later from them
]


def claim_row(
    statement: str,
    about: About,
    pred: Prediction | None,
    measured: float,
    low: float,
    high: float,
    blocker: str,
    config: str,
    n: int,
    theory: str = "",
    role: str = "scaling",
) -> dict:
    """One claims-table row: ``statement``'s text filled from ``about`` (the row's typed columns), the
    verdict of ``pred`` on [low, high] by :func:`.stats.verdict` ('inconclusive' without a prediction)."""
    s = STATEMENTS[statement]
    v, why = verdict(pred, low, high, blocker=blocker) if pred else ("inconclusive", "no prediction")
    typed = asdict(about)
    return typed | {
        "claim": claim_text(statement, about),
        "theory": theory,
        "prediction": prediction_text(pred),
        "predicted_value": pred.value if pred else math.nan,
        "measured": measured,
        "low": low,
        "high": high,
        "confidence": CONFIDENCE,
        "verdict": v,
        "why": why,
        "n": n,
        "config": config,
        "analysis": s.analysis,
        "role": role,
        "power": math.nan,  # against ``alternative``, by :mod:`.power`: the one the verdict uses
        "power_plugin": math.nan,  # the normal plug-in from the measured standard error
        "power_pipeline": math.nan,  # by simulation of the whole pipeline (:mod:`.pipeline_power`)
        "alternative": "",
        "statement": statement,
        "question": s.question,
        "quantity": about.quantity or s.quantity,
        "prediction_kind": pred.kind if pred else "",
        "tolerance": pred.tolerance if pred and math.isfinite(pred.tolerance) else math.nan,
        "alternative_name": "",
        "alternative_value": math.nan,
        "power_veto": False,
        "computed_from": "run",
    }


def prediction_text(pred: Prediction | None) -> str:
    """'> 0', '<= 1', '= 2 (interval at most 1 wide)': the prediction column, from the prediction."""
    if pred is None:
        return ""
    if pred.kind == "equal":
        width = f" (interval at most {pred.tolerance:g} wide)" if math.isfinite(pred.tolerance) else ""
        return f"= {pred.value:g}{width}"
    if pred.kind == "within":
        return f"= {pred.value:g} within {pred.tolerance:g}"
    return f"{ {'greater': '>', 'less': '<', 'at_most': '<='}[pred.kind] } {pred.value:g}"


def alternative_text(name: str, value: float) -> str:
    """The alternative column: 'dD (value 2)', or the name alone where it has no one value."""
    return f"{name} (value {value:.3g})" if math.isfinite(value) else name
