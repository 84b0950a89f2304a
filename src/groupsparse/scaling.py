"""Scaling laws, ablation effects and the claims table (STUDY.md sections 3, 4 and 6).

Pure numpy/pandas analysis of the pretraining trajectory and transfer tables:

* convergence time: the first step at which a seed's attention mass on j* reaches
  0.5 / 0.9 / 0.99 (or its eval loss falls under a target), fitted as log T against log D;
* sample complexity: the smallest n at which a method's seed-mean test accuracy reaches a
  target, fitted as log n* against log(d + D) and log(d * D);
* attention concentration: log(1 - attention mass) against D;
* ablations: final attention, loss and transfer accuracy of each variant beside the baseline;
* a claims table whose verdicts come from :func:`verdict`, never from hand.

Censored data are kept, not dropped: a seed that never reaches a threshold is recorded with
its last step as a lower bound and ``censored = True``; a fit level with censored data is left
out of that fit and the fit's verdict becomes "inconclusive" (leaving it out would bias the
slope, putting the bound in would too).

Intervals come from a bootstrap over seeds, resampled within each level (each D, or each
(d, D)), from generators seeded by the analysis' identity, so reruns are identical. With the
3-5 seeds a study affords, percentile intervals cover far too little (a simulation of a slope
over 4 levels gave 80% coverage at 3 seeds, 88% at 4 and 8, for a nominal 95%), so the interval
is the estimate +- Student's t quantile times the bootstrap standard error, the resampled
statistics first widened by sqrt(k / (k - 1)) (resampling k seeds shrinks the spread by that),
with Welch-Satterthwaite degrees of freedom for a slope (k - 1 for a mean of k seeds). The same
simulation then covers 92-96% at 3, 4 and 8 seeds (300 replicates each).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from .io import InputError
from .seeding import numpy_generator

CONFIDENCE = 0.95          # two-sided intervals
MIN_LEVELS = 3             # distinct x values a slope needs before it can decide a claim
MIN_SEEDS = 2              # seeds per level a bootstrap interval needs
MIN_VALID_BOOTSTRAP = 0.95 # share of resamples that must give a finite (uncensored) slope
ATTENTION_RESOLUTION = 1e-6  # 1 - mass below this is under float32 resolution: censored
EXPONENT_TOLERANCE = 1.0   # an exponent interval wider than this cannot confirm an equality

TRAJECTORY_COLUMNS = ("run", "d", "D", "seed", "step", "eval_loss", "attention_on_relevant", "cos_v1_vstar",
                      "status")
TRANSFER_COLUMNS = ("run", "d", "D", "downstream", "seed", "method", "n", "test_accuracy", "status")
PRETRAINED_METHOD = "pretrained_finetune"
# both pretrained variants are held to the theory's d + D (the paper fine-tunes by SGD; with W
# frozen only v adapts, which is what the theory's downstream analysis needs to move)
PRETRAINED_METHODS = ("pretrained_finetune", "pretrained_frozen_W")
BASELINE_METHOD = "logreg"

VERDICT_RULE = (
    f"A claim is tested on a {CONFIDENCE:.0%} interval over seeds (bootstrap standard error times a Student t "
    f"quantile; Welch-Satterthwaite degrees of freedom for slopes, seeds - 1 for means). "
    f"'inconclusive' whenever the data cannot decide: fewer than {MIN_LEVELS} levels in a fit, "
    f"fewer than {MIN_SEEDS} seeds at a level, a level with censored data (threshold never reached), "
    f"or under {MIN_VALID_BOOTSTRAP:.0%} of resamples usable. Otherwise, prediction 'equal v': holds if v "
    f"lies in the interval and the interval is at most its tolerance wide (exponents: "
    f"{EXPONENT_TOLERANCE}), does not hold if v lies outside, inconclusive if the interval is too wide; "
    f"'greater than v': holds if the interval lies above v, does not hold if it lies below, else "
    f"inconclusive; 'less than v': the mirror image."
)


def bootstrap_generator(*identity: object) -> np.random.Generator:
    """The bootstrap's generator, seeded by what is being resampled (numpy ints made plain)."""
    plain = [int(p) if isinstance(p, np.integer) else float(p) if isinstance(p, np.floating) else p for p in identity]
    return numpy_generator("scaling-bootstrap", *plain)


def widen(point, boot: np.ndarray, k: int) -> np.ndarray:
    """Undo the sqrt((k - 1) / k) shrinkage of spread that resampling k seeds brings."""
    return point + math.sqrt(k / (k - 1)) * (boot - point) if k > 1 else boot


def t_interval(point: float, boot: np.ndarray, dof: float) -> tuple[float, float]:
    """point -+ t_{dof} quantile x the bootstrap standard error; NaN if there is nothing to go on."""
    from scipy.stats import t as student_t

    boot = np.asarray(boot, dtype=float)
    boot = boot[np.isfinite(boot)]
    if dof < 1 or boot.size < 2 or not np.isfinite(point):
        return math.nan, math.nan
    half = float(student_t.ppf(0.5 + CONFIDENCE / 2, dof)) * float(boot.std(ddof=1))
    return point - half, point + half


