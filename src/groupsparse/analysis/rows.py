"""One claims-table row (docs/STUDY.md section 7): the claim, its prediction, the measurement, its verdict."""

from __future__ import annotations

import math

from .stats import CONFIDENCE, Prediction, verdict


def claim_row(
    claim: str,
    theory: str,
    pred: Prediction | None,
    measured: float,
    low: float,
    high: float,
    blocker: str,
    config: str,
    analysis: str,
    n: int,
    role: str = "scaling",
    run: str = "",
    settings: dict | None = None,
) -> dict:
    """One claims-table row; ``settings``: the varied settings it is about (d, D; NaN where a fit spans them)."""
    v, why = verdict(pred, low, high, blocker=blocker) if pred else ("inconclusive", "no prediction")
    return {
        "claim": claim,
        "theory": theory,
        "prediction": _pred_text(pred),
        "predicted_value": pred.value if pred else math.nan,
        "measured": measured,
        "low": low,
        "high": high,
        "confidence": CONFIDENCE,
        "verdict": v,
        "why": why,
        "n": n,
        "config": config,
        "analysis": analysis,
        "role": role,
        "run": run,
        "d": (settings or {}).get("d", math.nan),
        "D": (settings or {}).get("D", math.nan),
        "power": math.nan,  # against ``alternative``, by :mod:`.power`: the one the verdict uses
        "power_plugin": math.nan,  # the normal plug-in from the measured standard error
        "power_pipeline": math.nan,  # by simulation of the whole pipeline (:mod:`.pipeline_power`)
        "alternative": "",
    }


def _pred_text(pred: Prediction | None) -> str:
    if pred is None:
        return ""
    if pred.kind == "equal":
        width = f" (interval at most {pred.tolerance:g} wide)" if math.isfinite(pred.tolerance) else ""
        return f"= {pred.value:g}{width}"
    return f"{ {'greater': '>', 'less': '<', 'at_most': '<='}[pred.kind] } {pred.value:g}"
