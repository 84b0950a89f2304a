"""Figures of the (d, D) grid's joint fits: n* against D per d, and the average online error against n."""

from __future__ import annotations

import numpy as np

from ..analysis.sample_complexity import JointRecord
from ..analysis.stats import CONFIDENCE
from . import empty_figure as empty
from . import figure_title, panel_title
from . import panel_grid as grid
from .words import method_label

D_COLORS = ("C0", "C1", "C2", "C3", "C4", "C5")


def _log_y(ax) -> None:
    """A log y axis labelled at 1, 2, 5 x 10^k in plain numbers (a panel often spans less than a decade)."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _interval(rec: JointRecord, name: str, shown: str | None = None) -> str:
    """'a = 0.78 [-0.98, 2.54]'; '' where the fit gave no number (every level censored: no fit to quote)."""
    t = next(t for t in rec.tests if t.coefficient.name == name)
    c = t.coefficient
    if not np.isfinite(c.value):
        return ""
    low, high = (f"{v:.2f}" if np.isfinite(v) else "?" for v in (c.low, c.high))
    return f"{shown or name} = {c.value:.2f} [{low}, {high}]"


def n_star_panel(ax, rec: JointRecord) -> None:
    """n* per grid point (filled: reached; open triangles: a bound) and the joint fit's line for each d."""
    pts, f = rec.points, rec.fit
    beta = [c.value for c in f.coefficients]
    any_censored = False
    for color, (d, g) in zip(D_COLORS, pts.groupby("d", sort=True)):
        ok, cens = g[~g["censored"]], g[g["censored"]]
        ax.scatter(ok["D"], np.exp(ok["y"]), color=color, s=36, label=f"d = {d}", zorder=3)
        if len(cens):  # the bound: the largest n of the grid, never reached there (points' reason)
            any_censored = True
            ax.scatter(cens["D"], np.exp(cens["y"]), marker="^", s=40, facecolors="none", edgecolors=color)
        if np.all(np.isfinite(beta)) and not f.blocker():  # no line through a fit that cannot decide
            Ds = np.linspace(g["D"].min(), g["D"].max(), 30)
            ax.plot(Ds, np.exp(beta[0] + beta[1] * np.log(d) + beta[2] * np.log(Ds)), "--", color=color, lw=1)
    if any_censored:  # one legend entry for the open triangles of every d
        ax.scatter(
            [],
            [],
            marker="^",
            s=40,
            facecolors="none",
            edgecolors="0.3",
            label="not reached on the grid (at least its largest n)",
        )
    blocker = f.blocker()  # censored levels are drawn as open triangles at their bound
    note = f"\nno verdict: {blocker}" if blocker else ""
    ax.set_xscale("log")
    _log_y(ax)
    Ds = np.unique(pts["D"])
    ax.set_xticks(Ds, [f"{D:g}" for D in Ds])
    ax.minorticks_off()
    ax.set_xlabel("D (groups)")
    ax.set_ylabel("n* (samples)" if rec.group["form"] == "n*" else "n* / log^2 n*")
    fits = ", ".join(
        x for x in (_interval(rec, "log d", "a"), _interval(rec, "log D", "b"), _interval(rec, "a + b")) if x
    )
    fits = f"n* ~ d^a D^b: {fits}" if fits else "no fit: no level reached the target"
    panel_title(ax, f"{method_label(rec.group['method'])}, {rec.label}\n{fits}{note}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")


MAX_PANELS = 12  # as the scaling figures: more panels are unreadable on a screen


def sample_complexity_figure(records: list[JointRecord]):
    records = [r for r in records if r.group["form"] == "n*"]
    if not records:
        return empty("samples to target accuracy vs (d, D)", "no transfer results for scaling runs")
    # a panel of only censored markers says less than a line naming it; over MAX_PANELS, the highest
    # accuracy target is drawn (the verdicts' own) and the others are named (their fits: the tables)
    shown = [r for r in records if (~r.points["censored"].astype(bool)).any()]
    hidden = [f"{method_label(r.group['method'])}, {r.label}" for r in records if r not in shown]
    notes = [f"only censored seeds, not drawn: {', '.join(hidden)}"] if hidden else []
    if len(shown) > MAX_PANELS:
        top = max(float(r.group.get("threshold", 0)) for r in shown)
        notes.append(f"other accuracy targets in tables/claims.csv; drawn: accuracy >= {top:g}")
        shown = [r for r in shown if float(r.group.get("threshold", 0)) == top][:MAX_PANELS]
    fig, axes = grid(len(shown))
    for ax, rec in zip(axes, shown):
        n_star_panel(ax, rec)
    figure_title(
        fig,
        f"Samples n* to a target test accuracy over the (d, D) grid; dashed: joint fit n* ~ d^a D^b "
        f"({CONFIDENCE:.0%} intervals over seeds).\n"
        "Theory: a + b <= 1 pretrained (d + D); a = b = 1 logistic regression (d D)" + "".join("\n" + n for n in notes),
    )
    return fig


def online_error_figure(records: list[JointRecord]):
    if not records:
        return empty("average online error vs n", "no online-SGD transfer results for scaling runs")
    fig, axes = grid(len(records))
    for ax, rec in zip(axes, records):
        pts = rec.points
        for (d, D), g in pts.groupby(["d", "D"], sort=True):
            color = D_COLORS[sorted(pts["d"].unique()).index(d) % len(D_COLORS)]
            style = ("-", "--", ":", "-.")[sorted(pts["D"].unique()).index(D) % 4]
            ax.plot(g["n"], np.exp(g["y"]), style, color=color, marker="o", ms=3, label=f"d={d}, D={D}")
        ax.set_xscale("log")
        _log_y(ax)
        ax.set_xlabel("n (samples, one SGD pass)")
        ax.set_ylabel("average online test error (seed mean)")
        fits = ", ".join(x for x in (_interval(rec, n) for n in ("log n", "log(d+D)")) if x) or "no fit"
        panel_title(ax, f"{method_label(rec.group['method'])}\nexponents: {fits}")
        ax.legend(fontsize=6, ncols=3, title="colour: d; line style: D", title_fontsize=6)
        ax.grid(alpha=0.3, which="both")
    figure_title(
        fig,
        "Average online error (1/n) sum_i P(error of iterate i) against n, per grid point; "
        "theory: at most O((d + D) log^2 n / n)",
    )
    return fig
