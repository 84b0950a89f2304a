"""Questions 3 and 4: the samples transfer needs against d and D, beside d + D and d x D; and real
images: attention on the labelled slot, and transfer accuracy against n."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.stats import CONFIDENCE
from ...io.files import InputError
from .. import pyplot
from ..words import method_words
from .common import Study, errorbar, log_D_axis, log_y, question_title


def question3_levels(study: Study) -> tuple[pd.DataFrame, float]:
    """n* to the verdict target (config) per method, d and D over the scaling grid's transfer runs."""
    sc = study.table("sample_complexity")
    if sc is None or not len(sc):
        raise InputError(f"question 3: {study.folder}/tables has no sample_complexity.csv")
    sc = sc[(sc["role"] == "scaling") & (sc["downstream"] == "transfer")]
    target = float(study.analysis.get("verdict_target", sc["target_accuracy"].min()))
    sc = sc[np.isclose(sc["target_accuracy"].astype(float), target)]
    methods = [m for m in study.analysis.get("methods", []) if m in set(sc["method"])] or sorted(set(sc["method"]))
    sc = sc[sc["method"].isin(methods)].assign(
        reached=lambda t: np.isfinite(t["n_needed"].astype(float)) & t["reached_on_grid"].astype(bool)
    )
    return sc.assign(method=pd.Categorical(sc["method"], methods, ordered=True)).sort_values(
        ["method", "d", "D"]
    ), target


def _scaled(reference: np.ndarray, n: np.ndarray) -> float:
    """The constant that puts ``reference`` through ``n`` best on the log scale (geometric mean ratio)."""
    return float(np.exp(np.mean(np.log(n) - np.log(reference))))


def question3_figure(study: Study):
    plt = pyplot()
    levels, target = question3_levels(study)
    methods = list(levels["method"].cat.categories)
    ds = sorted(set(levels["d"]))
    cols = min(3, len(methods))
    rows = -(-len(methods) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 4.3 * rows), layout="constrained", squeeze=False)
    for ax in axes.flat[len(methods) :]:
        ax.axis("off")
    handles: dict[str, object] = {}
    for ax, method in zip(axes.flat, methods):
        m = levels[levels["method"] == method]
        ok = m[m["reached"]]
        for j, d in enumerate(ds):
            color = f"C{j}"
            shift = 1 + 0.04 * (j - (len(ds) - 1) / 2)  # the d side by side at each D: equal bounds stay visible
            g = m[m["d"] == d].sort_values("D")
            r = g[g["reached"]]
            handles[f"d={d}"] = errorbar(
                ax, r["D"] * shift, r["n_needed"], r["ci_low"], r["ci_high"], fmt="o", color=color, ms=5, zorder=3
            )
            bound = g[~g["reached"]]
            if len(bound):  # never reached on the grid: n* is more than its largest n
                ax.scatter(
                    bound["D"] * shift, bound["max_n_on_grid"], marker="^", s=50, facecolors="none", edgecolors=color
                )
                handles["bound"] = ax.scatter([], [], marker="^", s=50, facecolors="none", edgecolors="0.3")
            if len(ok) >= 2:
                Ds = np.array(sorted(set(m["D"])), dtype=float)
                for key, shape, style in (("dD", lambda dd, DD: dd * DD, "--"), ("d+D", lambda dd, DD: dd + DD, ":")):
                    scale = _scaled(
                        shape(ok["d"].to_numpy(float), ok["D"].to_numpy(float)), ok["n_needed"].to_numpy(float)
                    )
                    (handles[key],) = ax.plot(Ds, scale * shape(d, Ds), style, color=color, lw=1)
        log_y(ax)
        log_D_axis(ax, sorted(set(levels["D"])))
        ax.set_ylabel(f"n* (samples to {target:.0%} test accuracy)")
        ax.set_title(method_words(str(method)), fontsize=10)
        ax.grid(alpha=0.3, which="both")
    names = {
        **{f"d={d}": f"d = {d}: n*, {CONFIDENCE:.0%} interval" for d in ds},
        "bound": "not reached with the largest n of the grid: n* is more",
        "dD": "n* proportional to d x D (a linear model on all features)",
        "d+D": "n* proportional to d + D (the paper's claim for the pretrained model)",
    }
    keys = [k for k in names if k in handles]
    fig.legend([handles[k] for k in keys], [names[k] for k in keys], loc="outside lower center", ncols=3, fontsize=8)
    question_title(
        fig,
        "Question 3. Does transfer need about d + D samples rather than d x D, under one tuning rule for every method?",
        f"Samples n* each method needs to reach {target:.0%} test accuracy on the transfer task, per group "
        "dimension d (colour) and number of groups D. Dashed and dotted: each shape's constant fitted to "
        "that method's points.",
    )
    return fig


