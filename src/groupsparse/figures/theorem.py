"""The theorem test's own figures. ``out_of_sample``: per d and kappa, the measured 1 - min attention at
kappa D^3 (geometric mean over seeds, t interval) against D, and each law's fit on D <= fit_D_max with
its prediction intervals at the larger D. ``population_limit``: per d and headline quantity, each
batch's geometric mean against D beside the batch -> infinity limit (``analysis.bound``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullLocator

from ..analysis.predict import rest_values
from ..analysis.stats import CONFIDENCE, mean_interval
from . import empty_figure, panel_grid, save

LAW_STYLE = {"power": ("C0", "power law"), "exponential": ("C3", "exponential law")}


def out_of_sample_figure(traj: pd.DataFrame, predictions: pd.DataFrame | None, kappas):
    if predictions is None or not len(predictions):
        return empty_figure("out-of-sample test", "no predictions table")
    measured = rest_values(traj, kappas) if len(traj) else pd.DataFrame()
    groups = sorted({(int(d), float(k)) for d, k in zip(predictions["d"], predictions["kappa"])})
    fig, axes = panel_grid(len(groups))
    for ax, (d, kappa) in zip(axes, groups):
        p = predictions[(predictions["d"] == d) & (predictions["kappa"] == kappa)]
        fit_max = int(p["fit_D_max"].iloc[0])
        if len(measured):
            m = measured[(measured["d"] == d) & (measured["kappa"] == kappa)]
            for D, g in m.groupby("D", sort=True):
                mean, lo, hi = mean_interval(g["log_rest"])
                if not np.isfinite(mean):
                    continue
                color = "k" if fit_max >= D else "C2"
                err = [[np.exp(mean) - np.exp(lo)], [np.exp(hi) - np.exp(mean)]] if np.isfinite(lo) else None
                # a diverged seed makes the claim inconclusive: the other seeds' mean drawn hollow
                hollow = bool((g["reason"] == "diverged").any())
                ax.errorbar(
                    D,
                    np.exp(mean),
                    yerr=err,
                    fmt="o",
                    color=color,
                    mfc="none" if hollow else color,
                    ms=4,
                    capsize=2,
                    label="a seed diverged (inconclusive)" if hollow else None,
                )
        for law, q in p.groupby("law", sort=True):
            color, label = LAW_STYLE.get(law, ("C7", law))
            q = q.sort_values("D")
            if not np.isfinite(q["slope"]).any():
                continue
            Ds = np.geomspace(4, q["D"].max(), 100)
            x = np.log(Ds) if law == "power" else Ds
            ax.plot(Ds, np.exp(q["intercept"].iloc[0] + q["slope"].iloc[0] * x), color=color, lw=1, label=label)
            ax.errorbar(
                q["D"] * (0.97 if law == "power" else 1.03),
                q["rest"],
                yerr=[q["rest"] - q["rest_low"], q["rest_high"] - q["rest"]],
                fmt="s",
                mfc="none",
                color=color,
                capsize=3,
            )
        ax.axvline(fit_max, color="0.6", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        # the measured and predicted D as plain numbers (log-axis labels like 3x10^1 overlap)
        ticks = sorted({int(x) for line in ax.get_lines() for x in line.get_xdata() if np.isfinite(x) and x > 0})
        ticks = [D for D in ticks if D in (4, 8, 16, 24, 32, 48, 64, 128)] or ticks
        ax.set_xticks(ticks, [str(D) for D in ticks])
        ax.minorticks_off()
        ax.set_xlabel("D (groups)")
        ax.set_ylabel("1 - min attention")
        ax.set_title(f"d = {d}, steps {kappa:g} D^3", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Out-of-sample test: laws fitted on D <= {fit_max} (black points), predicted with {CONFIDENCE:.0%} "
        "prediction intervals (open squares);\ngreen: measured beyond the fit (hollow: a seed diverged, the verdict is "
        "inconclusive; the other seeds' mean)"
    )
    return fig


def population_limit_figure(limits: list[dict], quantities: list[str]):
    """Per d and quantity: each batch's geometric mean over seeds against D, and the limit at batch ->
    infinity with its t interval (black). Batches left out of a limit (a seed diverged or never reached
    the smallest target there) are not drawn; the claims name them."""
    limits = [x for x in limits if x["quantity"] in quantities]
    if not limits:
        return empty_figure("population limit", "no D with 3 or more batches (scaling.batch_check)")
    groups = sorted({(x["d"], x["quantity"]) for x in limits}, key=lambda g: (g[0], quantities.index(g[1])))
    batches = sorted({b for x in limits for b in x["batches"] + x["left_out"]})
    colors = {b: plt.get_cmap("viridis")(i / max(len(batches) - 1, 1)) for i, b in enumerate(batches)}
    fig, axes = panel_grid(len(groups))
    for ax, (d, what) in zip(axes, groups):
        shown = set()
        for x in (x for x in limits if (x["d"], x["quantity"]) == (d, what)):
            for b, v in x.get("log_means", {}).items():
                label = f"batch {b}" if b not in shown else None
                shift = 0.96 + 0.04 * batches.index(b) / max(len(batches) - 1, 1)  # side by side, not on top
                ax.plot(x["D"] * shift, np.exp(v), "o", color=colors[b], ms=4, label=label)
                shown.add(b)
            if x["blocked"]:
                # at the axis' foot whatever the y range becomes (data y would move with later points)
                ax.annotate(
                    x["blocked"],
                    (x["D"], 0.02),
                    xycoords=("data", "axes fraction"),
                    fontsize=6,
                    rotation=90,
                    va="bottom",
                    ha="center",
                    color="0.4",
                )
                continue
            m, lo, hi = x["limit"]
            err = [[np.exp(m) - np.exp(lo)], [np.exp(hi) - np.exp(m)]]
            label = "batch -> infinity" if "limit" not in shown else None
            ax.errorbar(x["D"] * 1.06, np.exp(m), yerr=err, fmt="D", color="k", ms=4, capsize=2, label=label)
            shown.add("limit")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted({x["D"] for x in limits if (x["d"], x["quantity"]) == (d, what)})
        ax.set_xlim(min(ticks) / 1.3, max(ticks) * 1.3)  # one D alone: its markers side by side, not spread out
        ax.set_xticks(ticks, [str(D) for D in ticks])
        ax.xaxis.set_minor_locator(NullLocator())  # plain D labels on x; the log y axis keeps its minor ticks
        ax.set_xlabel("D (groups)")
        ax.set_ylabel("steps" if what.startswith("steps") else "1 - min attention")
        ax.set_title(f"{what} (d = {d})", fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(
        "Population limit: each batch's geometric mean over seeds, and the limit at batch -> infinity "
        f"({CONFIDENCE:.0%} t interval; per seed, linear in 1/batch)"
    )
    return fig


def write(traj, predictions, kappas, directory, limits: list[dict] | None = None, target_c=()) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = save(out_of_sample_figure(traj, predictions, kappas), directory, "out_of_sample")
    # the smallest theorem target's crossing time and 1 - min attention at 1 D^3 (or the middle kappa)
    kappa = 1.0 if 1.0 in [float(k) for k in kappas] else (sorted(kappas)[len(kappas) // 2] if kappas else 1.0)
    quantities = [f"1 - min attention at {float(kappa):g} D^3 steps"]
    if target_c:
        quantities.insert(0, f"steps until min attention >= 1 - exp(-{min(target_c):g} D)")
    return paths + save(population_limit_figure(limits or [], quantities), directory, "population_limit")
