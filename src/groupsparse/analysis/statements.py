"""What a claim says, as data: its typed columns (:class:`About`) and the one place its text is made.

Every claims-table row names a ``statement`` (a key of :data:`STATEMENTS`): the analysis that makes
it, the README question it answers, the quantity it measures and the template of its text. The
row's typed columns (:data:`TYPED_COLUMNS`: the method, law or variant it is about, the algorithm,
batch and step-size rule, d, D or the grid of D, kappa, c, the accuracy target, the alternative its
power is against...) fill the template (:func:`claim_text`), so the text is made from them and never
read back: readers (the findings, `groupsparse review`, the study pages) select and format rows by
these columns. A new analysis adds a claim by adding a statement here and calling
:func:`.rows.claim_row` with an :class:`About`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Statement:
    analysis: str  # the claims table's ``analysis`` column
    question: int  # the README question it answers (1-4)
    quantity: str  # what is measured (a key of QUANTITY_WORDS), unless the row's About names another
    template: str  # the claim's text, str.format'ed with the row's fields and :func:`words`


WHERE = "{group_words}"  # a group of runs in the law test (its algorithm, settings and the fit's source)
AT = "(accuracy {target:g}, downstream {downstream})"

STATEMENTS: dict[str, Statement] = {
    # question 1: pretraining, the theorem's selection and its rate
    "final_attention": Statement(
        "final_state", 1, "attention_on_relevant", "mean attention mass on j* near 1 after pretraining ({run})"
    ),
    "final_cos": Statement("final_state", 1, "cos_v1_vstar", "cos(v1, v*) near 1 after pretraining ({run})"),
    "rate_level": Statement(
        "convergence_time",
        1,
        "flow_time",
        "rate (descriptive): flow time eta x steps until min over queries of S[j*, j] >= 1 - exp(-{c:g} D) "
        "(d = {d:.0f})",
    ),
    "rate_attention": Statement(
        "convergence_time",
        1,
        "flow_time",
        "rate (descriptive): flow time eta x steps until mean attention on j* >= {target:g} (d = {d:.0f})",
    ),
    "rate_loss": Statement(
        "convergence_time",
        1,
        "flow_time",
        "rate (descriptive): flow time eta x steps until eval loss <= {target:g} (d = {d:.0f})",
    ),
    "bound_constant": Statement(
        "bound_constant",
        1,
        "kappa",
        "min attention reaches 1 - exp(-{c:g} D) within flow time kappa D^3 at every measured D ({D_grid}) "
        "(d = {d:.0f}) (c {c_when})",
    ),
    "curvature": Statement(
        "attention_concentration",
        1,
        "rss_difference",
        "1 - min attention at flow time {kappa:g} D^3: curvature in D over the measured levels (d = {d:.0f})",
    ),
    "falls_with_D": Statement(
        "attention_concentration",
        1,
        "exponential_slope",
        "1 - min attention at flow time {kappa:g} D^3 falls with D (d = {d:.0f})",
    ),
    "out_of_sample": Statement(
        "out_of_sample",
        1,
        "rest",
        f"out-of-sample, {WHERE}: 1 - min attention at flow time {{kappa:g}} D^3, D = {{D:.0f}} (d = {{d:.0f}})",
    ),
    "law_test": Statement(
        "law_test",
        1,
        "criterion",
        f"pre-registered law test, {WHERE}: which law predicts 1 - min attention at flow time {{kappa:g}} D^3 at "
        "D = {D_grid_or_none} (d = {d:.0f})",
    ),
    "kappa_c_prediction": Statement(
        "kappa_c_prediction",
        1,
        "kappa",
        f"pre-registered kappa_c, {WHERE}: the {{law}} law's flow time to 1 - exp(-{{c:g}} D), over D^3, at D = "
        "{D:.0f} (d = {d:.0f})",
    ),
    "law_difference": Statement(
        "law_difference",
        1,
        "criterion_difference",
        f"pre-registered law test, {WHERE}: sum |log error| of {{subject}} minus that of {{reference}} at flow time "
        "{kappa:g} D^3 over D = {D_grid} (d = {d:.0f})",
    ),
    "law_rate": Statement(
        "law_rate",
        1,
        "law_rate",
        f"law fit, {WHERE}: the {{subject}} law's rate c in exp(-c D) at flow time {{kappa:g}} D^3, fitted on D = "
        "{D_grid} (d = {d:.0f})",
    ),
    "gap_log_growth": Statement(
        "mechanism",
        1,
        "gap_growth_exponent",
        "{algorithm_words}: the score gap between j* and the other keys grows like log flow time late in the run "
        "(D = {D:.0f}, d = {d:.0f})",
    ),
    "rest_follows_gap": Statement(
        "mechanism",
        1,
        "rate_difference",
        "{algorithm_words}: -log(1 - min attention) grows with log flow time as the score gap does (D = {D:.0f}, "
        "d = {d:.0f})",
    ),
    "flow_vs_gd": Statement(
        "flow_vs_gd",
        1,
        "flow_vs_gd",
        "population gradient flow against population gradient descent at eta = {eta:.4g}: {quantity} (D = {D:.0f}, "
        "d = {d:.0f})",
    ),
    "batch_check_rest": Statement(
        "batch_check",
        1,
        "log_rest_difference",
        "{check_words}, {algorithm_words}: 1 - min attention at flow time {kappa:g} D^3 at {setting_words} minus at "
        "{reference_setting_words} (d = {d:.0f}, D = {D:.0f})",
    ),
    "batch_check_time": Statement(
        "batch_check",
        1,
        "log_flow_time_difference",
        "{check_words}, {algorithm_words}: flow time until min attention >= 1 - exp(-{c:g} D) at {setting_words} "
        "minus at {reference_setting_words} (d = {d:.0f}, D = {D:.0f})",
    ),
    # question 2: ordinary training
    "reaches_level": Statement(
        "stability_by_D",
        2,
        "min_attention",
        "{variant} training reaches the theorem's level: min attention >= 1 - exp(-{c:g} D) (D = {D:.0f})",
    ),
    "last_step": Statement(
        "stability_by_D", 2, "", "{variant} training at D = {D:.0f}: {quantity_words} at the last step (d = {d:.0f})"
    ),
    "stability_v2": Statement(
        "stability",
        2,
        "v2_growth",
        "the symmetric solution is stable: |v2| / |v1| does not grow, {window} phase ({run})",
    ),
    "stability_W": Statement(
        "stability",
        2,
        "W_cross_growth",
        "the symmetric solution is stable: |W cross| / |W diagonal blocks| does not grow, {window} phase ({run})",
    ),
    # question 3: transfer
    "n_star_a_at_most": Statement(
        "sample_complexity", 3, "exponent_a", "{subject}: exponent a of d in {form} at most 1 " + AT
    ),
    "n_star_b_at_most": Statement(
        "sample_complexity", 3, "exponent_b", "{subject}: exponent b of D in {form} at most 1 " + AT
    ),
    "n_star_sum_at_most": Statement(
        "sample_complexity", 3, "exponent_sum", "{subject}: {form} grows no faster than d + D, a + b <= 1 " + AT
    ),
    "n_star_a_equals": Statement(
        "sample_complexity", 3, "exponent_a", "{subject}: exponent a of d in {form} equals 1 " + AT
    ),
    "n_star_b_equals": Statement(
        "sample_complexity", 3, "exponent_b", "{subject}: exponent b of D in {form} equals 1 " + AT
    ),
    "n_star_sum_equals": Statement(
        "sample_complexity", 3, "exponent_sum", "{subject}: {form} grows like d D, a + b = 2 " + AT
    ),
    "n_star_shape": Statement(
        "n_star_shape", 3, "exponent_a", "{subject}: the shape of n* over the (d, D) grid is {law} " + AT
    ),
    "online_form_dD": Statement(
        "online_error_form",
        3,
        "cv_difference",
        "{subject}: the bound's form with d + D fits the average online error better than with d D, free exponents "
        "(downstream {downstream})",
    ),
    "online_form_constant": Statement(
        "online_error_form",
        3,
        "cv_difference",
        "{subject}: the bound's form with d + D fits the average online error better than a constant in (d, D) "
        "(downstream {downstream})",
    ),
    "sample_gap": Statement(
        "sample_gap",
        3,
        "log_n_star_ratio",
        "{subject} needs fewer samples than {reference} for accuracy {target:g} ({run}, {downstream})",
    ),
    "protocol_gap": Statement(
        "protocol_gap",
        3,
        "log_n_star_ratio",
        "{subject} with v reset to 0 ({reference}) needs fewer samples for accuracy {target:g} ({run}, {downstream})",
    ),
    "protocol_alignment": Statement(
        "protocol_alignment",
        3,
        "cos_v1_new_difference",
        "cos(v1, new v*) after fine-tuning at n = {at_n:.0f}: higher from v = 0 ({reference}) than from the "
        "pretrained v ({subject}) ({run}, {downstream})",
    ),
    "protocol_steps": Statement(
        "protocol_steps",
        3,
        "share_at_edge",
        "{subject}: share of cross-validated step sizes at an edge of the eta_rel grid ({run}, {downstream})",
    ),
}

# The measured quantities a reader sees, in words (a quantity not listed reads as its key).
QUANTITY_WORDS = {
    "attention_on_relevant": "mean attention mass on j*",
    "cos_v1_vstar": "cos(v1, v*)",
    "flow_time": "flow time eta x steps",
    "kappa": "kappa, the constant of the flow time kappa D^3",
    "rest": "1 - min attention",
    "criterion": "sum over the tested D of |log measured - log predicted|",
    "criterion_difference": "difference of the sum |log error| between two laws",
    "law_rate": "the fitted rate c of exp(-c D)",
    "min_attention": "min attention",
    "mean_attention": "mean attention on j*",
    "v2_ratio": "|v2| / |v1|",
    "W_cross_ratio": "|W cross blocks| / |W diagonal blocks|",
    "eval_loss": "eval loss",
    "rest_vs_grid_flow_time": "log(1 - min attention) minus the grid run's (same seed, same flow time)",
    "rest_vs_grid_step": "log(1 - min attention) minus the grid run's (same seed, same step)",
    "log_n_star_ratio": "log of the ratio of samples needed",
}

# The algorithms that made a number, in the claims' words (the code where none is set).
ALGORITHM_WORDS = {
    "population": "population gradient descent",
    "flow": "population gradient flow",
    "batch": "batch gradient descent",
}


@dataclass(frozen=True)
class About:
    """The typed columns of one claims row (NaN or '' where they do not apply): what the claim is about."""

    quantity: str = ""  # overrides the statement's (rows of one statement measuring several quantities)
    subject: str = ""  # the method, law or variant the claim is about
    reference: str = ""  # what it is compared with: logreg, another law, the kept-v protocol
    law: str = ""  # a law or shape named by the claim (the n* shape's expected region)
    variant: str = ""  # the group of runs: '' for the grid, else its stability variant (plain512, zero_etaD...)
    algorithm: str = ""  # population | batch (closed-form gradient) | autograd | adam | '' (transfer)
    batch: float = math.nan
    eta: float = math.nan  # the step size at this D (where one D)
    eta_rule: str = ""  # the group's step sizes as the predictions table prints them
    reference_batch: float = math.nan  # the batch check: the grid run's batch and step size
    reference_eta: float = math.nan
    fitted_on: str = ""  # the law test: the runs the laws were fitted on where they are not this group's own
    samples: float = math.nan  # the flow (algorithm flow): its outer samples and solver tolerance
    rtol: float = math.nan
    reference_samples: float = math.nan  # the flow check: the grid run's
    reference_rtol: float = math.nan
    run: str = ""
    downstream: str = ""
    d: float = math.nan
    D: float = math.nan  # the one D a claim is about (the bound: the D where its largest ratio sits)
    D_grid: str = ""  # the D a claim spans, '4, 6, 8' (the law test: the tested D; the bound: the measured D)
    kappa: float = math.nan  # flow time kappa D^3
    c: float = math.nan  # the theorem's level 1 - exp(-c D)
    c_when: str = ""  # the bound: "fixed before the data" or "chosen after seeing data"
    target: float = math.nan  # an accuracy target (transfer), a threshold (descriptive rates)
    form: str = ""  # n* or n*/log^2 n*
    window: str = ""  # early | late (the symmetric solution's stability)
    at_n: float = math.nan  # the sample size a transfer claim is read at
    exponent_b: float = math.nan  # the n* shape: the exponent of D with its interval (a is the measured value)
    exponent_b_low: float = math.nan
    exponent_b_high: float = math.nan
    regions: str = ""  # the n* shape: the regions of (a, b) that d + D and d D give on the grid (for display)
    replicates: float = math.nan  # seeds per level behind the interval (the fewest)


TYPED_COLUMNS = ("statement", "question", *(f.name for f in fields(About)))


def levels(D_grid) -> list[int]:
    """The D of a ``D_grid`` column ('24, 32, 48' -> [24, 32, 48]; empty or NaN -> [])."""
    if not isinstance(D_grid, str) or not D_grid.strip():
        return []
    return [int(x) for x in D_grid.split(",")]


def grid_text(Ds) -> str:
    """[24, 32, 48] -> '24, 32, 48' (the ``D_grid`` column)."""
    return ", ".join(str(int(D)) for D in Ds)


def setting_words(batch: float, eta: float, samples: float = math.nan, rtol: float = math.nan) -> str:
    """'batch 512, eta 0.5' (the step size left out where unknown); the flow's 'N = 4096, rtol 1e-06'."""
    if isinstance(samples, float) and math.isfinite(samples):
        return f"N = {samples:.0f}" + (f", rtol {rtol:.0e}" if isinstance(rtol, float) and math.isfinite(rtol) else "")
    return f"batch {batch:.0f}" + (f", eta {eta:.4g}" if isinstance(eta, float) and math.isfinite(eta) else "")


