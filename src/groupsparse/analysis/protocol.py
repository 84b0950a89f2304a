"""The paper's fine-tuning protocol as a verdict with its mechanism (docs/STUDY.md section 4.6).

A fine-tuning variant that keeps the pretrained read-out v (settings ``v_start: pretrained``; our
reading of the paper's protocol for the one that trains W and v) is paired with the variant whose
settings differ in ``v_start: zero`` only; the pairs come from the method registry's settings, no
method is named here. Per run, downstream and accuracy target:

- the verdict: log(n*_kept / n*_reset) > 0, resetting v needs fewer samples (the paired, censoring-aware
  gap of :func:`n_star_gap`, as for the gap to logistic regression);
- its mechanism: cos(v1, new v*) of the fitted read-out at the largest n, reset minus kept, > 0
  (paired over seeds): the kept v stays turned towards the old direction;
- the step sizes: the share of cross-validated fits whose chosen ``eta_rel`` lies at an edge of its
  grid, and the median chosen ``eta_rel`` (descriptive: a choice at the edge means the grid, not the
  data, bounds the step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..config.seeding import numpy_generator
from ..transfer.methods import registry
from .fits import mean_curve_crossing
from .inputs import downstreams, transfer_curves, without_role
from .pipeline_power import Level, fit_curve_model, simulate_power
from .power import add_power
from .rows import claim_row
from .settings import Settings
from .statements import About
from .stats import MIN_SEEDS, Prediction, bootstrap_generator, mean_interval, t_interval, verdict, widen

KEPT, RESET = "pretrained", "zero"  # the values of the v_start setting


@dataclass(frozen=True)
class Gap:
    """log(n*_reference / n*_method) over the seeds both have, with its censoring-aware interval."""

    measured: float
    low: float
    high: float
    se: float
    seeds: int
    method_never: bool  # the method never reaches the target: measured is an upper bound
    method_first: bool  # it reaches it at the first n: measured is a lower bound
    reference_never: bool
    reference_first: bool

    def blocker(self) -> str:
        if self.method_never and self.reference_never:
            return "neither method reaches the target"
        return f"{self.seeds} seed(s), need {MIN_SEEDS}" if self.seeds < MIN_SEEDS else ""

    def bounds_note(self, method: str, reference: str) -> str:
        return (
            (f" ({method} never reaches it: measured is an upper bound)" if self.method_never else "")
            + (f" ({method} reaches it at the first n: measured is a lower bound)" if self.method_first else "")
            + (f" ({reference} never reaches it: measured is a lower bound)" if self.reference_never else "")
            + (f" ({reference} reaches it at the first n: measured is an upper bound)" if self.reference_first else "")
        )


def paired_curves(transfer, run, downstream, method, reference):
    """((grid, curves) of ``method``, (grid, curves) of ``reference``) on the seeds both have, or None."""
    pre = transfer_curves(transfer, run, downstream, method)
    base = transfer_curves(transfer, run, downstream, reference)
    common = np.intersect1d(pre[1], base[1])
    if not common.size:
        return None
    pick = lambda c: c[2][np.searchsorted(c[1], common)]  # noqa: E731
    return (pre[0], pick(pre)), (base[0], pick(base))


def gap_of_curves(pre, base, target: float, rng, n_boot: int) -> Gap:
    """log(n*_reference / n*_method) of seed-aligned curves ((grid, seeds x grid) each), paired bootstrap over
    seeds. A method that never reaches the target has n* > n_max, one that reaches it at the first n has
    n* <= n_min: the bound is used, and the side of the interval it leaves unknown is set to infinity, so
    censoring can only widen the interval."""
    k = pre[1].shape[0]
    idx = np.vstack([np.arange(k)[None], rng.integers(0, k, size=(n_boot, k))])
    lp, pre_above, pre_below = mean_curve_crossing(pre[0], pre[1], target)(idx)
    lb, base_above, base_below = mean_curve_crossing(base[0], base[1], target)(idx)
    gap = lb - lp
    boot = widen(gap[0], gap[1:], k)
    lo, hi = t_interval(float(gap[0]), boot, k - 1)
    # the true gap is smaller where the method's n* or the reference's is only bounded that way
    lo = -math.inf if (pre_above | base_below).any() else lo
    hi = math.inf if (pre_below | base_above).any() else hi
    se = float(boot.std(ddof=1)) if boot.size > 1 else math.nan
    flags = bool(pre_above[0]), bool(pre_below[0]), bool(base_above[0]), bool(base_below[0])
    return Gap(float(gap[0]), lo, hi, se, int(k), *flags)


def gap_pipeline_power(pair, target: float, log_gap: float, claim: str, kind: str, s: Settings) -> float:
    """Power of a claim "the method needs fewer samples than the reference" (:func:`gap_of_curves`) by simulation
    of the whole pipeline (:mod:`.pipeline_power`): both methods' fitted curves, the reference's crossing
    where it was measured and the method's ``log_gap`` below it (the alternative), each study drawn, judged
    by the same bootstrap and verdict. ``pair``: :func:`paired_curves`' ((grid, curves) method, reference)."""
    if pair is None or s.pipeline_power_simulations <= 0:
        return math.nan
    levels = [Level(g, c.shape[0], fit_curve_model(g, c, s.test_size)) for g, c in pair]
    if levels[1].model is None or not levels[1].model.reaches(target):
        return math.nan  # the reference never reaches the target: no n* to place the gap against
    log_reference = levels[1].model.log_n_star(target)
    log_n = np.array([log_reference - log_gap, log_reference])
    pred = Prediction("greater", 0.0)

    def judge(curves, rng):
        g = gap_of_curves((pair[0][0], curves[0]), (pair[1][0], curves[1]), target, rng, s.pipeline_power_boot)
        return {claim: verdict(pred, g.low, g.high, blocker=g.blocker())[0]}

    rng = numpy_generator("pipeline-power", s.study_seed, kind, claim)
    return simulate_power(
        levels, log_n, target, judge, {claim: "greater"}, s.pipeline_power_simulations, s.test_size, rng
    )[claim]


