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
from ..analysis.scaling_laws import ATTENTION_RESOLUTION, MIN_ATTENTION, theorem_quantity, without_flow_time
from ..analysis.stats import CONFIDENCE, mean_interval
from . import empty_figure, figure_title, mark_at_floor, panel_grid, panel_title, save
from .words import variant_label

LAW_STYLE = {
    "theorem": ("C3", "theorem's form (D-1) exp(-cD)"),
    "power": ("C0", "power of D"),
    "nested": ("C1", "nested: D^b exp(-cD)"),
    "exponential": ("C4", "exp(a + bD)"),
}


# bound.by_D's label of its rows of 1 - min attention at flow time kappa D^3 (theorem_by_D.csv): the rows
# are matched to each kappa of the config by this label, as written, never read back into numbers
KAPPA_QUANTITY = "1 - min attention at flow time {kappa:g} D^3"
LEVEL_COLUMNS = ["group", "d", "kappa", "D", "value", "low", "high"]


def levels_from_trajectories(traj: pd.DataFrame, s) -> pd.DataFrame:
    """Per group (the grid '', a stability variant), d, kappa and D: 1 - min attention at flow time
    kappa D^3, the geometric mean over seeds with its t interval (NaN where a seed has no value)."""
    if not len(traj):
        return pd.DataFrame(columns=LEVEL_COLUMNS)
    values = rest_values(traj, s.kappas, s)
    rows = []
    for (group, d, kappa, D), g in values.groupby(["group", "d", "kappa", "D"], sort=True):
        mean, low, high = mean_interval(g["log_rest"])
        rows.append(
            [group, int(d), float(kappa), int(D), *(np.exp(v) if np.isfinite(v) else np.nan for v in (mean, low, high))]
        )
    return pd.DataFrame(rows, columns=LEVEL_COLUMNS)