def group_words(f: dict) -> str:
    """A group of runs in the law test: 'population gradient descent (grid, batch 128, eta(D): ...)', the
    flow's 'population gradient flow (grid, N = 2048, rtol 1e-06)', and ', laws fitted on <runs>' where
    its predictions come from other runs (another study's committed table)."""
    algorithm = ALGORITHM_WORDS.get(f.get("algorithm", ""), f.get("algorithm", ""))
    variant = "grid" if not f.get("variant") else f"variant {f['variant']}"
    samples, rtol = f.get("samples", math.nan), f.get("rtol", math.nan)
    if isinstance(samples, float) and math.isfinite(samples):
        settings = setting_words(math.nan, math.nan, samples, rtol)
    else:
        settings = f"batch {f.get('batch', math.nan):.0f}, {f.get('eta_rule', '')}"
    fitted = f", laws fitted on {f['fitted_on']}" if f.get("fitted_on") else ""
    return f"{algorithm} ({variant}, {settings}{fitted})"


def words(statement: str, about: About | dict) -> dict:
    """The fields a statement's template is filled with: the typed columns and the words made from them."""
    f = asdict(about) if isinstance(about, About) else dict(about)
    quantity = f.get("quantity") or STATEMENTS[statement].quantity
    return f | {
        "quantity": quantity,
        "quantity_words": QUANTITY_WORDS.get(quantity, quantity),
        "algorithm_words": ALGORITHM_WORDS.get(f.get("algorithm", ""), f.get("algorithm", "")),
        "variant_words": "grid" if not f.get("variant") else f"variant {f['variant']}",
        "D_grid_or_none": f.get("D_grid") or "none",
        "check_words": "flow check" if f.get("algorithm") == "flow" else "batch check",
        "group_words": group_words(f),
        "setting_words": setting_words(
            f.get("batch", math.nan), f.get("eta", math.nan), f.get("samples", math.nan), f.get("rtol", math.nan)
        ),
        "reference_setting_words": setting_words(
            f.get("reference_batch", math.nan),
            f.get("reference_eta", math.nan),
            f.get("reference_samples", math.nan),
            f.get("reference_rtol", math.nan),
        ),
    }


def claim_text(statement: str, about: About | dict) -> str:
    """The claim's text: its statement's template filled from its typed columns (the one place it is made)."""
    return STATEMENTS[statement].template.format(**words(statement, about))


def about_of(row) -> About:
    """The :class:`About` of a claims row (a dict or a pandas row with the typed columns)."""
    get = row.get if hasattr(row, "get") else row.__getitem__
    values = {}
    for f in fields(About):
        v = get(f.name)
        if f.type == "str":
            values[f.name] = "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
        else:
            values[f.name] = math.nan if v is None or v == "" else float(v)
    return About(**values)
