"""The study's statistics, in one place (docs/STUDY.md section 6): the interval, n*, fits, the verdict rule.

One interval method for every table and figure: **the estimate -+ Student's t quantile x its
standard error** at :data:`CONFIDENCE`.

* A mean over k seeds (every summary table, the final-state claims, the ablations) uses the
  analytic standard error s / sqrt(k) with k - 1 degrees of freedom (Welch's for a difference of
  two means). With 3-5 seeds a percentile bootstrap covers about 80% for a nominal 95%; the t
  interval covers 95% for normal seed-to-seed noise and 93-94% for a moderately skewed law
  (gamma, skewness 1) - see tests/unit/test_intervals.py; for a strongly skewed law
  (exponential, skewness 2) no method without a model of the law reaches 92% at 3-5 seeds (t: 88%).
* A statistic with no closed-form standard error (a slope through levels, a crossing n* of a
  seed-mean curve) takes its standard error from a bootstrap over seeds, resampled within each
  level, the resampled statistics first widened by sqrt(k / (k - 1)) (resampling k seeds shrinks
  the spread by that), with Welch-Satterthwaite degrees of freedom for a slope. A simulation of a
  slope over 4 levels covered 92-96% at 3, 4 and 8 seeds (a percentile bootstrap: 80-88%).
* Intervals of bounded metrics (attention mass and accuracy in [0, 1], a cosine in [-1, 1], a
  loss or a norm >= 0) are clipped to the metric's range (:data:`METRIC_RANGES`).

Fits (lines and planes through level statistics, bootstrap over seeds) live in :mod:`.fits`.

Censoring: n* (steps or samples until a target) comes from :func:`first_crossing` alone; a curve
never reaching it gives its last x as a lower bound, ``reached = False``. Bootstraps are seeded by
the analysis' identity, so reruns are identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ..config.seeding import numpy_generator

CONFIDENCE = 0.95  # two-sided intervals
MIN_LEVELS = 3  # distinct x values a slope needs before it can decide a claim
MIN_SEEDS = 2  # seeds per level an interval needs
MIN_VALID_BOOTSTRAP = 0.95  # share of resamples that must give a finite (uncensored) slope
EXPONENT_TOLERANCE = 1.0  # an exponent interval wider than this cannot confirm an equality

# The range each bounded metric can take; an interval never leaves it.
UNIT = (0.0, 1.0)
NONNEGATIVE = (0.0, math.inf)
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "attention_on_relevant": UNIT,
    "attention_min_on_relevant": UNIT,
    "eval_accuracy": UNIT,
    "test_accuracy": UNIT,
    "train_accuracy": UNIT,
    "cos_v1_vstar": (-1.0, 1.0),
    "eval_loss": NONNEGATIVE,
    "test_loss": NONNEGATIVE,
    "v1_norm": NONNEGATIVE,
    "v2_norm": NONNEGATIVE,
    "W_ff_norm": NONNEGATIVE,
    "W_fp_norm": NONNEGATIVE,
    "W_pf_norm": NONNEGATIVE,
    "W_pp_norm": NONNEGATIVE,
}
UNBOUNDED = (-math.inf, math.inf)

VERDICTS = (
    "holds",
    "does not hold",
    "consistent",
    "undecided",  # consistent, or holds on an equality, but the power against the named alternative is below min_power
    "inconclusive",
    "descriptive",
    # the pre-registered law test (analysis.predict): the law whose point predictions err least
    *(f"{law} predicts best" for law in ("theorem", "power", "nested", "exponential")),
    "no law passes",  # the closest law fails lack of fit on the fit levels
    # the difference of the criterion between two laws (analysis.law_difference): its interval excludes 0, or not
    *(f"{law} predicts better" for law in ("theorem", "power", "nested", "exponential")),
    "tie",
    "agrees",  # the batch check: another batch (or step size) gives the grid's value within the tolerance
    "differs",
)  # see VERDICT_RULE

VERDICT_RULE = (
    f"A claim is tested on a {CONFIDENCE:.0%} interval over seeds (estimate -+ Student t quantile x standard "
    f"error: s / sqrt(k) with k - 1 degrees of freedom for means, a bootstrap standard error with Welch-"
    f"Satterthwaite degrees of freedom for slopes and n*; clipped to the metric's range). 'inconclusive' whenever "
    f"the data cannot decide: fewer than {MIN_LEVELS} levels in a fit, fewer than {MIN_SEEDS} seeds at a level, a "
    f"level with censored data (threshold never reached), or under {MIN_VALID_BOOTSTRAP:.0%} of resamples usable. "
    f"Otherwise, prediction 'equal v': holds if v lies in the interval and the interval is at most its tolerance "
    f"wide (exponents: {EXPONENT_TOLERANCE}), does not hold if v lies outside, inconclusive if the interval is too "
    f"wide; 'v within m' (an equivalence): holds if the interval lies inside [v - m, v + m], does not hold if it "
    f"lies wholly outside, else inconclusive; 'greater than v': holds if the interval lies above v, does not "
    f"hold if it lies below, else inconclusive; 'less than v': the mirror image. An upper bound 'at most v' (a "
    f"theorem's sufficient time, e.g. T* = O(D^3)) is tested one-sided: 'does not hold' (exceeds v over the "
    f"range measured) only if the one-sided "
    f"{CONFIDENCE:.0%} lower bound (estimate - t_(dof, {CONFIDENCE}) x standard error) lies above v, else "
    f"'consistent' (not contradicted). A verdict with a named alternative states its power against it (by "
    f"simulating the whole pipeline at the study's design where that is done, else the normal plug-in from its "
    f"measured standard error and degrees of freedom; both shown). A failure to reject, 'consistent' or a "
    f"'holds' on an equality, below scaling.analysis.min_power reads 'undecided (power p)'; a 'holds' on a "
    f"directional claim is a rejection at the interval's level and keeps its verdict whatever its power. A "
    f"pretraining verdict whose interval edge lies within scaling.analysis.machine_spread (relative) of the "
    f"predicted value could flip on another machine: inconclusive (not applied to transfer verdicts, whose "
    f"spread is not measured). The out-of-sample law test "
    f"names the law whose point predictions (fitted on D <= fit_D_max) have the smallest sum of absolute log "
    f"errors over the tested D, the same criterion for every law, fixed before the data; 'no law passes' when "
    f"that law fails lack of fit on the fit levels; the difference of the criterion between two laws has an interval "
    f"(the range over a joint {CONFIDENCE:.0%} box of the tested level means): '<law> predicts better' when it "
    f"excludes 0, 'tie' when it holds 0. The batch check reads 'agrees' when the paired difference "
    f"from a run at another batch (or step size) has its interval within +-batch_tolerance (log scale), "
    f"'differs' when the interval lies outside it. "
    f"The shape of n* over the (d, D) grid: 'holds' when the two-sided intervals of the fitted exponents (a, b) "
    f"meet the region that the expected shape (d + D or d D, fitted by the same model on the grid's points) "
    f"gives and not the other's, 'does not hold' when they miss it, else inconclusive. "
    f"Rates and constants the theory does not bound are 'descriptive': a measured value with its interval, "
    f"no verdict."
)


# -- the interval ----------------------------------------------------------------------------


def t_quantile(dof: float) -> float:
    return float(sps.t.ppf(0.5 + CONFIDENCE / 2, dof))


def clip_interval(low: float, high: float, bounds: tuple[float, float] = UNBOUNDED) -> tuple[float, float]:
    """[low, high] clipped to the range a metric can take (NaN stays NaN)."""
    lo, hi = bounds
    return (
        min(max(low, lo), hi) if not math.isnan(low) else low,
        max(min(high, hi), lo) if not math.isnan(high) else high,
    )


def difference_range(bounds: tuple[float, float]) -> tuple[float, float]:
    """The range of a difference of two values of a metric with range ``bounds``."""
    width = bounds[1] - bounds[0]
    return -width, width


def mean_interval(values, bounds: tuple[float, float] = UNBOUNDED) -> tuple[float, float, float]:
    """(mean, low, high) of the seeds' values: the t interval s / sqrt(k) x t_{k-1}, clipped to ``bounds``.

    Non-finite values are dropped; no values: all NaN; one value: its mean and a NaN interval.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan
    half = t_quantile(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (mean, *clip_interval(mean - half, mean + half, bounds))


def max_of_means_interval(levels: list) -> tuple[float, float, float, int]:
    """The largest of several levels' means (each level its seeds' values) with an interval that accounts
    for its being a maximum: every level's t interval at confidence 1 - (1 - CONFIDENCE) / L (Bonferroni,
    L levels) covers its mean with probability at least CONFIDENCE jointly, so the largest lower and the
    largest upper ends bracket the largest mean. Returns (max of the means, low, high, the level of the
    max). The interval at the level of the maximum alone undercovers where levels are close: the largest
    sample mean is biased up (tests/unit/test_theorem_coverage.py)."""
    xs = [np.asarray(x, dtype=float)[np.isfinite(np.asarray(x, dtype=float))] for x in levels]
    L = len(xs)
    if not L or any(x.size < 2 for x in xs):
        means = [float(x.mean()) if x.size else math.nan for x in xs]
        top = int(np.nanargmax(means)) if any(np.isfinite(means)) else 0
        return (means[top] if means else math.nan), math.nan, math.nan, top
    level = 1 - (1 - CONFIDENCE) / L
    lows, highs, means = [], [], []
    for x in xs:
        half = float(sps.t.ppf(0.5 + level / 2, x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)
        means.append(float(x.mean()))
        lows.append(means[-1] - half)
        highs.append(means[-1] + half)
    top = int(np.argmax(means))
    return means[top], max(lows), max(highs), top


def difference_interval(a, b, bounds: tuple[float, float] = UNBOUNDED) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): Welch's t interval, clipped to the range of a difference."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if not a.size or not b.size:
        return math.nan, math.nan, math.nan
    delta = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return delta, math.nan, math.nan
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return delta, delta, delta
    dof = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = t_quantile(dof) * se
    return (delta, *clip_interval(delta - half, delta + half, difference_range(bounds)))


def bootstrap_generator(*identity: object) -> np.random.Generator:
    """The bootstrap's generator, seeded by what is being resampled (numpy ints made plain)."""
    plain = [int(p) if isinstance(p, np.integer) else float(p) if isinstance(p, np.floating) else p for p in identity]
    return numpy_generator("scaling-bootstrap", *plain)


def widen(point, boot: np.ndarray, k: int) -> np.ndarray:
    """Undo the sqrt((k - 1) / k) shrinkage of spread that resampling k seeds brings."""
    return point + math.sqrt(k / (k - 1)) * (boot - point) if k > 1 else boot


def one_sided_low(point: float, boot: np.ndarray, dof: float) -> float:
    """point - t_{dof} quantile (one-sided, at :data:`CONFIDENCE`) x the bootstrap standard error."""
    low, _ = t_interval(point, boot, dof)
    return point - (point - low) * float(sps.t.ppf(CONFIDENCE, dof)) / t_quantile(dof)


def t_interval(point: float, boot: np.ndarray, dof: float) -> tuple[float, float]:
    """point -+ t_{dof} quantile x the bootstrap standard error; NaN if there is nothing to go on."""
    boot = np.asarray(boot, dtype=float)
    boot = boot[np.isfinite(boot)]
    if dof < 1 or boot.size < 2 or not np.isfinite(point):
        return math.nan, math.nan
    half = t_quantile(dof) * float(boot.std(ddof=1))
    return point - half, point + half


# -- the verdict rule --------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """The theory on a number: equal to, greater or less than ``value``, or ``at_most`` it (one-sided:
    ``low`` is then the one-sided lower bound, ``high`` inf)."""

    kind: str  # "equal" | "within" | "greater" | "less" | "at_most"
    value: float
    # "equal": the widest interval that can still confirm it; "within": the margin around value
    tolerance: float = math.inf

    def __post_init__(self):
        if self.kind not in ("equal", "within", "greater", "less", "at_most"):
            raise ValueError(f"prediction kind must be equal, within, greater, less or at_most, got {self.kind!r}")


def verdict(pred: Prediction, low: float, high: float, *, blocker: str = "") -> tuple[str, str]:
    """(verdict, why) from the interval [low, high] by :data:`VERDICT_RULE`.

    ``blocker`` names a reason the data cannot decide (censoring, too few levels...); it makes
    the claim inconclusive whatever the interval says.
    """
    if blocker:
        return "inconclusive", blocker
    if not (np.isfinite(low) or np.isfinite(high)) or np.isnan(low) or np.isnan(high):
        return "inconclusive", "no interval"
    iv = f"[{low:.3g}, {high:.3g}]"
    v = pred.value
    if pred.kind == "equal":
        if v < low or v > high:
            return "does not hold", f"{v:g} outside {iv}"
        if high - low > pred.tolerance:
            return "inconclusive", f"{v:g} inside {iv}, but the interval is wider than {pred.tolerance:g}"
        return "holds", f"{v:g} inside {iv}"
    if pred.kind == "within":  # an equivalence test: the whole interval inside v -+ tolerance
        margin = f"[{v - pred.tolerance:g}, {v + pred.tolerance:g}]"
        if v - pred.tolerance <= low and high <= v + pred.tolerance:
            return "holds", f"{iv} inside {margin}"
        if high < v - pred.tolerance or low > v + pred.tolerance:
            return "does not hold", f"{iv} outside {margin}"
        return "inconclusive", f"{iv} overlaps the edge of {margin}"
    b = f"one-sided {CONFIDENCE:.0%} lower bound {low:.3g}"  # "at_most": low is that bound
    if pred.kind == "at_most" and low > v:
        return "does not hold", f"{b} exceeds {v:g} over the range measured"
    if pred.kind == "at_most":
        return "consistent", f"{b} <= {v:g}: consistent with at most {v:g}"
    above, below = low > v, high < v
    if pred.kind == "greater":
        if above:
            return "holds", f"{iv} above {v:g}"
        return ("does not hold", f"{iv} below {v:g}") if below else ("inconclusive", f"{iv} contains {v:g}")
    if below:
        return "holds", f"{iv} below {v:g}"
    return ("does not hold", f"{iv} above {v:g}") if above else ("inconclusive", f"{iv} contains {v:g}")


def region_verdict(
    a: tuple[float, float], b: tuple[float, float], regions: dict, expected: str | None, *, blocker: str = ""
) -> tuple[str, dict[str, bool]]:
    """(verdict, {region: met}) of "the fitted (a, b) lies in the ``expected`` region": a region
    (a_low, a_high, b_low, b_high) is met when both intervals overlap its ranges; holds when the
    expected region is met and no other, does not hold when it is not met, else inconclusive."""
    meets = {
        name: bool(a[0] <= ahi and alo <= a[1] and b[0] <= bhi and blo <= b[1])
        for name, (alo, ahi, blo, bhi) in regions.items()
    }
    if blocker or expected is None or not all(np.isfinite([*a, *b])):
        return "inconclusive", meets
    if not meets[expected]:
        return "does not hold", meets
    return ("holds" if not any(m for name, m in meets.items() if name != expected) else "inconclusive"), meets


# -- n*: threshold crossings (censoring-aware) --------------------------------------------


def first_crossing(x, Y, threshold: float, *, direction: str = "up", log_x: bool = True):
    """First x at which each row of Y reaches ``threshold`` (>= for "up", <= for "down").

    Y holds values at the increasing points ``x`` (one curve per row; NaN = not recorded).
    Between the last point short of the threshold and the first at or past it, x is
    interpolated linearly in the value, on a log scale of x when both points are positive.
    Returns (x_cross, reached); a row that never reaches it gets its last recorded x (a lower
    bound) and reached = False.
    """
    x = np.asarray(x, dtype=float)
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    if Y.shape[1] != x.size:
        raise ValueError(f"curves have {Y.shape[1]} points but x has {x.size}")
    if x.size and np.any(np.diff(x) <= 0):
        raise ValueError("x must be strictly increasing")
    with np.errstate(invalid="ignore"):
        hit = threshold <= Y if direction == "up" else threshold >= Y
    reached = hit.any(axis=1)
    first = hit.argmax(axis=1)
    rows = np.arange(Y.shape[0])
    prev = np.maximum(first - 1, 0)
    ya, yb = Y[rows, prev], Y[rows, first]
    xa, xb = x[prev], x[first]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where((first > 0) & np.isfinite(ya) & (yb != ya), (threshold - ya) / (yb - ya), 1.0)
        frac = np.clip(frac, 0.0, 1.0)
        use_log = log_x & (xa > 0) & (xb > 0)
        xl = np.exp(
            np.log(np.where(use_log, xa, 1.0))
            + frac * (np.log(np.where(use_log, xb, 1.0)) - np.log(np.where(use_log, xa, 1.0)))
        )
        xlin = xa + frac * (xb - xa)
    out = np.where(use_log, xl, xlin)
    out = np.where(first == 0, x[0] if x.size else np.nan, out)
    finite = np.isfinite(Y)
    last_idx = np.where(finite.any(axis=1), x.size - 1 - finite[:, ::-1].argmax(axis=1), 0)
    last_x = x[last_idx] if x.size else np.full(Y.shape[0], np.nan)
    return np.where(reached, out, last_x), reached


def n_star(x, y, target: float) -> float:
    """The x at which one increasing-target curve first reaches ``target`` (:func:`first_crossing`),
    inf if it never does on the grid (censored above), x[0] if it already does there."""
    xs, reached = first_crossing(x, np.asarray(y, dtype=float)[None], target)
    return float(xs[0]) if reached[0] else math.inf


def fmt_values(values) -> str:
    return ", ".join(f"{v:g}" for v in np.asarray(values, dtype=float))
