"""The power of a verdict against a named alternative (docs/STUDY.md section 7), by simulation.

A "consistent" verdict is a failure to reject, and a "holds" verdict on an equality is one too:
they mean something only if the test would have rejected had a named alternative been true. The
power is simulated at the study's design with its measured noise: the estimate drawn as
alternative + se x N(0, 1), its standard error as se x sqrt(chi^2_dof / dof) (the measured se and
degrees of freedom of the claim's interval), and the verdict rule of :mod:`.stats` applied to each
draw. Power = the share of draws in which the rule does not confirm the claim (at_most: "does not
hold"; equal: anything but "holds"); for a directional claim (greater, less) the share in which it
does confirm it at the alternative (the design's chance to detect the effect the theory names).
Below ``min_power`` a verdict that fails to reject reads "undecided (power p)": "consistent" (a bound
not contradicted) and "holds" on an equality (a value inside a narrow interval). A "holds" on a
directional claim (greater, less) is a rejection of the null at the interval's level whatever the
power: it keeps its verdict and states its power (low power means its size is likely overstated,
not that its sign is in doubt).

This is the plug-in (column ``power_plugin``). Where the whole pipeline is simulated
(:mod:`.pipeline_power`: the transfer verdicts, the means over seeds) that power
(``power_pipeline``) is the one the verdict uses.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from ..config.seeding import numpy_generator
from .rows import alternative_text
from .settings import Settings
from .stats import CONFIDENCE, Prediction


def simulated_power(pred: Prediction, alternative: float, se: float, dof: float, n_sim: int, rng) -> float:
    """Share of simulated studies (true value ``alternative``) in which the verdict rule rejects the
    claim (at_most, equal) or confirms it (greater, less): see the module's doc."""
    if not (np.isfinite(se) and se >= 0 and np.isfinite(dof) and dof >= 1 and np.isfinite(alternative)):
        return math.nan
    est = alternative + se * rng.standard_normal(n_sim)
    se_hat = se * np.sqrt(rng.chisquare(dof, n_sim) / dof)
    two = float(sps.t.ppf(0.5 + CONFIDENCE / 2, dof)) * se_hat
    v = pred.value
    if pred.kind == "at_most":
        return float(np.mean(est - float(sps.t.ppf(CONFIDENCE, dof)) * se_hat > v))
    if pred.kind == "equal":
        holds = (est - two <= v) & (v <= est + two) & (2 * two <= pred.tolerance)
        return float(np.mean(~holds))
    if pred.kind == "within":  # the equivalence fails to be shown
        holds = (v - pred.tolerance <= est - two) & (est + two <= v + pred.tolerance)
        return float(np.mean(~holds))
    if pred.kind == "greater":
        return float(np.mean(est - two > v))
    return float(np.mean(est + two < v))


def fails_to_reject(kind: str, verdict: str) -> bool:
    """Whether a verdict is a failure to reject, which means something only with power: "consistent", and
    "holds" on an equality. A directional "holds" (the interval wholly above or below the value) is a
    rejection: its power is stated, it does not decide it."""
    return verdict == "consistent" or (verdict == "holds" and kind == "equal")


# Analyses whose 'holds' is a choice between two fitted models: power vetoes it too (analysis.online_form)
MODEL_CHOICE = ("online_error_form",)


def verdict_now(row) -> str:
    """A committed claims row's verdict under this module's rule. Tables written before a directional
    'holds' kept its verdict whatever its power (before commit 042d647) read 'undecided' there, its power
    vetoing it (column ``power_veto``); the prediction's kind and the power are in the row, so the verdict
    follows from them alone."""
    verdict = str(row["verdict"])
    vetoed = str(row.get("power_veto", "")).strip().lower() in ("true", "1", "1.0")
    if (
        verdict == "undecided"
        and vetoed
        and str(row.get("prediction_kind", "")) in ("greater", "less")
        and str(row.get("analysis", "")) not in MODEL_CHOICE
    ):
        return "holds"
    return verdict


def add_power(
    row: dict,
    pred: Prediction,
    name: str,
    alternative: float,
    se: float,
    dof: float,
    s: Settings,
    pipeline: float = math.nan,
) -> dict:
    """Put the power against ``name`` (true value ``alternative``) into a claims row: the normal plug-in
    (``power_plugin``), the simulation of the whole pipeline where one was run (``power_pipeline``,
    :mod:`.pipeline_power`), and in ``power`` the one the verdict uses, the pipeline's where it exists; a
    verdict that fails to reject (:func:`fails_to_reject`) below ``s.min_power`` becomes 'undecided'."""
    rng = numpy_generator("verdict-power", s.study_seed, row["claim"])
    plugin = simulated_power(pred, alternative, se, dof, s.power_simulations, rng)
    return record_power(row, name, alternative, plugin, s, fails_to_reject(pred.kind, row["verdict"]), pipeline)


def record_power(
    row: dict,
    name: str,
    alternative: float,
    plugin: float,
    s: Settings,
    fails_to_reject: bool,
    pipeline: float = math.nan,
    how: str = "",
) -> dict:
    """The power columns of a claims row and the veto: ``power`` is the pipeline's where one was simulated, else
    the plug-in; a verdict that ``fails_to_reject`` below ``s.min_power`` becomes 'undecided', saying against what
    and ``how`` the power was found (default: plug-in, or simulated pipeline)."""
    p = pipeline if np.isfinite(pipeline) else plugin
    row["power"], row["power_plugin"], row["power_pipeline"] = p, plugin, pipeline
    row["alternative"] = alternative_text(name, alternative)
    row["alternative_name"], row["alternative_value"] = name, alternative
    if fails_to_reject and not p >= s.min_power:
        how = how or ("simulated pipeline" if np.isfinite(pipeline) else "plug-in")
        row["why"] = f"undecided (power {p:.2f} against {name or 'no rival'}, {how}); " + row["why"]
        row["verdict"], row["power_veto"] = "undecided", True
    return row
