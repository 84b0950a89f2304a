"""Figures of one run: pretraining curves, attention heatmaps, parameter trajectories,
transfer accuracy against n. Each is written as PNG and PDF; diverged seeds are marked."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..data.kinds import DEFAULT_KIND
from . import pyplot, save

plt = pyplot()
# Legends name each method exactly as the tables do (column `method`); what each is: the
# report's caption (workflow/report/transfer_accuracy.rst) and docs/STUDY.md section 4.


def describe(spec: dict | None, run: str) -> str:
    if not spec:
        return run
    t, p = spec["task"], spec["pretrain"]
    kind = t.get("kind", DEFAULT_KIND)
    return (
        f"{run} ({kind}): d={t.get('d')}, D={t.get('D')}, eta={p['eta']}, batch={p['batch']}, "
        f"{p['sampling']}, {spec['dtype']}"
    )


LOG_FLOOR = 1e-12  # exact zeros (the theory's invariant subspace) are drawn here on log axes


def _per_seed(ax, traj, column, label=None, logy=False):
    if logy:
        traj = traj.assign(**{column: traj[column].clip(lower=LOG_FLOOR)})
    for _seed, g in traj.groupby("seed"):
        bad = g["status"].iloc[0] != "ok"
        ax.plot(g["step"], g[column], color="tab:red" if bad else "tab:blue", alpha=0.35, lw=1, ls="--" if bad else "-")
        if bad:
            ax.plot(g["step"].iloc[-1], g[column].iloc[-1], "x", color="tab:red", ms=8)
    ok = traj[traj["status"] == "ok"]
    if len(ok):
        mean = ok.groupby("step")[column].mean()
        ax.plot(mean.index, mean.values, color="black", lw=2, label=label or "mean over ok seeds")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("gradient step")
    ax.grid(alpha=0.3)


def pretrain_curves(traj: pd.DataFrame, title: str, outdir: Path):
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), layout="constrained")
    _per_seed(axes[0], traj, "eval_loss", logy=True)
    axes[0].set_ylabel("logistic loss (evaluation set)")
    _per_seed(axes[1], traj, "eval_accuracy")
    axes[1].set_ylabel("accuracy (evaluation set; a tie counts 1/2)")
    _per_seed(axes[2], traj, "attention_on_relevant")
    axes[2].set_ylabel("mean attention mass on relevant group(s)")
    axes[2].set_ylim(0, 1.02)
    n_bad = traj.groupby("seed")["status"].first().ne("ok").sum()
    axes[0].legend(title=f"thin: seeds ({n_bad} diverged, red x)" if n_bad else "thin lines: seeds", fontsize=8)
    fig.suptitle(title)
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
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="mean S[i, j]")
    fig.suptitle(f"{title}\nmean attention matrix, seed {seed}")
    return save(fig, outdir, "attention_heatmaps")


def parameters(traj: pd.DataFrame, title: str, outdir: Path):
    has_direction = traj["cos_v1_vstar"].notna().any()  # image tasks have no v*: no empty panel
    fig, axes = plt.subplots(
        1, 4 if has_direction else 3, figsize=(18 if has_direction else 14, 4.2), layout="constrained"
    )
    if has_direction:
        _per_seed(axes[0], traj, "cos_v1_vstar")
        axes[0].set_ylabel("cos(v1, v*)")
        axes = axes[1:]
    else:
        axes = list(axes)
    axes = [None, *axes]  # the panels below keep their places
    _per_seed(axes[1], traj, "v1_norm")
    axes[1].set_ylabel("|v1|")
    _per_seed(axes[2], traj, "v2_norm", logy=True)
    axes[2].set_ylabel(f"|v2| (theory 0; 0 drawn at {LOG_FLOOR:g})")
    ok = traj[traj["status"] == "ok"]
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
        if mean.notna().any():
            axes[3].plot(mean.index, mean.values.clip(LOG_FLOOR), ls=ls, lw=2, label=label)
    axes[3].set_yscale("log")
    axes[3].set_xlabel("gradient step")
    axes[3].set_ylabel(f"|W block| (mean; 0 drawn at {LOG_FLOOR:g})")
    axes[3].legend(fontsize=8)
    axes[3].grid(alpha=0.3)
    fig.suptitle(title)
    return save(fig, outdir, "parameters")


def transfer_accuracy(summary: pd.DataFrame, title: str, outdir: Path):
    panels = sorted(summary["downstream"].unique(), key=lambda s: (s != "transfer", s))
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5.2), squeeze=False, layout="constrained")
    # one colour per method in every panel (a panel may fit fewer methods: transfer.control_methods)
    colors = {m: f"C{i % 10}" for i, m in enumerate(dict.fromkeys(summary["method"]))}
    legend = {}
    for ax, down in zip(axes[0], panels):
        s = summary[summary["downstream"] == down]
        for method, g in s.groupby("method", sort=False):
            g = g.sort_values("n")
            (line,) = ax.plot(g["n"], g["mean_test_accuracy"], marker="o", ms=3, color=colors[method], label=method)
            legend.setdefault(method, line)
            ax.fill_between(g["n"], g["ci_low"], g["ci_high"], color=colors[method], alpha=0.15)
            bad = g[g["n_seeds_not_ok"] > 0]
            if len(bad):  # where no seed is ok the mean is NaN: mark the n on the chance line
                ax.plot(bad["n"], bad["mean_test_accuracy"].fillna(0.5), "x", color="tab:red", ms=7)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training samples n (log scale)")
        ax.set_ylabel("test accuracy (mean, 95% t interval over seeds)")
        ax.axhline(0.5, color="gray", ls=":", lw=1)
        ax.set_title("downstream: " + down.replace("_", " "))
        ax.grid(alpha=0.3)
    # below the panels, never over a curve
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=min(4, len(legend)), fontsize=8)
    fig.suptitle(title)
    return save(fig, outdir, "transfer_accuracy")


def pretrain_figures(traj: pd.DataFrame, att: pd.DataFrame, title: str, outdir: Path) -> list[Path]:
    outdir = Path(outdir)
    return (
        pretrain_curves(traj, title, outdir) + attention_heatmaps(att, title, outdir) + parameters(traj, title, outdir)
    )
