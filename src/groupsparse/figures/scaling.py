"""Figures of the scaling fits and the ablations (PNG + PDF, matplotlib Agg).

Every panel shows the per-seed data (a censored seed at its bound, with a marker and a legend entry
saying which bound; one without a value at the panel's floor, never at a number), the level statistic
the fit uses (hollow circles), the fitted line with its bootstrap band, and says in its title, in
words, which configuration it is about.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.claims import Analysis
from ..analysis.concentration import law_comparison, rss
from ..analysis.scaling_laws import ATTENTION_RESOLUTION, REACHED_AT_START, FitRecord
from ..analysis.stats import CONFIDENCE, one_sided_low
from . import empty_figure as _empty
from . import figure_title, mark_at_floor, panel_title, save
from . import panel_grid as _grid
from .sample_complexity import online_error_figure, sample_complexity_figure
from .words import method_words, metric_words, variant_label


def _band(rec: FitRecord, xs: np.ndarray):
    f = rec.fit
    if not f.boot_slope.size:
        return None
    # the same construction as the slope's interval: t quantile x bootstrap standard error
    lines = f.boot_intercept[:, None] + f.boot_slope[:, None] * xs[None]
    half = (f.high - f.slope) * lines.std(axis=0, ddof=1) / f.boot_slope.std(ddof=1)
    centre = f.intercept + f.slope * xs
    return np.vstack([centre - half, centre + half])


def fit_panel(
    ax,
    rec: FitRecord,
    *,
    x_exp: bool,
    y_exp: bool,
    theory_slope: float | None = None,
    x_label: str = "",
    y_label: str = "",
    extra_title: str = "",
) -> None:
    """Data, level statistics, fitted line, bootstrap band; axes in natural units on log scales.

    A censored seed is drawn at its bound with a marker that says which bound: not reached by the
    run's end (a lower bound, at the run's last record) or reached before the first record (an
    upper bound with no time measured: at the panel's floor, never at a number)."""
    tx = np.exp if x_exp else (lambda v: v)
    ty = np.exp if y_exp else (lambda v: v)
    pts, f = rec.points, rec.fit
    censored = pts["censored"].astype(bool)
    ok, cens = pts[~censored], pts[censored]
    if len(ok):
        ax.scatter(
            tx(ok["x"]),
            ty(ok["y"]),
            s=14,
            color="0.45",
            label="seeds" if (pts["seed"] >= 0).any() else "seed-mean curve",
            zorder=2,
        )
    reasons = cens["reason"].astype(str) if "reason" in cens.columns else pd.Series("", cens.index)
    at_start = reasons.str.startswith(REACHED_AT_START)
    bounded = cens[~at_start]
    if len(bounded):
        ax.scatter(
            tx(bounded["x"]),
            ty(bounded["y"]),
            s=30,
            marker="^",
            facecolors="none",
            edgecolors="C3",
            label="not reached by the run's end\n(drawn at its last record: a lower bound)",
            zorder=3,
        )
    mark_at_floor(
        ax,
        tx(cens.loc[at_start, "x"]),
        marker="v",
        color="C3",
        label="reached before the first record\n(no time measured: drawn at the floor)",
    )
    used = f.used
    # hollow, so the seeds under it stay visible
    ax.scatter(
        tx(f.x[used]),
        ty(f.y[used]),
        s=70,
        facecolors="none",
        edgecolors="C0",
        lw=1.5,
        label="level statistic (fitted)",
        zorder=4,
    )
    if np.isfinite(f.slope):
        xs = np.linspace(f.x[used].min(), f.x[used].max(), 50)
        ax.plot(
            tx(xs),
            ty(f.intercept + f.slope * xs),
            color="C0",
            label=f"fit: slope {f.slope:.2f} [{f.low:.2f}, {f.high:.2f}]",
        )
        band = _band(rec, xs)
        if band is not None:
            ax.fill_between(tx(xs), ty(band[0]), ty(band[1]), color="C0", alpha=0.2, label=f"{CONFIDENCE:.0%} band")
        if theory_slope is not None:
            x0, y0 = xs.mean(), f.intercept + f.slope * xs.mean()
            ax.plot(
                tx(xs), ty(y0 + theory_slope * (xs - x0)), "--", color="C2", label=f"theory: slope {theory_slope:g}"
            )
    if x_exp:
        ax.set_xscale("log")
        ticks = np.unique(np.exp(pts["x"]))
        ax.set_xticks(ticks, [f"{t:.3g}" for t in ticks])
        ax.minorticks_off()
    if y_exp:
        ax.set_yscale("log")
    ax.set_xlabel(x_label or rec.x_name)
    ax.set_ylabel(y_label or rec.y_name)
    blocker = f.blocker()
    why = f"\n(no verdict: {blocker})" if blocker and rec.claim else ""
    panel_title(ax, _title(rec) + why + (f"\n{extra_title}" if extra_title else ""))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")


def _title(rec: FitRecord) -> str:
    """What the panel is about in words (d, the method), and how many levels and seeds it rests on."""
    g = rec.group
    about = [f"d = {g['d']}"] if "d" in g else []
    if g.get("method"):
        about.append(method_words(str(g["method"])))
    seeds = sorted(set(int(k) for k in rec.fit.seeds))
    each = f"{seeds[0]} seeds each" if len(seeds) == 1 else f"{min(seeds)}-{max(seeds)} seeds each"
    # the levels are the points on the panel: count them, do not list them (long lists ran into the next panel)
    return f"{rec.label}; {', '.join(about)}\n{len(rec.fit.names)} values of D, {each}"


MAX_PANELS = 12  # a figure with more panels is unreadable on a screen: split it (or say what is left out)


def drawable(records: list[FitRecord]) -> tuple[list[FitRecord], list[FitRecord]]:
    """Records with at least one uncensored point, and those with only censored markers (not drawn:
    an empty panel says less than one line naming them)."""
    keep = [r for r in records if (~r.points["censored"].astype(bool)).any()]
    return keep, [r for r in records if r not in keep]


def _not_drawn(dropped: list[FitRecord], extra: list[FitRecord]) -> str:
    notes = []
    if dropped:
        notes.append(
            f"{len(dropped)} panel(s) with only censored seeds not drawn: {', '.join(_short(r) for r in dropped)}"
        )
    if extra:
        notes.append(
            f"{len(extra)} more panel(s) in tables/scaling_fits.parquet: {', '.join(_short(r) for r in extra)}"
        )
    # wrapped: a one-line list of every dropped panel widened the figure past its panels
    return "".join("\n" + textwrap.fill(note, 150) for note in notes)


def _short(rec: FitRecord) -> str:
    g = {k: v for k, v in rec.group.items() if k not in ("quantity", "at", "c", "threshold")}
    return f"{rec.label} ({', '.join(f'{k} = {v}' for k, v in g.items())})"


def convergence_figure(records: list[FitRecord], descriptive: bool = False):
    """Steps to a target against D: the theorem's targets (one-sided claim: at most D^3; the D^3
    line for reference), or with ``descriptive`` the fixed thresholds (descriptive rates): two
    figures, each at most MAX_PANELS panels, none of only censored markers."""
    what = "fixed thresholds" if descriptive else "the theorem's targets"
    # theorem targets carry a constant c; fixed thresholds (and the loss target) do not. Both are rates
    # (the bound's constant kappa_c is the claim), so the split goes by the target, not the flag
    records = sorted((r for r in records if ("c" not in r.group) == descriptive), key=lambda r: r.group.get("d", 0))
    records, dropped = drawable(records)
    records, extra = records[:MAX_PANELS], records[MAX_PANELS:]
    if not records:
        return _empty(f"steps to {what} vs D", "no runs with role scaling" + _not_drawn(dropped, extra))
    fig, axes = _grid(len(records))
    for ax, rec in zip(axes, records):
        if "c" not in rec.group:  # a fixed threshold
            note = "descriptive rate: the theorem bounds no fixed-threshold time"
        else:
            f = rec.fit
            low = one_sided_low(f.slope, f.boot_slope, f.dof)
            note = f"slope >= {low:.2f} (one-sided {CONFIDENCE:.0%}; a rate: the claim is the constant kappa_c)"
        fit_panel(
            ax,
            rec,
            x_exp=True,
            y_exp=True,
            theory_slope=3.0,
            x_label="D (groups)",
            y_label="flow time tau (gradient descent: eta x steps)",
            extra_title=note,
        )
    title = (
        "Flow time until the mean attention on j* (or the loss) first reaches a fixed threshold (descriptive rates)"
        if descriptive
        else "Flow time until min over queries of S[j*, j] >= 1 - exp(-c D) (theorem: O(D^3) suffices)"
    )
    figure_title(fig, title + "; dashed: slope 3 through the fit's centre" + _not_drawn(dropped, extra))
    return fig


def concentration_panel(ax, exp_rec: FitRecord, pow_rec: FitRecord, comparison: dict | None) -> None:
    """1 - min attention at kappa D^3 steps against D (log y): seeds, level means, both laws."""
    pts, f = exp_rec.points, exp_rec.fit
    ok = pts[~pts["censored"].astype(bool) & np.isfinite(pts["y"])]
    cens = pts[pts["censored"].astype(bool)]
    if len(ok):
        ax.scatter(ok["x"], np.exp(ok["y"]), s=14, color="0.45", label="seeds", zorder=2)
    reasons = cens["reason"].astype(str) if "reason" in cens.columns else pd.Series("", cens.index)
    below = reasons.str.startswith("below")
    if below.any():  # 1 - min attention under float32's resolution: an upper bound, drawn at that bound
        ax.scatter(
            cens.loc[below, "x"],
            np.full(int(below.sum()), ATTENTION_RESOLUTION),
            marker="v",
            facecolors="none",
            edgecolors="C3",
            label=f"below float32 resolution\n(drawn at its bound {ATTENTION_RESOLUTION:g})",
            zorder=3,
        )
    # diverged, or the run ended before this flow time: no value at all
    mark_at_floor(ax, cens.loc[~below, "x"], marker="x", color="C3", label="no value (diverged or run too short)")
    used = f.used
    ax.scatter(
        f.x[used],
        np.exp(f.y[used]),
        s=70,
        facecolors="none",
        edgecolors="C0",
        lw=1.5,
        label="level mean (of log)",
        zorder=4,
    )
    if np.isfinite(f.slope) and used.sum() >= 2:
        D = np.linspace(f.x[used].min(), f.x[used].max(), 60)
        p = pow_rec.fit
        ax.plot(D, np.exp(f.intercept + f.slope * D), color="C1", label=f"exp: exp({f.slope:.3f} D), RSS {rss(f):.3g}")
        ax.plot(
            D,
            np.exp(p.intercept + p.slope * np.log(D)),
            "--",
            color="C2",
            label=f"power: D^{p.slope:.2f}, RSS {rss(p):.3g}",
        )
    if not (len(ok) or below.any() or np.isfinite(f.y[used]).any()):  # nothing measured: a log axis needs a range
        ax.set_ylim(ATTENTION_RESOLUTION, 1)
    ax.set_yscale("log")
    # D on a linear axis: a label per level, skipping those closer than 1/20 of the range to the last one labelled
    # (D = 4 ... 32 beside 192 ran together); every level keeps an unlabelled tick
    levels = np.unique(f.x)
    labelled = []
    for v in levels:
        if not labelled or v - labelled[-1] >= (levels[-1] - levels[0]) / 20:
            labelled.append(v)
    ax.set_xticks(levels, minor=True)
    ax.set_xticks(labelled, [f"{v:g}" for v in labelled])
    ax.set_xlabel("D (groups)")
    ax.set_ylabel("1 - min over queries of attention on j*")
    decision = f"; better law: {comparison['decision']}" if comparison else ""
    blocker = f.blocker()
    panel_title(
        ax,
        f"d = {exp_rec.group['d']}, at flow time {exp_rec.group['at']}{decision}"
        + (f"\n(no verdict: {blocker})" if blocker else ""),
        fontsize=9,
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")


def concentration_figure(records: list[FitRecord]):
    if not records:
        return _empty("1 - min attention vs D", "no scaling runs")
    pairs: dict = {}
    for r in records:
        pairs.setdefault((r.group["d"], r.group["at"]), {})[r.group["law"]] = r
    comparisons = {(c["d"], c["at"]): c for c in law_comparison(records)}
    keys = [k for k in pairs if {"exponential", "power"} <= set(pairs[k])]
    if not keys:
        return _empty("1 - min attention vs D", "no pair of fits")
    fig, axes = _grid(len(keys))
    for ax, k in zip(axes, keys):
        concentration_panel(ax, pairs[k]["exponential"], pairs[k]["power"], comparisons.get(k))
    figure_title(
        fig,
        "1 - min over queries of S[j*, j] at flow time kappa D^3: the theorem's exp(-Theta(D)) (solid) "
        "against a power of D (dashed)",
    )
    return fig


def ablations_figure(table: pd.DataFrame, config: dict | None = None):
    """Per metric (and transfer size), every ablation's mean with its interval beside the reference run's."""
    if table is None or not len(table):
        return _empty("ablations", "no ablation runs")
    table = table.assign(
        what=[
            metric_words(m) if not meth else f"{metric_words(m)}: {method_words(meth)}, n = {n:g}"
            for m, meth, n in zip(table["metric"], table["method"], table["n"])
        ]
    )
    whats = list(dict.fromkeys(table["what"]))
    fig, axes = _grid(len(whats), panel_height=1.2 + 0.3 * table["ablation"].nunique())
    for ax, what in zip(axes, whats):
        t = table[table["what"] == what].reset_index(drop=True)
        y = np.arange(len(t))
        err = np.vstack([t["mean"] - t["low"], t["high"] - t["mean"]]).clip(min=0)
        ax.errorbar(
            t["mean"], y, xerr=err, fmt="o", color="C0", capsize=3, label=f"mean, {CONFIDENCE:.0%} interval over seeds"
        )
        base = t["baseline_mean"].dropna()
        if len(base):
            ax.axvline(base.iloc[0], color="C3", ls="--", lw=1, label="the reference run (no change)")
        ax.set_yticks(
            y, [f"{variant_label(a, config)}, {k} seeds" for a, k in zip(t["ablation"], t["n_seeds"])], fontsize=7
        )
        panel_title(ax, what, fontsize=9)
        ax.grid(alpha=0.3)
    # one legend below the panels: inside one it covered the bottom row
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8)
    figure_title(fig, "Ablations: one change to the base task at a time, beside the reference run")
    return fig


def write_all(analysis: Analysis, directory, names=None, config: dict | None = None) -> list[Path]:
    """The scaling figures (``names``: those of them to draw; None: every one) as PNG and PDF;
    ``config``: the study's config, whose variants' settings name them in words."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    by = lambda name: [r for r in analysis.fits if r.analysis == name]  # noqa: E731
    figures = {
        "convergence_time": lambda: convergence_figure(by("convergence_time")),
        "convergence_thresholds": lambda: convergence_figure(by("convergence_time"), descriptive=True),
        "attention_concentration": lambda: concentration_figure(by("attention_concentration")),
        "sample_complexity": lambda: sample_complexity_figure(
            [r for r in analysis.joint if r.analysis == "sample_complexity"]
        ),
        "online_error": lambda: online_error_figure([r for r in analysis.joint if r.analysis == "online_error"]),
        "ablations": lambda: ablations_figure(analysis.ablations, config),
    }
    wanted = [n for n in figures if names is None or n in names]
    return [p for name in wanted for p in save(figures[name](), directory, name)]
