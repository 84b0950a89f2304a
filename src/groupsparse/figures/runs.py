"""Figures of one run: pretraining curves, attention heatmaps, parameter trajectories,
transfer accuracy against n. Each is written as PNG and PDF; diverged seeds are marked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ..data.kinds import kind_of
from ..io.report import names_a_placeholder_task
from . import figure_title, pyplot, save
from .words import DOWNSTREAM_WORDS, GRADIENT_WORDS, method_label

plt = pyplot()
# Legends name each method in words with the tables' name (column `method`) beside it; what each
# is: the report's caption (workflow/report/transfer_accuracy.rst) and docs/STUDY.md section 4.


def read_table(tables: Path, name: str) -> pd.DataFrame:
    """``name``.parquet, or the committed ``name``.csv where only that is there (docs/<study>/tables)."""
    from ..io import files as io

    tables = Path(tables)
    if (tables / f"{name}.parquet").is_file() or not (tables / f"{name}.csv").is_file():
        return io.read_parquet(tables / f"{name}.parquet")
    return pd.read_csv(tables / f"{name}.csv")


def run_specs(tables: Path) -> tuple[dict, dict | None]:
    """(run specs by name, the study's config): from the trajectories' provenance, or for committed
    tables from their config.yaml (the runs expanded from it; none if that config no longer validates)."""
    import copy

    import yaml

    from ..config.specs import ConfigError
    from ..io import files as io
    from ..study.runs import expand

    tables = Path(tables)
    path = tables / "pretrain_trajectories.parquet"
    if path.is_file():
        prov = io.read_provenance(path)
        return prov.get("run_specs") or {}, prov.get("study")
    if not (tables / "config.yaml").is_file():
        return {}, None
    config = yaml.safe_load((tables / "config.yaml").read_text()) or {}
    try:
        runs = expand(copy.deepcopy(config))
    except (ConfigError, KeyError, ValueError):
        return {}, config
    return {name: r.spec for name, r in runs.items()}, config


def describe(spec: dict | None, run: str, study: dict | None = None) -> str:
    """The run in words: its task, its training and its length; ``study`` (the study's config) says
    whether the run is a pretraining-only placeholder of a scaling study."""
    if not spec:
        return run
    t, p = spec["task"], spec["pretrain"]
    # a kind that loads a dataset is real data (data.kinds declares it; no kind is named here)
    data = f"{t.get('dataset', 'real')} images" if kind_of(t).loads_dataset else "synthetic data"
    sampling = {"antithetic": "antithetic batches", "iid": "i.i.d. batches"}.get(p["sampling"], p["sampling"])
    training = GRADIENT_WORDS.get(p.get("gradient", "auto"), "gradient descent")
    if p.get("optimizer") == "adam":
        training = "Adam"
    title = (
        f"Task {run} ({data}): d = {t.get('d')}, D = {t.get('D')}; {training}, eta = {p['eta']}, batch {p['batch']}, "
        f"{sampling}, {spec['dtype']}, {p['steps']} steps"
    )
    if placeholder(spec, study):
        title += (
            f"\nA short pretraining-only run ({p['steps']} steps) of the task this scaling study must name: "
            "not a result of the study (its results are the scaling runs' figures)"
        )
    return title


def placeholder(spec: dict | None, study: dict | None) -> bool:
    """A named task of a study that runs scaling and no transfer: the schema needs one named task, and
    such a study trains it only briefly (configs/population_gd.yaml, configs/practitioners.yaml)."""
    if not spec or not study or spec.get("role", "task") != "task":
        return False
    return names_a_placeholder_task(study)


def _per_seed(ax, traj, column, label=None, logy=False):
    """Each seed's curve (a diverged one red and dashed, an x at its last finite value) and the mean over
    the ok seeds; on a log axis an exact 0 is a gap in the curve, not a number."""
    if logy:
        traj = traj.assign(**{column: traj[column].where(traj[column] > 0)})
    for i, (_seed, g) in enumerate(traj.groupby("seed")):
        bad = g["status"].iloc[0] != "ok"
        ax.plot(
            g["step"], g[column], color="tab:red" if bad else "tab:blue", alpha=0.35, lw=1, ls="--" if bad else "-",
            label=("_" if i else "") + "one seed",
        )  # fmt: skip
        if bad:  # at its last recorded step, at the last finite value (a diverged value is no number)
            finite = g[column][np.isfinite(g[column].astype(float))]
            if len(finite):
                ax.plot([g["step"].iloc[-1]], [finite.iloc[-1]], "x", color="tab:red", ms=8)
    ok = traj[traj["status"] == "ok"]
    if len(ok):
        mean = ok.groupby("step")[column].mean()
        ax.plot(mean.index, mean.values, color="black", lw=2, label=label or "mean over ok seeds")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("gradient step")
    ax.grid(alpha=0.3)


def _diverged_legend(ax, traj) -> None:
    """The legend of the seeds' curves, with the diverged seeds' red x where there are any."""
    handles, labels = ax.get_legend_handles_labels()
    n_bad = int(traj.groupby("seed")["status"].first().ne("ok").sum())
    if n_bad:  # a legend handle only: the panel's own x marks stay one per diverged seed
        handles.append(Line2D([], [], ls="none", marker="x", color="tab:red", ms=8))
        labels.append(f"diverged seed ({n_bad}): red dashed; x: its last step, at its last finite value")
    ax.legend(handles, labels, fontsize=8)


def pretrain_curves(traj: pd.DataFrame, title: str, outdir: Path):
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), layout="constrained")
    _per_seed(axes[0], traj, "eval_loss", logy=True)
    axes[0].set_ylabel("logistic loss (evaluation set)")
    _per_seed(axes[1], traj, "eval_accuracy")
    axes[1].set_ylabel("accuracy (evaluation set; a tie counts 1/2)")
    _per_seed(axes[2], traj, "attention_on_relevant")
    axes[2].set_ylabel("mean attention on the label's group j*")
    axes[2].set_ylim(0, 1.02)
    D = traj["D"].iloc[0] if "D" in traj.columns and len(traj) else None
    if D:  # where attention starts (the zero start's uniform attention)
        axes[2].axhline(1 / D, color="0.5", ls=":", lw=1, label=f"uniform attention 1/D = {1 / D:.2g}")
        axes[2].legend(fontsize=8)
    _diverged_legend(axes[0], traj)
    figure_title(fig, title, fontsize=10)
    return save(fig, outdir, "pretrain_curves")


def attention_heatmaps(att: pd.DataFrame, title: str, outdir: Path):
    seed = int(att["seed"].min())
    a = att[att["seed"] == seed]
    steps = sorted(a["step"].unique())
    D = int(a["key"].max()) + 1
    j_star = int(a["j_star"].iloc[0])
    fig, axes = plt.subplots(1, len(steps), figsize=(3.1 * len(steps), 3.3), squeeze=False)
    for ax, step in zip(axes[0], steps):
        m = a[a["step"] == step].pivot(index="key", columns="query", values="mass").to_numpy()
        im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis", origin="upper")
        ax.add_patch(plt.Rectangle((-0.5, j_star - 0.5), D, 1, fill=False, edgecolor="red", lw=1.5))
        ax.set_title(f"step {step}", fontsize=10)
        ax.set_xlabel("query j")
        ax.set_xticks(range(D))
        ax.set_yticks(range(D))
        ax.tick_params(labelsize=6)
    axes[0][0].set_ylabel(f"key i (red box: j* = {j_star})")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="mean S[i, j] (attention of query j on key i)")
    figure_title(fig, f"{title}\nmean attention matrix over the evaluation set, seed {seed}", fontsize=10)
    return save(fig, outdir, "attention_heatmaps")


def parameters(traj: pd.DataFrame, title: str, outdir: Path):
    has_direction = traj["cos_v1_vstar"].notna().any()  # image tasks have no v*: no empty panel
    fig, axes = plt.subplots(
        1, 4 if has_direction else 3, figsize=(18 if has_direction else 14, 4.2), layout="constrained"
    )
    if has_direction:
        _per_seed(axes[0], traj, "cos_v1_vstar")
        axes[0].set_ylabel("cos(v1, v*): read-out aligned with the label's direction")
        axes = axes[1:]
    else:
        axes = list(axes)
    axes = [None, *axes]  # the panels below keep their places
    _per_seed(axes[1], traj, "v1_norm")
    axes[1].set_ylabel("|v1| (read-out on the features)")
    if (traj["v2_norm"].fillna(0) == 0).all():  # the theory's v2 = 0, held exactly: no curve on a log axis
        axes[2].text(
            0.5, 0.5, "|v2| = 0 exactly at every\nrecorded step (theory: 0)", ha="center", va="center",
            transform=axes[2].transAxes,
        )  # fmt: skip
        axes[2].set_xlim(traj["step"].min(), traj["step"].max())
        axes[2].set_xlabel("gradient step")
        axes[2].set_yticks([])
    else:
        _per_seed(axes[2], traj, "v2_norm", logy=True)
    axes[2].set_ylabel("|v2| (read-out on the positions; theory 0)")
    ok = traj[traj["status"] == "ok"]
    zero = []
    for (col, label), ls in zip(
        (
            ("W_ff_norm", "features/features"),
            ("W_fp_norm", "features/positions"),
            ("W_pf_norm", "positions/features"),
            ("W_pp_norm", "positions/positions"),
        ),
        ("-", "--", ":", "-."),
    ):  # styles differ so equal curves stay visible
        mean = ok.groupby("step")[col].mean()
        if not mean.notna().any():
            continue
        if (mean.fillna(0) == 0).all():  # exactly 0 throughout: named, not drawn at a made-up floor
            zero.append(label)
            continue
        axes[3].plot(mean.index, mean.where(mean > 0).values, ls=ls, lw=2, label=label)
    if zero:
        axes[3].plot([], [], " ", label=f"exactly 0 throughout: {', '.join(zero)}")
    axes[3].set_yscale("log")
    axes[3].set_xlabel("gradient step")
    axes[3].set_ylabel("|W block| (Frobenius norm, mean over ok seeds)")
    axes[3].legend(fontsize=8)
    axes[3].grid(alpha=0.3)
    _diverged_legend(axes[1], traj)
    figure_title(fig, title, fontsize=10)
    return save(fig, outdir, "parameters")


def transfer_accuracy(summary: pd.DataFrame, title: str, outdir: Path):
    panels = sorted(summary["downstream"].unique(), key=lambda s: (s != "transfer", s))
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5.2), squeeze=False, layout="constrained")
    # one colour per method in every panel (a panel may fit fewer methods: transfer.control_methods)
    colors = {m: f"C{i % 10}" for i, m in enumerate(dict.fromkeys(summary["method"]))}
    legend = {}
    failed = None
    for ax, down in zip(axes[0], panels):
        s = summary[summary["downstream"] == down]
        for method, g in s.groupby("method", sort=False):
            g = g.sort_values("n")
            (line,) = ax.plot(
                g["n"], g["mean_test_accuracy"], marker="o", ms=3, color=colors[method], label=method_label(method)
            )
            legend.setdefault(method, line)
            ax.fill_between(g["n"], g["ci_low"], g["ci_high"], color=colors[method], alpha=0.15)
            bad = g[g["n_seeds_not_ok"] > 0]
            if len(bad):  # where no seed is ok the mean is NaN: mark the n on the chance line
                (failed,) = ax.plot(bad["n"], bad["mean_test_accuracy"].fillna(0.5), "x", color="tab:red", ms=7)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training samples n (log scale)")
        ax.set_ylabel("test accuracy (mean, 95% t interval over seeds)")
        chance = ax.axhline(0.5, color="gray", ls=":", lw=1)
        ax.set_title(DOWNSTREAM_WORDS.get(down, down.replace("_", " ")), fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = list(legend.values()), [method_label(m) for m in legend]
    handles.append(chance)
    labels.append("chance (0.5)")
    if failed is not None:
        handles.append(failed)
        labels.append("a seed failed or diverged at this n (on the chance line where none is ok)")
    # below the panels, never over a curve
    fig.legend(handles, labels, loc="outside lower center", ncol=min(3, len(handles)), fontsize=8)
    figure_title(fig, title, fontsize=10)
    return save(fig, outdir, "transfer_accuracy")


def pretrain_figures(traj: pd.DataFrame, att: pd.DataFrame, title: str, outdir: Path) -> list[Path]:
    outdir = Path(outdir)
    return (
        pretrain_curves(traj, title, outdir) + attention_heatmaps(att, title, outdir) + parameters(traj, title, outdir)
    )