# -- the verdict rule ----------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    """What the theory says about a measured number: equal to, greater than or less than ``value``."""

    kind: str                 # "equal" | "greater" | "less"
    value: float
    tolerance: float = math.inf  # "equal" only: the widest interval that can still confirm it

    def __post_init__(self):
        if self.kind not in ("equal", "greater", "less"):
            raise ValueError(f"prediction kind must be equal, greater or less, got {self.kind!r}")


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
    above, below = low > v, high < v
    if pred.kind == "greater":
        if above:
            return "holds", f"{iv} above {v:g}"
        return ("does not hold", f"{iv} below {v:g}") if below else ("inconclusive", f"{iv} contains {v:g}")
    if below:
        return "holds", f"{iv} below {v:g}"
    return ("does not hold", f"{iv} above {v:g}") if above else ("inconclusive", f"{iv} contains {v:g}")


# -- threshold crossings -------------------------------------------------------------------

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
        hit = Y >= threshold if direction == "up" else Y <= threshold
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
        xl = np.exp(np.log(np.where(use_log, xa, 1.0)) + frac * (np.log(np.where(use_log, xb, 1.0))
                                                                 - np.log(np.where(use_log, xa, 1.0))))
        xlin = xa + frac * (xb - xa)
    out = np.where(use_log, xl, xlin)
    out = np.where(first == 0, x[0] if x.size else np.nan, out)
    finite = np.isfinite(Y)
    last_idx = np.where(finite.any(axis=1), x.size - 1 - finite[:, ::-1].argmax(axis=1), 0)
    last_x = x[last_idx] if x.size else np.full(Y.shape[0], np.nan)
    return np.where(reached, out, last_x), reached


# -- input tables --------------------------------------------------------------------------

def check_columns(df: pd.DataFrame, needed: tuple[str, ...], what: str) -> None:
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(missing)}; has {', '.join(map(str, df.columns))}")


def final_rows(traj: pd.DataFrame) -> pd.DataFrame:
    """The last recorded row of each (run, seed): the end of training, or the last step before divergence."""
    return traj.sort_values("step").groupby(["run", "seed"], as_index=False).tail(1).sort_values(["run", "seed"])


def crossing_times(traj: pd.DataFrame, thresholds=(0.5, 0.9, 0.99), loss_target: float | None = None) -> pd.DataFrame:
    """Per (run, seed): steps until attention on j* reaches each threshold, and eval loss <= target.

    Columns: run, d, D, seed, quantity, threshold, step, censored, reason, last_step.
    A censored step is the last recorded step, a lower bound; reason says why ("not reached
    within the budget" or "diverged at step s").
    """
    check_columns(traj, TRAJECTORY_COLUMNS, "trajectory table")
    goals = [("attention_on_relevant", float(t), "up") for t in thresholds]
    if loss_target is not None:
        goals.append(("eval_loss", float(loss_target), "down"))
    out = []
    for (run, seed), g in traj.sort_values("step").groupby(["run", "seed"], sort=True):
        g = g.drop_duplicates("step", keep="last")
        steps = g["step"].to_numpy(dtype=float)
        diverged = (g["status"] != "ok").any()
        div_step = int(g["diverged_step"].iloc[-1]) if "diverged_step" in g.columns else -1
        for quantity, thr, direction in goals:
            t, reached = first_crossing(steps, g[quantity].to_numpy(dtype=float)[None], thr, direction=direction)
            at_start = bool(reached[0]) and t[0] <= steps[0]  # reached before any measurement: only an upper bound
            reason = ("" if reached[0] else f"diverged at step {div_step}" if diverged else
                      "not reached within the budget")
            reason = f"already reached at the first recorded step {steps[0]:g}" if at_start else reason
            out.append({"run": run, "d": int(g["d"].iloc[0]), "D": int(g["D"].iloc[0]), "seed": int(seed),
                        "quantity": quantity, "threshold": thr, "step": float(t[0]),
                        "censored": not bool(reached[0]) or at_start, "reason": reason, "last_step": float(steps[-1])})
    return pd.DataFrame(out, columns=["run", "d", "D", "seed", "quantity", "threshold", "step", "censored", "reason",
                                      "last_step"])


# -- fits with bootstrap intervals over seeds ----------------------------------------------