def n_star_gap(transfer, run, downstream, method, reference, target, s: Settings, identity: tuple) -> Gap | None:
    """The gap log(n*_reference / n*_method) > 0 when ``method`` needs fewer samples (:func:`gap_of_curves`,
    generator from the study seed and ``identity``)."""
    pair = paired_curves(transfer, run, downstream, method, reference)
    if pair is None:
        return None
    return gap_of_curves(*pair, target, bootstrap_generator(s.study_seed, *identity), s.n_boot)


def reset_pairs(methods) -> list[tuple[str, str]]:
    """(kept, reset) method pairs among ``methods``: the same settings but v_start."""
    reg = registry()
    pairs = []
    for kept in methods:
        hp = reg[kept].defaults if kept in reg else {}
        if hp.get("v_start") != KEPT:
            continue
        for reset in methods:
            if (
                reset in reg
                and reg[reset].module is reg[kept].module
                and reg[reset].defaults == hp | {"v_start": RESET}
            ):
                pairs.append((kept, reset))
    return pairs


def protocol_claims(transfer: pd.DataFrame, s: Settings) -> list[dict]:
    rows: list[dict] = []
    if not len(transfer) or "p_v_start" not in transfer.columns:
        return rows
    runs = without_role(transfer, "ablation")
    for downstream in downstreams(transfer, s.downstream):
        for run in sorted(runs["run"].unique()):
            here = runs[(runs["run"] == run) & (runs["downstream"] == downstream)]
            for kept, reset in reset_pairs(sorted(here["method"].unique())):
                fitted = {m: set(here.loc[here["method"] == m, "p_v_start"].dropna()) for m in (kept, reset)}
                if fitted != {kept: {KEPT}, reset: {RESET}}:  # a config override changed the start
                    continue
                rows += _pair_claims(here, run, downstream, kept, reset, s)
    return rows