def levels_from_table(by_D: pd.DataFrame, kappas) -> pd.DataFrame:
    """The same levels from a study's theorem_by_D table (the committed tables: no trajectories); its
    batch-check rows (group check:...) are left out, as rest_values leaves them out of the law test."""
    groups = by_D["group"].fillna("").astype(str)
    frames = []
    for kappa in kappas:
        if "kappa" in by_D.columns:  # a typed column, where the table has one
            rows = by_D[np.isclose(by_D["kappa"].astype(float), float(kappa))]
        else:
            rows = by_D[by_D["quantity"] == KAPPA_QUANTITY.format(kappa=float(kappa))]
        rows = rows[~groups[rows.index].str.startswith("check:")]
        frames.append(
            pd.DataFrame(
                {
                    "group": groups[rows.index],
                    "d": rows["d"].astype(int),
                    "kappa": float(kappa),
                    "D": rows["D"].astype(int),
                    "value": rows["value"].astype(float),
                    "low": rows["low"].astype(float),
                    "high": rows["high"].astype(float),
                    "batch": rows["batch"].astype(int) if "batch" in rows.columns else -1,
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=LEVEL_COLUMNS)


def _usable(predictions: pd.DataFrame) -> pd.DataFrame:
    """The prediction rows with a number (a law that could not be fitted has NaN and a blocker)."""
    if predictions is None or not len(predictions):
        return pd.DataFrame(columns=["group", "d", "kappa", "law", "D", "rest", "coefficients"])
    p = predictions.assign(group=predictions["group"].fillna("").astype(str))
    p = p[np.isfinite(p["rest"].astype(float))]
    if len(p) and "fit_D_max" in p.columns:  # the study's own fits (first), not another's
        first = p.iloc[0]
        p = p[p["fit_D_max"] == first["fit_D_max"]]  # another study's fits: their own fit_D_max
    return p


def _errorbars(ax, part: pd.DataFrame, color, label: str, line: bool, shift: float = 1.0) -> None:
    """Levels with their intervals, the upper end clipped at 1 (1 - min attention cannot exceed it)."""
    if not len(part):
        return
    low = np.where(np.isfinite(part["low"]), part["value"] - part["low"], 0)
    high = np.where(np.isfinite(part["high"]), np.minimum(part["high"], 1.0) - part["value"], 0)
    ax.errorbar(
        part["D"] * shift, part["value"], yerr=[low, np.clip(high, 0, None)], fmt="o-" if line else "o",
        color=color, ms=4, capsize=2, lw=1, zorder=3, label=label,
    )  # fmt: skip


def _measured_points(
    ax, m: pd.DataFrame, fit_max: int | None, color=None, label: str = "", line=False, shift: float = 1.0
) -> None:
    """Measured levels with their intervals; a level without a value (a seed diverged or the run ended
    earlier) at the panel's floor, never at a number. Without ``color``: one group in its own panel,
    black within the fit's levels, green beyond them."""
    ok = m[np.isfinite(m["value"])].sort_values("D")
    missing = m[~np.isfinite(m["value"])]
    if color is None:
        within = ok["D"] <= fit_max if fit_max is not None else pd.Series(True, ok.index)
        _errorbars(ax, ok[within], "k", "measured (levels of the fit)", line)
        _errorbars(ax, ok[~within], "C2", "measured beyond the fit", line)
        floor = "no value (a seed diverged or the run ended earlier)"
    else:
        _errorbars(ax, ok, color, label, line, shift)
        floor = "_nolegend_"
    mark_at_floor(ax, missing["D"], marker="x", color=color or "C3", label=floor)


def out_of_sample_figure(measured: pd.DataFrame, predictions: pd.DataFrame | None, config: dict | None = None):
    """Per group with fitted laws, d and kappa: the measured levels, each law's fit on D <= fit_D_max
    and its predictions with their intervals; the groups without fitted laws (too few levels) side by
    side, measured only, one panel per d and kappa; groups with no value at all (Adam: its step size is
    no flow time) are named, not drawn."""
    usable = _usable(predictions)
    measured = measured if measured is not None else pd.DataFrame(columns=LEVEL_COLUMNS)
    finite = measured[np.isfinite(measured["value"].astype(float))] if len(measured) else measured
    fitted = sorted(set(usable["group"]))
    shown = sorted(set(finite["group"]) | set(fitted))
    empty_groups = sorted(set(measured["group"]) - set(shown)) if len(measured) else []
    if not shown:
        return empty_figure(
            "out-of-sample test", "no scaling run has a value of 1 - min attention at flow time kappa D^3"
        )
    fit_max = int(predictions["fit_D_max"].iloc[0]) if predictions is not None and len(predictions) else None
    cells = sorted({(g, int(d), float(k)) for g, d, k in zip(usable["group"], usable["d"], usable["kappa"])})
    others = [g for g in shown if g not in fitted]
    side = sorted({(int(d), float(k)) for g, d, k in zip(finite["group"], finite["d"], finite["kappa"]) if g in others})
    panels = [("fitted", c) for c in cells] + [("measured", c) for c in side]
    fig, axes = panel_grid(len(panels))
    colors = {g: f"C{i % 10}" for i, g in enumerate(others)}
    for ax, (kind, cell) in zip(axes, panels):
        if kind == "fitted":
            group, d, kappa = cell
            _fitted_panel(ax, group, d, kappa, usable, measured, fit_max, config)
        else:
            d, kappa = cell
            for i, g in enumerate(others):
                m = measured[(measured["group"] == g) & (measured["d"] == d) & (measured["kappa"] == kappa)]
                shift = 1 + 0.012 * (i - (len(others) - 1) / 2)  # side by side: equal levels stay visible
                _measured_points(ax, m, None, color=colors[g], label=variant_label(g, config), line=True, shift=shift)
            panel_title(ax, f"Measured only (no law could be fitted: too few D): d = {d}, at flow time {kappa:g} D^3")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = sorted(set(measured["D"]) | set(usable["D"]))
        ax.set_xticks(ticks, [str(int(D)) for D in ticks], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("D (groups)")
        ax.set_ylabel("1 - min over queries of attention on j*")
        ax.grid(alpha=0.3)
    # one legend below the panels (the same entries in every panel; inside one they covered the data)
    entries: dict = {}
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(name, handle)
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=3, fontsize=8)
    note = ""
    if empty_groups:
        names = ", ".join(variant_label(g, config) for g in empty_groups)
        note = f"\nNot drawn, no value at any flow time kappa D^3 (an adaptive step size has no flow time): {names}"
    title = (
        f"Out-of-sample test: laws fitted on D <= {fit_max}, predictions at larger D with {CONFIDENCE:.0%} "
        "prediction intervals"
        if cells
        else "1 - min attention at flow time kappa D^3 against D (no law fitted: too few levels of D)"
    )
    figure_title(fig, title + note)
    return fig


def law_curve(rows: pd.DataFrame, law: str, Ds) -> np.ndarray | None:
    """1 - min attention by ``law`` at ``Ds``, from its prediction rows' fitted coefficients (space-separated
    numbers); None where the rows carry none (a law that could not be fitted)."""
    coef = rows["coefficients"].dropna()
    if not (len(coef) and isinstance(coef.iloc[0], str)):
        return None
    X, off = design(law, Ds)
    return np.exp(X @ np.array([float(x) for x in coef.iloc[0].split()]) + off)


def _fitted_panel(ax, group, d, kappa, usable, measured, fit_max, config) -> None:
    p = usable[(usable["group"] == group) & (usable["d"] == d) & (usable["kappa"] == kappa)]
    m = measured[(measured["group"] == group) & (measured["d"] == d) & (measured["kappa"] == kappa)]
    _measured_points(ax, m, fit_max)
    laws = [law for law in LAW_STYLE if law in set(p["law"])]
    for i, law in enumerate(laws):
        color, name = LAW_STYLE[law]
        q = p[p["law"] == law].sort_values("D")
        Ds = np.geomspace(min(4, m["D"].min() if len(m) else 4), max(q["D"].max(), fit_max or 0), 100)
        curve = law_curve(q, law, Ds)
        if curve is not None:
            ax.plot(Ds, curve, color=color, lw=1, label=name)
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
    ax.errorbar([], [], yerr=[], fmt="s", mfc="none", color="0.3", ms=3, capsize=2, label="prediction, 95% interval")
    if fit_max is not None:
        ax.axvline(fit_max, color="0.6", ls=":", lw=1, label=f"largest D of the fit ({fit_max})")
    # without the config, no words for the group's settings: the grid, or the variant's name
    what = variant_label(group, config) if config else ("the grid's runs" if group == GRID else group)
    panel_title(ax, f"{what}: d = {d}, at flow time {kappa:g} D^3")


def _curves(traj: pd.DataFrame) -> pd.DataFrame:
    """Per run and recorded step: the geometric mean over seeds of 1 - min attention, flow time / D^3;
    NaN (a gap in the curve, not a number) where a seed's value is under float32's resolution."""
    ok = traj[traj["status"] == "ok"] if "status" in traj.columns else traj
    rest = 1 - ok[MIN_ATTENTION].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = np.where(rest >= ATTENTION_RESOLUTION, np.log(rest), np.nan)
    ok = ok.assign(log_rest=rest, x=ok["flow_time"] / ok["D"].astype(float) ** 3)
    return ok.groupby(["run", "variant", "D", "batch", "x"], as_index=False)["log_rest"].agg(
        lambda v: v.mean(skipna=False)
    )


def population_and_batch_figure(traj: pd.DataFrame, s, config: dict | None = None):
    """Per D with more than one run: every scaling run's curve (population, batch check, plain batches)."""
    if not len(traj) or "flow_time" not in traj.columns:
        return empty_figure("population and batch", "no scaling runs with flow times")
    adaptive = without_flow_time(traj)
    left_out = sorted(traj.loc[adaptive, "variant"].fillna("").astype(str).unique())  # Adam: no flow time
    traj = theorem_quantity(traj[~adaptive], s)
    d = traj["d"] if "d" in traj.columns else pd.Series(0, traj.index)
    traj = traj.assign(variant=traj["variant"].fillna("").astype(str), d=d)
    Ds = sorted(D for D, g in traj.groupby("D") if g["run"].nunique() > 1)
    if not Ds:
        return empty_figure("population and batch", "no D with more than one run (batch check or stability runs)")
    curves = _curves(traj)
    several_d = traj["d"].nunique() > 1

    def label(d, variant) -> str:
        return (f"d = {int(d)}: " if several_d else "") + variant_label(variant, config)

    label_of = {run: label(d, var) for run, d, var in traj.groupby("run")[["d", "variant"]].first().itertuples()}
    labels = sorted(set(label_of.values()))
    colors = {lab: plt.get_cmap("tab10")(i % 10) for i, lab in enumerate(labels)}
    styles = {lab: ("-", "--", ":", "-.")[i // 10 % 4] for i, lab in enumerate(labels)}
    fig, axes = panel_grid(len(Ds))
    handles = {}
    for ax, D in zip(axes, Ds):
        for run, c in curves[curves["D"] == D].groupby("run", sort=True):
            c = c[c["x"] > 0].sort_values("x")
            lab = label_of[run]
            (handles[lab],) = ax.plot(c["x"], np.exp(c["log_rest"]), color=colors[lab], ls=styles[lab], lw=1, label=lab)
        for kappa in s.kappas:
            ax.axvline(kappa, color="0.7", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("flow time / D^3 (gradient descent: eta x steps / D^3)")
        ax.set_ylabel("1 - min over queries of attention on j*")
        ax.set_title(f"D = {D}", fontsize=9)
        ax.grid(alpha=0.3)
    # one legend for every panel, below them: the same run group has the same colour in every panel
    fig.legend(
        [handles[lab] for lab in labels if lab in handles],
        [lab for lab in labels if lab in handles],
        loc="outside lower center",
        ncols=min(3, len(handles)),
        fontsize=7,
    )
    algorithms = set(traj["algorithm"]) if "algorithm" in traj.columns else set()
    if "flow" in algorithms:
        what = "Population gradient flow (the eight-coefficient ODE) and its checks (samples, tolerance)"
    elif "population" in algorithms:
        what = "Population gradient descent (projected onto its invariant subspace) and batch gradient descent"
    else:
        what = "Every scaling run at a D (the grid's, its batch check's, its stability variants')"
    # the cut is the study's one attention resolution, whatever precision a run computed in
    note = "; a curve stops where 1 - min attention falls below float32's resolution (1e-6)"
    if left_out:
        names = ", ".join(variant_label(v, config) for v in left_out)
        note += f"\nNot drawn: Adam, whose step size is no flow time ({names}); the claims' stability rows give them"
    figure_title(fig, f"{what} on the same tasks: geometric mean over seeds; dotted: the kappas of the law test{note}")
    return fig


def write(traj, predictions, s, directory, config: dict | None = None) -> list[Path]:
    """The theorem test's figures; ``config``: the study's config, whose variants' settings name them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    measured = levels_from_trajectories(traj, s)
    paths = save(out_of_sample_figure(measured, predictions, config), directory, "out_of_sample")
    return paths + save(population_and_batch_figure(traj, s, config), directory, "population_and_batch")