# A level statistic maps resampled seed indices (B, k) to (values (B,), censored (B,)).
LevelStat = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class Fit:
    """y = intercept + slope * x over levels; y is a statistic of each level's seeds."""

    x: np.ndarray               # level x values (all levels)
    y: np.ndarray               # level statistics (NaN where censored)
    censored: np.ndarray        # level statistic censored (excluded from the fit)
    seeds: np.ndarray           # seeds per level
    names: list[str] = field(default_factory=list)  # level names for messages ("D=16", "d=10, D=8")
    slope: float = math.nan
    intercept: float = math.nan
    low: float = math.nan
    high: float = math.nan
    r2: float = math.nan
    valid_fraction: float = math.nan
    boot_slope: np.ndarray = field(default_factory=lambda: np.empty(0))
    boot_intercept: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def used(self) -> np.ndarray:
        return ~self.censored & np.isfinite(self.y)

    @property
    def n_levels(self) -> int:
        return int(np.unique(self.x[self.used]).size)

    def local_slopes(self) -> list[float]:
        """Slopes between consecutive levels: a drifting sequence means the data are not yet a power law."""
        xs, ys = self.x[self.used], self.y[self.used]
        order = np.argsort(xs)
        xs, ys = xs[order], ys[order]
        return [float((ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])) for i in range(xs.size - 1) if xs[i + 1] > xs[i]]

    def blocker(self) -> str:
        """Why this fit cannot decide a claim ('' if it can), by :data:`VERDICT_RULE`."""
        if self.censored.any():
            where = [n for n, c in zip(self.names, self.censored) if c] if self.names else list(self.x[self.censored])
            return f"{int(self.censored.sum())} level(s) censored ({'; '.join(map(str, where))})"
        if self.n_levels < MIN_LEVELS:
            return f"only {self.n_levels} level(s) with data, need {MIN_LEVELS}"
        if self.seeds[self.used].min() < MIN_SEEDS:
            return f"a level has {int(self.seeds[self.used].min())} seed(s), need {MIN_SEEDS}"
        if not self.valid_fraction >= MIN_VALID_BOOTSTRAP:
            return f"only {self.valid_fraction:.0%} of bootstrap resamples usable (censored resamples)"
        return ""


def _fmt(values) -> str:
    return ", ".join(f"{v:g}" for v in np.asarray(values, dtype=float))


def _ols(x: np.ndarray, Y: np.ndarray):
    """Slopes and intercepts of each row of Y against x."""
    xc = x - x.mean()
    slope = (Y - Y.mean(axis=1, keepdims=True)) @ xc / (xc @ xc)
    return slope, Y.mean(axis=1) - slope * x.mean()


def fit_levels(x: np.ndarray, stats: list[LevelStat], n_seeds: list[int], *, n_boot: int,
               rng: np.random.Generator, names: list[str] | None = None) -> Fit:
    """Least-squares line through the levels' statistics, with a bootstrap over seeds within levels."""
    x = np.asarray(x, dtype=float)
    seeds = np.asarray(n_seeds, dtype=int)
    y = np.full(x.size, np.nan)
    cens = np.zeros(x.size, dtype=bool)
    for i, (stat, k) in enumerate(zip(stats, seeds)):
        val, c = stat(np.arange(k)[None])
        y[i], cens[i] = (np.nan if c[0] else val[0]), bool(c[0])
    fit = Fit(x, y, cens, seeds, list(names or []))
    used = fit.used
    if np.unique(x[used]).size < 2:
        return fit
    xs, ys = x[used], y[used]
    fit.slope, fit.intercept = (float(v[0]) for v in _ols(xs, ys[None]))
    resid = ys - (fit.intercept + fit.slope * xs)
    total = ((ys - ys.mean()) ** 2).sum()
    fit.r2 = float(1 - (resid**2).sum() / total) if total > 0 else math.nan
    Yb = np.empty((n_boot, used.sum()))
    bad = np.zeros(n_boot, dtype=bool)
    for col, i in enumerate(np.flatnonzero(used)):
        idx = rng.integers(0, seeds[i], size=(n_boot, seeds[i]))
        val, c = stats[i](idx)
        Yb[:, col] = widen(y[i], val, int(seeds[i]))
        bad |= c | ~np.isfinite(val)
    fit.valid_fraction = float(1 - bad.mean())
    if (~bad).any():
        fit.boot_slope, fit.boot_intercept = _ols(xs, Yb[~bad])
        fit.low, fit.high = t_interval(fit.slope, fit.boot_slope, _slope_dof(xs, Yb[~bad], seeds[used]))
    return fit


def _slope_dof(x: np.ndarray, Yb: np.ndarray, k: np.ndarray) -> float:
    """Welch-Satterthwaite degrees of freedom of a slope through level statistics of k seeds each."""
    xc = x - x.mean()
    c = (xc / (xc @ xc)) ** 2 * Yb.var(axis=0, ddof=1)  # each level's share of the slope's variance
    k = np.asarray(k, dtype=float)
    if np.any(k < 2) or c.sum() <= 0:
        return float(max(k.min() - 1, 0))
    return float(c.sum() ** 2 / (c**2 / (k - 1)).sum())


def mean_stat(values: np.ndarray, censored: np.ndarray | None = None) -> LevelStat:
    """Level statistic: the mean of per-seed values; censored if any drawn seed is."""
    values = np.asarray(values, dtype=float)
    cens = np.zeros(values.size, dtype=bool) if censored is None else np.asarray(censored, dtype=bool)
    return lambda idx: (values[idx].mean(axis=1), cens[idx].any(axis=1))