# --- question 4 -------------------------------------------------------------------------------------


def _image_tasks(config: dict) -> list[str]:
    """The named tasks on real data: those whose kind loads a dataset (data.kinds declares it)."""
    from ...data.kinds import kind_of

    tasks = config.get("tasks") or {}
    return [name for name, t in tasks.items() if kind_of((t or {}).get("task") or {}).loads_dataset]


def question4_figure(study: Study):
    plt = pyplot()
    images = _image_tasks(study.config)
    ps, summary = study.table("pretrain_summary"), study.table("summary")
    if not images or ps is None or summary is None:
        raise InputError(f"question 4: {study.folder} has no image task with pretraining and transfer tables")
    task = images[0]
    spec = study.config["tasks"][task]["task"]
    synthetic = [r for r in ps.loc[ps["role"] == "task", "run"] if r not in images]
    methods = [m for m in study.analysis.get("methods", []) if m in set(summary["method"])] or sorted(
        set(summary["method"])
    )
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), layout="constrained", gridspec_kw={"width_ratios": [0.8, 1, 1]})
    ax = axes[0]
    runs = [task] + synthetic[:1]
    for i, run in enumerate(runs):
        r = ps[ps["run"] == run].iloc[0]
        for j, (col, name, color) in enumerate(
            (
                ("attention_on_relevant", "mean over queries", "C0"),
                ("attention_min_on_relevant", "min over queries", "C1"),
            )
        ):
            v, lo, hi = (float(r[f"{col}_{k}"]) for k in ("mean", "ci_low", "ci_high"))
            ax.bar(i + (j - 0.5) * 0.38, v, width=0.36, color=color, label=name if i == 0 else "_")
            ax.errorbar(i + (j - 0.5) * 0.38, v, yerr=[[v - lo], [hi - v]], color="k", capsize=3)
        ax.hlines(
            1 / int(r["D"]), i - 0.4, i + 0.4, colors="0.2", linestyles=":", label="uniform 1/D" if i == 0 else "_"
        )
    ax.set_xticks(
        range(len(runs)),
        [
            f"{spec.get('dataset', 'real data')} {spec['classes'][0]} vs {spec['classes'][1]}"
            f"\n(D = {spec['D']} image slots)",
            *[
                f"synthetic data ({run} task)\n(D = {int(ps.loc[ps['run'] == run, 'D'].iloc[0])} groups)"
                for run in runs[1:]
            ],
        ],
        fontsize=8,
    )
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("attention on the labelled slot j*, after pretraining")
    ax.set_title("Does pretraining attend to the labelled slot?", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    words = {"transfer": f"transfer to {spec['transfer_classes'][0]} vs {spec['transfer_classes'][1]}, same slot",
             "negative_control": "negative control: the label in another slot"}  # fmt: skip
    for ax, down in zip(axes[1:], ("transfer", "negative_control")):
        s = summary[(summary["run"] == task) & (summary["downstream"] == down)]
        for i, method in enumerate(methods):
            g = s[s["method"] == method].sort_values("n")
            if not len(g):
                continue
            ax.plot(g["n"], g["mean_test_accuracy"], "o-", ms=3, color=f"C{i}", label=method_words(method))
            ax.fill_between(g["n"], g["ci_low"], g["ci_high"], color=f"C{i}", alpha=0.15)
        ax.axhline(0.5, color="0.5", ls=":", lw=1, label="chance")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training samples n")
        ax.set_ylabel(f"test accuracy (mean, {CONFIDENCE:.0%} interval)")
        ax.set_ylim(0.4, 1.0)
        ax.set_title(words[down], fontsize=10)
        ax.grid(alpha=0.3)
    # below the panels: the curves rise through every corner
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), fontsize=8)
    pre = study.config["tasks"][task].get("pretrain") or {}
    seeds = int(ps.loc[ps["run"] == task, "n_seeds_ok"].iloc[0])
    question_title(
        fig,
        "Question 4. Does it happen on real images?",
        f"{spec.get('dataset', 'real data')}: classes {spec['classes'][0]} vs {spec['classes'][1]} in one of "
        f"D = {spec['D']} slots, the other slots random images; pretrained {pre.get('steps', '?')} steps at "
        f"eta = {pre.get('eta', study.config.get('pretrain', {}).get('eta', '?'))}, batch {pre.get('batch', '?')}; "
        f"{seeds} seeds: mean over seeds with its {CONFIDENCE:.0%} interval.",
    )
    return fig
