"""The theorem test's own figures.

``out_of_sample``: per group of runs, d and kappa, the measured 1 - min attention at flow time kappa D^3
(geometric mean over seeds, t interval) against D, each law's fit on D <= fit_D_max and its
predictions with their intervals at the larger D. ``population_and_batch``: per D, 1 - min attention
against flow time / D^3 for population gradient descent, its batch check and plain batch gradient
descent on the same tasks: where the curves part, finite batches leave the population trajectory.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..analysis.laws import design
from ..analysis.predict import GRID, rest_values
from ..analysis.scaling_laws import MIN_ATTENTION, theorem_quantity, without_flow_time
from ..analysis.stats import CONFIDENCE, mean_interval
from . import empty_figure, panel_grid, save

LAW_STYLE = {
    "theorem": ("C3", "theorem's form (D-1) exp(-cD)"),
    "power": ("C0", "power of D"),
    "nested": ("C1", "nested: D^b exp(-cD)"),
    "exponential": ("C4", "exp(a + bD)"),
}


def short_eta_rule(rule: str) -> str:
    """'eta(D): D=4: 0.5, D=6: 0.5, D=16: 0.375' -> 'eta 0.5 at D = 4-6, 0.375 at D = 16' (a title's width);
    any other rule ('eta = 0.5') as it is."""
    if not rule.startswith("eta(D): "):
        return rule
    runs: list[list] = []  # [eta, first D, last D]
    for part in rule.removeprefix("eta(D): ").split(", "):
        D, eta = part.removeprefix("D=").split(": ")
        if runs and runs[-1][0] == eta:
            runs[-1][2] = D
        else:
            runs.append([eta, D, D])
    return "eta " + ", ".join(f"{eta} at D = {a}" + (f"-{b}" if b != a else "") for eta, a, b in runs)


def out_of_sample_figure(traj: pd.DataFrame, predictions: pd.DataFrame | None, s):
    if predictions is None or not len(predictions):
        return empty_figure("out-of-sample test", "no predictions table (no scaling run at D <= fit_D_max)")
    measured = rest_values(traj, s.kappas, s) if len(traj) else pd.DataFrame()
    cells = sorted(
        {(g, int(d), float(k)) for g, d, k in zip(predictions["group"], predictions["d"], predictions["kappa"])}
    )
    fig, axes = panel_grid(len(cells))
    beyond_drawn = False
    for ax, (group, d, kappa) in zip(axes, cells):
        p = predictions[(predictions["group"] == group) & (predictions["d"] == d) & (predictions["kappa"] == kappa)]
        fit_max = int(p["fit_D_max"].iloc[0])
        m = (
            measured[(measured["group"] == group) & (measured["d"] == d) & (measured["kappa"] == kappa)]
            if len(measured)
            else measured
        )
        drawn = False  # a panel with nothing finite (Adam's: no flow time) says so instead of staying blank
        for D, g in m.groupby("D", sort=True) if len(m) else []:
            mean, lo, hi = mean_interval(g["log_rest"])
            if not np.isfinite(mean):
                continue
            drawn = True
            beyond = fit_max < D
            beyond_drawn |= beyond
            err = [[np.exp(mean) - np.exp(lo)], [np.exp(hi) - np.exp(mean)]] if np.isfinite(lo) else None
            ax.errorbar(D, np.exp(mean), yerr=err, fmt="o", color="C2" if beyond else "k", ms=4, capsize=2, zorder=3)
        laws = [law for law in LAW_STYLE if law in set(p["law"])]
        for i, law in enumerate(laws):
            color, label = LAW_STYLE[law]
            q = p[p["law"] == law].sort_values("D")
            coef = q["coefficients"].dropna()
            if not len(coef) or not isinstance(coef.iloc[0], str):
                continue
            beta = np.array([float(x) for x in coef.iloc[0].split()])
            Ds = np.geomspace(4, max(q["D"].max(), fit_max), 100)
            X, off = design(law, Ds)
            ax.plot(Ds, np.exp(X @ beta + off), color=color, lw=1, label=label)
            drawn = True
            shift = 1 + 0.03 * (i - (len(laws) - 1) / 2)  # side by side at each predicted D
            ax.errorbar(
                q["D"] * shift,
                q["rest"],
                yerr=[q["rest"] - q["rest_low"], q["rest_high"] - q["rest"]],
                fmt="s",
                mfc="none",
                color=color,
                ms=3,
                capsize=2,
            )
        ax.axvline(fit_max, color="0.6", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        if not drawn:
            note = "nothing measured or predicted here\n(1 - min attention at this flow time: none finite)"
            ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=7, color="0.4")
        ticks = sorted({int(D) for D in list(p["D"]) + (list(m["D"]) if len(m) else [])})
        ax.set_xticks(ticks, [str(D) for D in ticks], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("D (groups)")
        ax.set_ylabel("1 - min attention")
        what = "grid" if group == GRID else group
        ax.set_title(f"{what}: d = {d}, flow time {kappa:g} D^3 ({short_eta_rule(p['eta_rule'].iloc[0])})", fontsize=7)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Out-of-sample test: laws fitted on D <= {fit_max} (black points), predicted with {CONFIDENCE:.0%} "
        "prediction intervals (open squares)" + ("; green: measured beyond the fit" if beyond_drawn else "")
    )
    return fig


def _curves(traj: pd.DataFrame) -> pd.DataFrame:
    """Per run and recorded step: the geometric mean over seeds of 1 - min attention, flow time / D^3."""
    ok = traj[traj["status"] == "ok"] if "status" in traj.columns else traj
    rest = np.log(np.clip(1 - ok[MIN_ATTENTION].to_numpy(float), 1e-12, None))
    ok = ok.assign(log_rest=rest, x=ok["flow_time"] / ok["D"].astype(float) ** 3)
    return ok.groupby(["run", "variant", "D", "batch", "x"], as_index=False)["log_rest"].mean()


def population_and_batch_figure(traj: pd.DataFrame, s):
    """Per D with more than one run: every scaling run's curve (population, batch check, plain batches)."""
    if not len(traj) or "flow_time" not in traj.columns:
        return empty_figure("population and batch", "no scaling runs with flow times")
    adaptive = without_flow_time(traj)
    left_out = sorted(traj.loc[adaptive, "run"].unique())  # Adam: its step size is no flow time, its x axis none
    traj = theorem_quantity(traj[~adaptive], s)
    algo = traj["algorithm"] if "algorithm" in traj.columns else pd.Series("batch", traj.index)
    d = traj["d"] if "d" in traj.columns else pd.Series(0, traj.index)
    traj = traj.assign(variant=traj["variant"].fillna("").astype(str), algorithm=algo, d=d)
    Ds = sorted(D for D, g in traj.groupby("D") if g["run"].nunique() > 1)
    if not Ds:
        return empty_figure("population and batch", "no D with more than one run (batch check or stability runs)")
    curves = _curves(traj)
    several_d = traj["d"].nunique() > 1

    def label(d, var, alg, b) -> str:
        # the variant's name only where it says more than the batch (batch_check's "batch1024" does not)
        named = f" ({var})" if var and var != f"batch{int(b)}" else ""
        return (f"d = {int(d)}: " if several_d else "") + f"{alg} GD{named}, batch {int(b)}"

    label_of = {
        run: label(d, var, alg, b)
        for run, d, var, alg, b in traj.groupby("run")[["d", "variant", "algorithm", "batch"]].first().itertuples()
    }
    labels = sorted(set(label_of.values()))
    colors = {lab: plt.get_cmap("tab10")(i % 10) for i, lab in enumerate(labels)}
    fig, axes = panel_grid(len(Ds))
    for ax, D in zip(axes, Ds):
        for run, c in curves[curves["D"] == D].groupby("run", sort=True):
            c = c[c["x"] > 0].sort_values("x")
            lab = label_of[run]
            ax.plot(c["x"], np.exp(c["log_rest"]), color=colors[lab], lw=1, label=lab)
        for kappa in s.kappas:
            ax.axvline(kappa, color="0.7", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("flow time / D^3 (eta x steps / D^3)")
        ax.set_ylabel("1 - min attention")
        ax.set_title(f"D = {D}", fontsize=8)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    what = (
        "Population gradient descent (projected onto its invariant subspace) and batch gradient descent"
        if (traj["algorithm"] == "population").any()
        else "Every scaling run at a D (the grid's, its batch check's, its stability variants')"
    )
    note = ""
    if left_out:
        note = f"\nAdam runs left out ({len(left_out)}): no flow time; the claims' stability rows give them"
    fig.suptitle(f"{what} on the same tasks: geometric mean over seeds; dotted: the kappas of the law test{note}")
    return fig


def write(traj, predictions, s, directory) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = save(out_of_sample_figure(traj, predictions, s), directory, "out_of_sample")
    return paths + save(population_and_batch_figure(traj, s), directory, "population_and_batch")