def _pair_claims(g: pd.DataFrame, run, downstream, kept, reset, s: Settings) -> list[dict]:
    d, D, role = (g[k].iloc[0] for k in ("d", "D", "role"))
    d, D, where = int(d), int(D), f"run {run}: d = {int(d)}, D = {int(D)}, downstream {downstream}"
    rows = []
    for target in s.accuracy_targets:
        gap = n_star_gap(g, run, downstream, reset, kept, target, s, ("protocol_gap", run, downstream, target, kept))
        if gap is None:
            continue
        pred = Prediction("greater", 0.0)
        about = About(
            subject=kept,
            reference=reset,
            run=str(run),
            downstream=str(downstream),
            d=float(d),
            D=float(D),
            target=float(target),
            replicates=float(gap.seeds),
        )
        row = claim_row(
            "protocol_gap",
            about,
            pred,
            gap.measured,
            gap.low,
            gap.high,
            gap.blocker(),
            f"{where}; measured = log(n*_{kept} / n*_{reset})" + gap.bounds_note(reset, kept),
            gap.seeds,
            "the pretrained v points along the old v*: fine-tuning must first undo it (the protocol's mechanism)",
            role,
        )
        # the alternative: the reset saves a factor 2 in samples (no power where the data cannot decide)
        se = math.nan if gap.blocker() else gap.se
        pair = paired_curves(g, run, downstream, reset, kept)
        sim = gap_pipeline_power(pair, target, math.log(2), row["claim"], "protocol_gap", s)
        alternative = ("a factor 2 fewer samples, log 2", math.log(2))
        rows.append(add_power(row, pred, *alternative, se, gap.seeds - 1, s, pipeline=sim))
    pair = About(subject=kept, reference=reset, run=str(run), downstream=str(downstream), d=float(d), D=float(D))
    rows.append(_alignment_claim(g, kept, reset, where, role, s, pair))
    rows.append(_step_row(g, kept, where, role, replace(pair, reference="")))
    return [r for r in rows if r is not None]


def _alignment_claim(g, kept, reset, where, role, s, about: About) -> dict | None:
    ok = g[(g["status"] == "ok") & g["cos_v1_new"].notna()] if "cos_v1_new" in g.columns else g.iloc[:0]
    sizes = sorted(set(ok.loc[ok["method"] == kept, "n"]) & set(ok.loc[ok["method"] == reset, "n"]))
    if not sizes:
        return None
    n = sizes[-1]
    at = ok[ok["n"] == n].pivot_table(index="seed", columns="method", values="cos_v1_new").dropna()
    diff = (at[reset] - at[kept]).to_numpy(float)
    m, lo, hi = mean_interval(diff, (-2.0, 2.0))
    start = g.loc[(g["method"] == kept) & (g["n"] == n), "cos_v1_new_start"]
    pred = Prediction("greater", 0.0)
    row = claim_row(
        "protocol_alignment",
        replace(about, at_n=float(n), replicates=float(diff.size)),
        pred,
        m,
        lo,
        hi,
        f"{diff.size} seed(s), need {MIN_SEEDS}" if diff.size < MIN_SEEDS else "",
        f"{where}; measured = mean over seeds of cos_v1_new({reset}) - cos_v1_new({kept}); "
        f"cos_v1_new {kept} {at[kept].mean():.3f}, {reset} {at[reset].mean():.3f}; "
        f"at the start {kept} {start.mean():.3f}",
        int(diff.size),
        "the kept v stays turned towards the old v*: the fitted read-out aligns less with the new one",
        role,
    )
    se = float(np.std(diff, ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else math.nan
    return add_power(row, pred, "a difference of 0.1", 0.1, se, diff.size - 1, s)


def _step_row(g, kept, where, role, about: About) -> dict | None:
    fits = g[(g["method"] == kept) & g["selection"].astype(str).str.match(r"cv|holdout")]
    if not len(fits) or "p_eta_rel" not in fits.columns:
        return None
    at_edge = fits["hp_edge"].fillna("").astype(str).str.split(",").map(lambda keys: "eta_rel" in keys)
    share = float(at_edge.mean())
    chosen = fits["p_eta_rel"].astype(float)
    grid = registry()[kept].grid.get("eta_rel") or []
    sides = (
        f"; at the upper edge {int((chosen == max(grid)).sum())}, at the lower {int((chosen == min(grid)).sum())}"
        if grid and set(chosen) <= set(grid)
        else "; grid overridden in the config: edge side not told"
    )
    row = claim_row(
        "protocol_steps",
        about,
        None,
        share,
        math.nan,
        math.nan,
        "",
        f"{where}; {int(at_edge.sum())} of {len(fits)} fits (every n and seed); chosen eta_rel median "
        f"{chosen.median():.3g}, range {chosen.min():.3g} .. {chosen.max():.3g}" + sides,
        len(fits),
        "a step chosen at the grid's edge is bounded by the grid, not by the data",
        role,
    )
    row["verdict"], row["why"] = "descriptive", "a measured share; no verdict"
    return row
