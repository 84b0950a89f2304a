"""The out-of-sample test in one figure: per d and kappa, the measured 1 - min attention at kappa D^3
(geometric mean over seeds, t interval) against D, and each law's fit on D <= fit_D_max with its
prediction intervals at the larger D."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

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
                ax.errorbar(D, np.exp(mean), yerr=err, fmt="o", color=color, ms=4, capsize=2)
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
        "prediction intervals (open squares); green: measured beyond the fit"
    )
    return fig


def write(traj: pd.DataFrame, predictions: pd.DataFrame | None, kappas, directory) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return save(out_of_sample_figure(traj, predictions, kappas), directory, "out_of_sample")