def mean_curve_crossing(grid: np.ndarray, curves: np.ndarray, threshold: float):
    """For resampled seed indices: (log n*, above, below) of the seed-mean curve.

    above: never reached, the true n* lies above the value (n_max); below: reached already at
    the first grid point, the true n* lies below it. Averaging the seeds' curves before locating
    the crossing keeps a single lucky draw (one noisy accuracy per seed and n) from deciding n*.
    """
    grid, curves = np.asarray(grid, dtype=float), np.asarray(curves, dtype=float)

    def crossing(idx):
        with warnings.catch_warnings():  # an all-NaN column (every fit failed) is simply not reached
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(curves[idx], axis=1)
        n_star, reached = first_crossing(grid, mean, threshold)
        return np.log(n_star), ~reached, reached & (n_star <= grid[0])
    return crossing


def curve_crossing_stat(grid: np.ndarray, curves: np.ndarray, threshold: float) -> LevelStat:
    """Level statistic: log n* of the seed-mean curve; censored if only a bound is known."""
    crossing = mean_curve_crossing(grid, curves, threshold)

    def stat(idx):
        value, above, below = crossing(idx)
        return value, above | below
    return stat


# -- the analyses --------------------------------------------------------------------------

@dataclass
class FitRecord:
    """One fitted relation, what it is about, and the observations behind it."""

    analysis: str        # convergence_time | sample_complexity | attention_concentration
    label: str           # e.g. "attention >= 0.9", "accuracy >= 0.8"
    group: dict          # fixed settings: d, method, downstream, target...
    x_name: str          # e.g. "log D"
    y_name: str          # e.g. "log steps"
    fit: Fit
    points: pd.DataFrame  # per seed (or per level) observations: x, y, censored, level
    prediction: Prediction | None = None
    claim: str = ""
    theory: str = ""

    def row(self) -> dict:
        f = self.fit
        return {"analysis": self.analysis, "label": self.label, **{k: self.group.get(k) for k in GROUP_KEYS},
                "x": self.x_name, "y": self.y_name, "slope": f.slope, "intercept": f.intercept, "low": f.low,
                "high": f.high, "confidence": CONFIDENCE, "r2": f.r2,
                "local_slopes": _fmt(np.round(f.local_slopes(), 4)), "n_levels": f.n_levels,
                "n_levels_censored": int(f.censored.sum()), "levels": "; ".join(f.names),
                "seeds_min": int(f.seeds.min()) if f.seeds.size else 0, "bootstrap": int(f.boot_slope.size),
                "bootstrap_valid": f.valid_fraction, "usable": f.blocker() == "", "blocker": f.blocker()}


GROUP_KEYS = ("d", "D", "method", "downstream", "quantity", "threshold", "at")


@dataclass(frozen=True)
class Settings:
    thresholds: tuple[float, ...] = (0.5, 0.9, 0.99)
    loss_target: float | None = 0.3
    accuracy_targets: tuple[float, ...] = (0.8, 0.9)
    methods: tuple[str, ...] = (PRETRAINED_METHOD, BASELINE_METHOD)
    downstream: tuple[str, ...] | None = ("transfer",)  # None: every downstream (incl. negative_control)
    near_one: float = 0.9                       # "near 1" for final attention and cos(v1, v*)
    scale_prefix: str = "scale_"
    ablation_prefix: str = "ablation_"
    baseline: str = "ablation_none"
    ablation_sizes: tuple[int, ...] | None = None  # None: smallest, middle and largest n of the grid
    ablation_methods: tuple[str, ...] = (PRETRAINED_METHOD,)
    n_boot: int = 2000
    study_seed: int = 0


def scale_runs(df: pd.DataFrame, s: Settings) -> pd.DataFrame:
    return df[df["run"].astype(str).str.startswith(s.scale_prefix)]


def convergence_time_fits(crossings: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """log T against log D at fixed d, per quantity and threshold; beside the theory's D^3."""
    records = []
    for (d, quantity, thr), g in crossings.groupby(["d", "quantity", "threshold"], sort=True):
        levels = sorted(g["D"].unique())
        stats, seeds = [], []
        for D in levels:
            h = g[g["D"] == D].sort_values("seed")
            stats.append(mean_stat(np.log(h["step"].clip(lower=1e-12)), h["censored"]))
            seeds.append(len(h))
        rng = bootstrap_generator(s.study_seed, "convergence_time", int(d), quantity, float(thr))
        fit = fit_levels(np.log(levels), stats, seeds, n_boot=s.n_boot, rng=rng, names=[f"D={D}" for D in levels])
        what = f"attention on j* >= {thr:g}" if quantity == "attention_on_relevant" else f"eval loss <= {thr:g}"
        g = g.sort_values(["D", "seed"])
        points = pd.DataFrame({"level": g["D"], "x": np.log(g["D"].astype(float)),
                               "y": np.log(g["step"].clip(lower=1e-12)),
                               "censored": g["censored"], "seed": g["seed"], "reason": g["reason"]})
        records.append(FitRecord(
            "convergence_time", what, {"d": int(d), "quantity": quantity, "threshold": float(thr)}, "log D",
            "log steps", fit, points, Prediction("equal", 3.0, EXPONENT_TOLERANCE),
            claim=f"steps until {what} grow like D^3 (d = {d})",
            theory="T* = Theta(D^3): slope of log T on log D = 3"))
    return records


def concentration_fits(traj: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """log(1 - attention mass on j*) against D at fixed d (theory: 1 - mass <= exp(-Theta(D))).

    Measured twice: at the end of each run, and at steps proportional to the theory's T* ~ D^3
    (step t_max (D / D_max)^3, t_max the shortest run's last step), since GD keeps sharpening
    attention and a fixed budget favours small D. Only the latter is a claim.
    """
    records = []
    for d, g in traj.groupby("d", sort=True):
        levels = sorted(g["D"].unique())
        t_max = float(g.groupby("run")["step"].max().min())
        for at in ("final", "D^3-scaled step"):
            stats, seeds, pts = [], [], []
            for D in levels:
                h = g[g["D"] == D]
                vals, cens, seed_ids = [], [], []
                for seed, c in h.sort_values("step").groupby("seed", sort=True):
                    c = c.drop_duplicates("step", keep="last")
                    ok = (c["status"] == "ok").all()
                    if at == "final":
                        step = float(c["step"].iloc[-1]) if ok else math.nan
                        rest = float(1 - c["attention_on_relevant"].iloc[-1])
                    else:
                        step = t_max * (D / levels[-1]) ** 3
                        rest = _interp_log(c["step"].to_numpy(float), 1 - c["attention_on_relevant"].to_numpy(float),
                                           step) if ok else math.nan
                    below = np.isfinite(rest) and rest < ATTENTION_RESOLUTION
                    vals.append(np.log(max(rest, ATTENTION_RESOLUTION)) if np.isfinite(rest) else np.nan)
                    cens.append(bool(below or not ok or not np.isfinite(rest)))
                    seed_ids.append(int(seed))
                    pts.append({"level": D, "x": float(D), "y": vals[-1], "censored": cens[-1], "seed": int(seed),
                                "reason": "diverged" if not ok else ("below float32 resolution" if below else ""),
                                "step": step})
                stats.append(mean_stat(np.asarray(vals), np.asarray(cens)))
                seeds.append(len(vals))
            rng = bootstrap_generator(s.study_seed, "attention_concentration", int(d), at)
            fit = fit_levels(np.asarray(levels, dtype=float), stats, seeds, n_boot=s.n_boot, rng=rng,
                             names=[f"D={D}" for D in levels])
            claim = (f"1 - attention mass on j* falls exponentially in D at steps ~ D^3 (d = {d})"
                     if at != "final" else "")
            records.append(FitRecord(
                "attention_concentration", f"1 - mass at {at}", {"d": int(d), "at": at}, "D", "log(1 - mass)", fit,
                pd.DataFrame(pts), Prediction("less", 0.0) if claim else None, claim=claim,
                theory="after T* ~ D^3 steps, 1 - S[j*, j] <= exp(-Theta(D)): slope of log(1 - mass) on D < 0"))
    return records


def _interp_log(steps: np.ndarray, values: np.ndarray, at: float) -> float:
    """log-log interpolation of a positive curve at step ``at`` (NaN outside the recorded range)."""
    if at < steps[0] or at > steps[-1]:
        return math.nan
    pos = steps > 0
    if not pos.any() or at <= steps[pos][0]:  # before the first positive step: linear from the start
        return float(np.interp(at, steps, values))
    with np.errstate(divide="ignore"):
        return float(np.exp(np.interp(np.log(at), np.log(steps[pos]), np.log(np.clip(values[pos], 1e-300, None)))))


def transfer_curves(transfer: pd.DataFrame, run: str, downstream: str, method: str):
    """(n grid, seeds, accuracy matrix seeds x n) of one method; failed fits are NaN."""
    check_columns(transfer, TRANSFER_COLUMNS, "transfer table")
    g = transfer[(transfer["run"] == run) & (transfer["downstream"] == downstream) & (transfer["method"] == method)]
    dup = g.duplicated(["seed", "n"])
    if dup.any():
        r = g[dup].iloc[0]
        raise InputError(f"transfer table: run {run!r}, downstream {downstream!r}, method {method!r} has several rows "
                         f"for seed {r['seed']}, n {r['n']} (tables from different configurations mixed?)")
    acc = g["test_accuracy"].where(g["status"] == "ok")
    table = g.assign(acc=acc).pivot(index="seed", columns="n", values="acc").sort_index().sort_index(axis=1)
    return table.columns.to_numpy(dtype=float), table.index.to_numpy(), table.to_numpy(dtype=float)


def _downstreams(transfer: pd.DataFrame, s: Settings) -> list[str]:
    found = sorted(transfer["downstream"].astype(str).unique())
    if s.downstream is None:
        return found
    missing = [x for x in s.downstream if x not in found]
    if missing:
        raise InputError(f"transfer table: no downstream {missing[0]!r}; it has {', '.join(found)}")
    return list(s.downstream)


REGRESSORS = {"d+D": lambda d, D: d + D, "d*D": lambda d, D: d * D}
EXPECTED_REGRESSOR = {m: "d+D" for m in PRETRAINED_METHODS} | {BASELINE_METHOD: "d*D"}


def sample_complexity_fits(transfer: pd.DataFrame, s: Settings) -> list[FitRecord]:
    """log n* against log(d + D) and log(d * D), per downstream, method and target accuracy."""
    scaled = scale_runs(transfer, s)
    records = []
    configs = scaled[["run", "d", "D"]].drop_duplicates().sort_values(["d", "D"]).to_numpy().tolist()
    for downstream in _downstreams(transfer, s) if len(scaled) else []:
        for method in s.methods:
            for target in s.accuracy_targets:
                for reg, fn in REGRESSORS.items():
                    stats, seeds, xs, pts, names = [], [], [], [], []
                    for run, d, D in configs:
                        grid, seed_ids, curves = transfer_curves(scaled, run, downstream, method)
                        if not seed_ids.size:
                            continue
                        stat = curve_crossing_stat(grid, curves, target)
                        stats.append(stat)
                        seeds.append(seed_ids.size)
                        xs.append(math.log(fn(d, D)))
                        names.append(f"d={d}, D={D}")
                        v, c = stat(np.arange(seed_ids.size)[None])
                        pts.append({"level": f"d={d}, D={D}", "d": d, "D": D, "x": xs[-1], "y": float(v[0]),
                                    "censored": bool(c[0]), "seed": -1,
                                    "reason": f"never reached within n <= {grid.max():g}" if c[0] else ""})
                    if not stats:
                        continue
                    rng = bootstrap_generator(s.study_seed, "sample_complexity", downstream, method, float(target), reg)
                    fit = fit_levels(np.asarray(xs), stats, seeds, n_boot=s.n_boot, rng=rng, names=names)
                    expected = EXPECTED_REGRESSOR.get(method) == reg
                    theory = ("test error O((d + D) log^2 n / n): n* ~ d + D (slope 1, a little under from log^2 n)"
                              if method in PRETRAINED_METHODS else "vectorised logistic regression needs n* ~ d D")
                    records.append(FitRecord(
                        "sample_complexity", f"accuracy >= {target:g}",
                        {"method": method, "downstream": downstream, "threshold": float(target)}, f"log({reg})",
                        "log n*", fit, pd.DataFrame(pts),
                        Prediction("equal", 1.0, EXPONENT_TOLERANCE) if expected else None,
                        claim=(f"{method}: samples for accuracy {target:g} grow like {reg} (downstream {downstream})"
                               if expected else ""), theory=theory))
    return records


# -- qualitative claims --------------------------------------------------------------------

def _mean_interval(values: np.ndarray, rng: np.random.Generator, n_boot: int) -> tuple[float, float, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(values.mean())
    means = values[rng.integers(0, values.size, size=(n_boot, values.size))].mean(axis=1)
    lo, hi = t_interval(mean, widen(mean, means, values.size), values.size - 1)
    return mean, lo, hi


def _claim(claim: str, theory: str, pred: Prediction | None, measured: float, low: float, high: float,
           blocker: str, config: str, analysis: str, n: int) -> dict:
    v, why = verdict(pred, low, high, blocker=blocker) if pred else ("inconclusive", "no prediction")
    return {"claim": claim, "theory": theory, "prediction": _pred_text(pred), "predicted_value": pred.value if pred else
            math.nan, "measured": measured, "low": low, "high": high, "confidence": CONFIDENCE, "verdict": v,
            "why": why, "n": n, "config": config, "analysis": analysis}


def _pred_text(pred: Prediction | None) -> str:
    if pred is None:
        return ""
    if pred.kind == "equal":
        width = f" (interval at most {pred.tolerance:g} wide)" if math.isfinite(pred.tolerance) else ""
        return f"= {pred.value:g}{width}"
    return f"{'>' if pred.kind == 'greater' else '<'} {pred.value:g}"


def final_state_claims(traj: pd.DataFrame, s: Settings) -> list[dict]:
    """Attention on j* and cos(v1, v*) near 1 at the end of pretraining, per non-ablation run."""
    rows = []
    last = final_rows(traj[~traj["run"].astype(str).str.startswith(s.ablation_prefix)])
    for run, g in last.groupby("run", sort=True):
        ok = g[g["status"] == "ok"]
        n_div = len(g) - len(ok)
        config = f"run {run}: d = {int(g['d'].iloc[0])}, D = {int(g['D'].iloc[0])}, step {int(g['step'].max())}, " \
                 f"{len(ok)} seed(s)" + (f", {n_div} diverged" if n_div else "")
        for col, what, theory in (
                ("attention_on_relevant", "mean attention mass on j*",
                 "after pretraining, S[j*, j] >= 1 - exp(-Theta(D)) for every query j"),
                ("cos_v1_vstar", "cos(v1, v*)", "after pretraining, v1 aligns with v*")):
            rng = bootstrap_generator(s.study_seed, "final_state", run, col)
            m, lo, hi = _mean_interval(ok[col].to_numpy(float), rng, s.n_boot)
            blocker = (f"{n_div} seed(s) diverged" if n_div else "") or (
                f"{len(ok)} seed(s), need {MIN_SEEDS}" if len(ok) < MIN_SEEDS else "")
            rows.append(_claim(f"{what} near 1 after pretraining ({run})", theory, Prediction("greater", s.near_one),
                               m, lo, hi, blocker, config, "final_state", len(ok)))
    return rows


def sample_gap_claims(transfer: pd.DataFrame, s: Settings) -> list[dict]:
    """log(n*_logreg / n*_pretrained) > 0 per run, downstream and target (paired bootstrap over seeds).

    A method that never reaches the target has n* > n_max, one that reaches it at the first n
    has n* <= n_min: the bound is used, and the side of the interval it leaves unknown is set
    to infinity, so censoring can only widen the interval.
    """
    rows = []
    if not len(transfer):
        return rows
    check_columns(transfer, TRANSFER_COLUMNS, "transfer table")
    for downstream in _downstreams(transfer, s):
        for run in sorted(transfer["run"].unique()):
            if str(run).startswith(s.ablation_prefix):
                continue
            base = transfer_curves(transfer, run, downstream, BASELINE_METHOD)
            for method in PRETRAINED_METHODS:
                pre = transfer_curves(transfer, run, downstream, method)
                common = np.intersect1d(pre[1], base[1])
                if not common.size:
                    continue
                d, D = (int(transfer.loc[transfer["run"] == run, k].iloc[0]) for k in ("d", "D"))
                pick = lambda c: c[2][np.searchsorted(c[1], common)]
                for target in s.accuracy_targets:
                    rng = bootstrap_generator(s.study_seed, "sample_gap", run, downstream, float(target),
                                              *(() if method == PRETRAINED_METHOD else (method,)))
                    idx = np.vstack([np.arange(common.size)[None],
                                     rng.integers(0, common.size, size=(s.n_boot, common.size))])
                    lp, pre_above, pre_below = mean_curve_crossing(pre[0], pick(pre), target)(idx)
                    lb, base_above, base_below = mean_curve_crossing(base[0], pick(base), target)(idx)
                    gap = lb - lp
                    lo, hi = t_interval(float(gap[0]), widen(gap[0], gap[1:], common.size), common.size - 1)
                    # the true gap is smaller where pretrained's n* or logreg's is only bounded that way
                    lo = -math.inf if (pre_above | base_below).any() else lo
                    hi = math.inf if (pre_below | base_above).any() else hi
                    blocker = ("neither method reaches the target" if pre_above[0] and base_above[0] else "") or (
                        f"{common.size} seed(s), need {MIN_SEEDS}" if common.size < MIN_SEEDS else "")
                    rows.append(_claim(
                        f"{method} needs fewer samples than logreg for accuracy {target:g} "
                        f"({run}, {downstream})",
                        "n* ~ d + D for the pretrained transformer vs d D for logistic regression on vec(X)",
                        Prediction("greater", 0.0), float(gap[0]), lo, hi, blocker,
                        f"run {run}: d = {d}, D = {D}, downstream {downstream}; measured = log(n*_logreg / n*_pretrained)"
                        + (" (pretrained never reaches it: measured is an upper bound)" if pre_above[0] else "")
                        + (" (pretrained reaches it at the first n: measured is a lower bound)" if pre_below[0] else "")
                        + (" (logreg never reaches it: measured is a lower bound)" if base_above[0] else "")
                        + (" (logreg reaches it at the first n: measured is an upper bound)" if base_below[0] else ""),
                        "sample_gap", int(common.size)))
    return rows


def fit_claims(records: list[FitRecord]) -> list[dict]:
    rows = []
    for r in records:
        if not r.claim:
            continue
        f = r.fit
        config = ", ".join(f"{k} = {v}" for k, v in r.group.items()) + f"; levels {'; '.join(f.names)}; " \
                 f"seeds per level {_fmt(f.seeds)}; local slopes {_fmt(np.round(f.local_slopes(), 3))}"
        rows.append(_claim(r.claim, r.theory, r.prediction, f.slope, f.low, f.high, f.blocker(), config, r.analysis,
                           int(f.seeds.sum())))
    return rows


# -- ablations -----------------------------------------------------------------------------

FINAL_METRICS = ("attention_on_relevant", "eval_loss", "eval_accuracy", "cos_v1_vstar")


def ablation_table(traj: pd.DataFrame, transfer: pd.DataFrame | None, s: Settings) -> pd.DataFrame:
    """Each ablation's final metrics and transfer accuracy at a few n, beside the baseline run.

    Columns: ablation, metric, method, n, mean, low, high, n_seeds, n_diverged, baseline_mean,
    delta, delta_low, delta_high (delta = ablation - baseline; independent bootstrap of both).
    """
    cols = ["ablation", "metric", "method", "n", "mean", "low", "high", "n_seeds", "n_diverged", "baseline_mean",
            "delta", "delta_low", "delta_high"]
    runs = sorted(r for r in traj["run"].astype(str).unique() if r.startswith(s.ablation_prefix))
    if not runs:
        return pd.DataFrame(columns=cols)
    if s.baseline not in runs and s.baseline not in set(traj["run"]):
        raise InputError(f"ablations: baseline run {s.baseline!r} is not among the trajectory tables' runs "
                         f"({', '.join(sorted(map(str, traj['run'].unique())))})")
    last = final_rows(traj)
    samples: dict[tuple, tuple[np.ndarray, int]] = {}
    for run in [s.baseline] + [r for r in runs if r != s.baseline]:
        g = last[last["run"] == run]
        ok = g[g["status"] == "ok"]
        for metric in FINAL_METRICS:
            samples[(run, metric, "", -1)] = (ok[metric].to_numpy(float), len(g) - len(ok))
    if transfer is not None and len(transfer):
        check_columns(transfer, TRANSFER_COLUMNS, "transfer table")
        downstream = _downstreams(transfer, s)[0]
        base_grid = transfer[(transfer["run"] == s.baseline)]["n"].unique()
        sizes = s.ablation_sizes or _few_sizes(np.sort(base_grid))
        for run in [s.baseline] + [r for r in runs if r != s.baseline]:
            for method in s.ablation_methods:
                grid, seed_ids, curves = transfer_curves(transfer, run, downstream, method)
                for n in sizes:
                    vals = curves[:, list(grid).index(n)] if n in grid else np.empty(0)
                    samples[(run, "test_accuracy", method, int(n))] = (vals, int(np.isnan(vals).sum()))
    rows = []
    for (run, metric, method, n), (vals, n_bad) in samples.items():
        rng = bootstrap_generator(s.study_seed, "ablation", run, metric, method, n)
        m, lo, hi = _mean_interval(vals, rng, s.n_boot)
        base_vals = samples.get((s.baseline, metric, method, n), (np.empty(0), 0))[0]
        base_vals = base_vals[np.isfinite(base_vals)]
        va = vals[np.isfinite(vals)]
        if va.size and base_vals.size:
            rng = bootstrap_generator(s.study_seed, "ablation-delta", run, metric, method, n)
            da = widen(va.mean(), va[rng.integers(0, va.size, size=(s.n_boot, va.size))].mean(axis=1), va.size)
            db = widen(base_vals.mean(), base_vals[rng.integers(0, base_vals.size, size=(s.n_boot, base_vals.size))]
                       .mean(axis=1), base_vals.size)
            delta, bmean = float(va.mean() - base_vals.mean()), float(base_vals.mean())
            # Welch-like but conservative: the smaller group's degrees of freedom
            dlo, dhi = t_interval(delta, da - db, min(va.size, base_vals.size) - 1)
        else:
            delta = dlo = dhi = bmean = math.nan
        rows.append({"ablation": run.removeprefix(s.ablation_prefix), "metric": metric, "method": method, "n": n,
                     "mean": m, "low": lo, "high": hi, "n_seeds": int(va.size), "n_diverged": int(n_bad),
                     "baseline_mean": bmean, "delta": delta, "delta_low": float(dlo), "delta_high": float(dhi)})
    return pd.DataFrame(rows, columns=cols)


def _few_sizes(grid: np.ndarray) -> tuple[int, ...]:
    if grid.size <= 3:
        return tuple(int(n) for n in grid)
    return tuple(int(n) for n in (grid[0], grid[grid.size // 2], grid[-1]))


# -- everything at once --------------------------------------------------------------------

@dataclass
class Analysis:
    fits: list[FitRecord]
    claims: pd.DataFrame
    ablations: pd.DataFrame
    crossings: pd.DataFrame

    def fits_table(self) -> pd.DataFrame:
        return pd.DataFrame([r.row() for r in self.fits])

    def points_table(self) -> pd.DataFrame:
        cols = ["analysis", "label", "group", "level", "seed", "x_name", "x", "y_name", "y", "censored", "reason"]
        frames = [r.points.assign(level=r.points["level"].astype(str), analysis=r.analysis, label=r.label,
                                  x_name=r.x_name, y_name=r.y_name,
                                  group=", ".join(f"{k}={v}" for k, v in r.group.items()))[cols]
                  for r in self.fits]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


CLAIM_COLUMNS = ["claim", "theory", "prediction", "predicted_value", "measured", "low", "high", "confidence", "verdict",
                 "why", "n", "config", "analysis"]


def analyse(traj: pd.DataFrame, transfer: pd.DataFrame | None, s: Settings = Settings()) -> Analysis:
    """Fits, claims (with verdicts by :func:`verdict`) and the ablation table from the input tables."""
    check_columns(traj, TRAJECTORY_COLUMNS, "trajectory table")
    transfer = transfer if transfer is not None else pd.DataFrame(columns=TRANSFER_COLUMNS)
    scaled = scale_runs(traj, s)
    crossings = crossing_times(scaled, s.thresholds, s.loss_target) if len(scaled) else pd.DataFrame()
    records = (convergence_time_fits(crossings, s) if len(crossings) else []) + \
              (concentration_fits(scaled, s) if len(scaled) else []) + sample_complexity_fits(transfer, s)
    claims = fit_claims(records) + final_state_claims(traj, s) + sample_gap_claims(transfer, s)
    return Analysis(records, pd.DataFrame(claims, columns=CLAIM_COLUMNS), ablation_table(traj, transfer, s), crossings)
