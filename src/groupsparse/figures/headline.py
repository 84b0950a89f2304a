"""One figure per question of the README, each read without the text, made from the committed tables
alone (``docs/<study>/tables/*.csv`` and the study's ``config.yaml``; ``results/`` is empty in a fresh
checkout): :func:`write_all` writes ``docs/figures/question1.png`` ... ``question4.png``.

1. Population gradient descent against the theorem's rate: r = 1 - min attention on j* at flow time
   kappa D^3 against D, with the laws fitted on the small D before the large D ran and their
   predictions, and the constant kappa_c(D) = tau_c / D^3 of the bound for each target c.
2. Ordinary training over D: min attention on j* at the last step of each practitioners' variant.
3. Transfer: samples n* to the target accuracy against d and D per method, beside n* ~ d + D and dD.
4. Real images: attention on the labelled slot after pretraining, and transfer accuracy against n.

Each question's function takes the study folders it reads, so a new study's tables (D up to 256, more
variants, another image set) give the same figure; nothing is read from a claim's text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.laws import design
from ..analysis.stats import CONFIDENCE
from ..io.files import InputError, atomic_path
from . import fit_text, mark_at_floor, pyplot
from .theorem import LAW_STYLE, levels_from_table
from .words import eta_words, method_words, variant_words

# the committed study folders each question reads (docs/<folder>/tables), in order of precedence: a
# level two folders both hold (the same run, as a slice reruns its parent's levels) is read from the first
SOURCES = {
    "question1": ("population", "population_D64"),
    "question2": ("practitioners_small_D", "practitioners_D16", "practitioners_D24", "practitioners_D24_stable"),
    "question3": ("results",),
    "question4": ("results",),
}
# bound.by_D's label of the flow time to a theorem target, matched to each c of the config as written
TARGET_QUANTITY = "flow time until min attention >= 1 - exp(-{c:g} D)"


@dataclass
class Study:
    """A committed study: its name, its config and the tables a headline figure reads."""

    name: str
    folder: Path
    config: dict = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame | None:
        path = self.folder / "tables" / f"{name}.csv"
        return pd.read_csv(path) if path.is_file() else None

    @property
    def analysis(self) -> dict:
        return (self.config.get("scaling") or {}).get("analysis") or {}


def read_study(folder: Path | str) -> Study:
    """A study folder (``docs/population``) with its tables under ``tables/``."""
    import yaml

    folder = Path(folder)
    if not (folder / "tables").is_dir():
        raise InputError(f"{folder}: no tables folder (a committed study has {folder}/tables/*.csv)")
    path = folder / "tables" / "config.yaml"
    config = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return Study(folder.name, folder, config)


def _number(x: float, digits: int = 2) -> str:
    """A number for a label; never 'nan' (the caller leaves out what has no value)."""
    if not np.isfinite(x):
        raise ValueError("a label needs a finite number")
    return f"{x:.{digits}g}"


def _log_D_axis(ax, Ds) -> None:
    Ds = sorted({int(D) for D in Ds})
    ax.set_xscale("log")
    ax.set_xticks(Ds, [str(D) for D in Ds], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("D (number of groups)")


def _log_y(ax) -> None:
    """A log y axis labelled at 1, 2, 5 x 10^k in plain numbers (a panel may span less than a decade)."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _errorbar(ax, x, value, low, high, **kwargs):
    low = np.where(np.isfinite(low), value - low, 0)
    high = np.where(np.isfinite(high), high - value, 0)
    return ax.errorbar(x, value, yerr=[np.clip(low, 0, None), np.clip(high, 0, None)], capsize=2, **kwargs)


def _title(fig, question: str, subtitle: str) -> None:
    """The question, and below it what the figure shows, wrapped to the figure's width."""
    width = 0.97 * fig.get_figwidth()
    fig.suptitle(fit_text(question + "\n" + subtitle, width, 11), fontsize=11, x=0.01, ha="left")


# --- question 1 -------------------------------------------------------------------------------------


def _first_wins(frames: list[pd.DataFrame], keys: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True).drop_duplicates(keys, keep="first").reset_index(drop=True)


def question1_levels(studies: list[Study]) -> tuple[pd.DataFrame, pd.DataFrame, list[float], int | None]:
    """The grid's measured levels and its usable predictions, merged over ``studies``; the kappas and
    the largest D of the fits."""
    kappas = [float(k) for k in studies[0].analysis.get("kappas", [])]
    measured, predicted = [], []
    fit_max = None
    for s in studies:
        by_D, pred = s.table("theorem_by_D"), s.table("predictions")
        if by_D is not None and len(by_D):
            m = levels_from_table(by_D, kappas)
            measured.append(m[m["group"] == ""])
        if pred is not None and len(pred):
            pred = pred.assign(group=pred["group"].fillna("").astype(str))
            pred = pred[(pred["group"] == "") & np.isfinite(pred["rest"].astype(float))]
            predicted.append(pred)
            if len(pred) and fit_max is None:
                fit_max = int(pred["fit_D_max"].iloc[0])
    measured = _first_wins(measured, ["d", "kappa", "D"])
    predicted = _first_wins(predicted, ["d", "kappa", "law", "D"])
    return measured, predicted, kappas, fit_max


def kappa_c_levels(studies: list[Study]) -> pd.DataFrame:
    """kappa_c(D) = tau_c(D) / D^3 of the grid for each target c of the config: value, interval, and
    whether it is censored (a bound: not reached by the run's end, or NaN: reached before any record)."""
    targets = [float(c) for c in studies[0].analysis.get("target_c", [])]
    frames = []
    for s in studies:
        by_D = s.table("theorem_by_D")
        if by_D is None or not len(by_D):
            continue
        grid = by_D[by_D["group"].fillna("").astype(str) == ""]
        for c in targets:
            if "c" in grid.columns:  # a typed column, where the table has one
                rows = grid[np.isclose(grid["c"].astype(float), c)]
            else:
                rows = grid[grid["quantity"] == TARGET_QUANTITY.format(c=c)]
            D3 = rows["D"].astype(float) ** 3
            frames.append(
                pd.DataFrame(
                    {
                        "c": c,
                        "d": rows["d"].astype(int),
                        "D": rows["D"].astype(int),
                        "value": rows["value"].astype(float) / D3,
                        "low": rows["low"].astype(float) / D3,
                        "high": rows["high"].astype(float) / D3,
                        "censored": rows["censored"].astype(str).str.lower().eq("true"),
                    }
                )
            )
    return _first_wins(frames, ["c", "d", "D"])


def question1_figure(studies: list[Study]):
    plt = pyplot()
    measured, predicted, kappas, fit_max = question1_levels(studies)
    kc = kappa_c_levels(studies)
    if not len(measured):
        raise InputError(f"question 1: no measured levels in {', '.join(str(s.folder) for s in studies)}")
    d = int(measured["d"].iloc[0])
    measured, predicted = measured[measured["d"] == d], predicted[predicted["d"] == d] if len(predicted) else predicted
    all_D = sorted(set(measured["D"]) | (set(predicted["D"]) if len(predicted) else set()))
    n = len(kappas) + 1
    cols = 2 if n == 4 else min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.4 * rows + 1.2), layout="constrained", squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    axes = list(axes.flat[:n])
    handles: dict[str, object] = {}
    for ax, kappa in zip(axes, kappas):
        m = measured[measured["kappa"] == kappa].sort_values("D")
        ok = m[np.isfinite(m["value"])]
        if fit_max is not None:
            ax.axvspan(min(all_D) * 0.9, fit_max * 1.05, color="0.93", zorder=0)
            handles["fit"] = plt.Rectangle((0, 0), 1, 1, color="0.93")
        within = ok["D"] <= fit_max if fit_max is not None else pd.Series(True, ok.index)
        for part, color, key in ((ok[within], "k", "measured"), (ok[~within], "C2", "beyond")):
            if len(part):
                handles[key] = _errorbar(
                    ax, part["D"], part["value"], part["low"], part["high"], fmt="o", color=color, ms=5, zorder=4
                )
        mark_at_floor(ax, m.loc[~np.isfinite(m["value"]), "D"], marker="x", color="C3", label="_")
        usual = measured["batch"].mode().iloc[0] if "batch" in measured.columns else None
        for _, r in ok[ok["batch"] != usual].iterrows() if usual is not None else []:  # a level at another batch
            ax.annotate(
                f"batch {int(r['batch'])}",
                (r["D"], r["value"]),
                xytext=(4, -12),
                textcoords="offset points",
                fontsize=7,
            )
        p = predicted[predicted["kappa"] == kappa] if len(predicted) else predicted
        laws = [law for law in LAW_STYLE if len(p) and law in set(p["law"])]
        for i, law in enumerate(laws):
            color, _ = LAW_STYLE[law]
            q = p[p["law"] == law].sort_values("D")
            coef = q["coefficients"].dropna()
            if len(coef) and isinstance(coef.iloc[0], str):  # the fit's coefficients, space-separated numbers
                beta = np.array([float(x) for x in coef.iloc[0].split()])
                Ds = np.geomspace(min(all_D), max(all_D), 200)
                X, off = design(law, Ds)
                (handles[law],) = ax.plot(Ds, np.exp(X @ beta + off), color=color, lw=1.2, zorder=2)
            shift = 1 + 0.035 * (i - (len(laws) - 1) / 2)  # side by side at each predicted D
            handles["prediction"] = _errorbar(
                ax, q["D"] * shift, q["rest"], q["rest_low"], q["rest_high"], fmt="s", mfc="none", color=color, ms=4
            )
        ax.set_yscale("log")
        _log_D_axis(ax, all_D)
        ax.set_ylabel("r = 1 - min attention on j*")
        ax.set_title(f"r at flow time {kappa:g} D^3", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    ax = axes[-1]
    for i, (c, g) in enumerate(kc.groupby("c", sort=True)):
        g = g.sort_values("D")
        color = f"C{i + 4}"
        reached = g[~g["censored"] & np.isfinite(g["value"])]
        if len(reached):
            handles[f"c={c:g}"] = _errorbar(
                ax, reached["D"], reached["value"], reached["low"], reached["high"], fmt="o-", color=color, ms=4, lw=1
            )
        bound = g[g["censored"] & np.isfinite(g["value"])]
        if len(bound):  # not reached by the run's end: kappa_c is at least this
            ax.scatter(bound["D"], bound["value"], marker="^", s=45, facecolors="none", edgecolors=color, zorder=4)
            handles["lower bound"] = ax.scatter([], [], marker="^", s=45, facecolors="none", edgecolors="0.3")
        start = g[g["censored"] & ~np.isfinite(g["value"])]
        if len(start):  # reached before the first record: no time, drawn at the floor
            mark_at_floor(ax, start["D"], marker="v", color=color, label="_")
            handles["at start"] = plt.Line2D([], [], ls="none", marker="v", mfc="none", color="0.3")
    ax.set_yscale("log")
    _log_D_axis(ax, sorted(set(kc["D"])) if len(kc) else all_D)
    ax.set_ylabel("kappa_c(D) = tau_c / D^3")
    ax.set_title("flow time to 1 - exp(-c D), over D^3", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    names = {
        "fit": f"laws fitted here (D <= {fit_max}), before the larger D ran",
        "measured": f"measured: geometric mean over seeds, {CONFIDENCE:.0%} interval",
        "beyond": "measured beyond the fitted range",
        **{law: LAW_STYLE[law][1] for law in LAW_STYLE},
        "prediction": f"pre-registered prediction, {CONFIDENCE:.0%} interval",
        **{f"c={c:g}": f"kappa_c for c = {c:g}" for c in sorted(set(kc["c"]))},
        "lower bound": "not reached by the run's end: kappa_c at least this",
        "at start": "reached before the first record (no time)",
    }
    keys = [k for k in names if k in handles]
    fig.legend([handles[k] for k in keys], [names[k] for k in keys], loc="outside lower center", ncols=3, fontsize=8)
    _title(
        fig,
        "Question 1. Does population gradient descent reach the theorem's selection at the theorem's rate?",
        f"Population gradient descent from the zero start (d = {d}); r = 1 - min over queries of the attention on "
        "the label's group j*, at flow time tau = eta x steps = kappa D^3. The theorem bounds r by "
        "exp(-Theta(D)) after Theta(D^3) flow time; last panel: the flow time each target 1 - exp(-cD) took, "
        "over D^3.",
    )
    return fig


# --- question 2 -------------------------------------------------------------------------------------


def _pretrain(config: dict) -> dict:
    return (config.get("pretrain") or {}) | (((config.get("scaling") or {}).get("pretrain")) or {})


def _variant_settings(config: dict, variant: str) -> dict:
    """A stability variant's settings in the config ({} for the grid's runs)."""
    variants = ((config.get("scaling") or {}).get("stability") or {}).get("variants") or {}
    return variants.get(variant) or {}


def _panel_of(config: dict, variant: str) -> str:
    """Which step size the run group trained with: 'adam', 'stable' (eta(D) = min(eta, L/D)) or 'paper'."""
    pre = _pretrain(config) | (_variant_settings(config, variant).get("pretrain") or {})
    if pre.get("optimizer") == "adam":
        return "adam"
    return "stable" if pre.get("eta_D_limit") else "paper"


def _twin(config: dict, variant: str) -> str | None:
    """A stable-step variant's twin at the fixed step size: the variant whose settings are the same but
    for the limit (below D = limit / eta both step sizes are eta, and the study ran those D once)."""
    mine = _variant_settings(config, variant)
    strip = lambda v: {  # noqa: E731
        k: ({kk: vv for kk, vv in x.items() if kk != "eta_D_limit"} if k == "pretrain" else x)
        for k, x in v.items()
        if k not in ("D_grid", "steps_per_D3")
    }
    variants = ((config.get("scaling") or {}).get("stability") or {}).get("variants") or {}
    for name, other in variants.items():
        if name != variant and strip(other) == strip(mine) and not (other.get("pretrain") or {}).get("eta_D_limit"):
            return name
    return None


def question2_levels(studies: list[Study]) -> pd.DataFrame:
    """Per run group (the grid '' or a variant) and D: min attention on j* at the last step, with the
    panel (step size) it belongs to and its words, merged over ``studies`` (the first study wins)."""
    frames = []
    for s in studies:
        ps = s.table("pretrain_summary")
        if ps is None or not len(ps):
            continue
        ps = ps[ps["role"] == "scaling"].assign(variant=lambda t: t["variant"].fillna("").astype(str))
        ps = ps[~ps["variant"].str.match(r"batch\d")]  # the batch check: not ordinary training
        if not len(ps):
            continue
        frames.append(
            pd.DataFrame(
                {
                    "variant": ps["variant"],
                    "D": ps["D"].astype(int),
                    "value": ps["attention_min_on_relevant_mean"].astype(float),
                    "low": ps["attention_min_on_relevant_ci_low"].astype(float),
                    "high": ps["attention_min_on_relevant_ci_high"].astype(float),
                    "seeds": ps["n_seeds_ok"].astype(int),
                    "diverged": ps["n_seeds_diverged"].astype(int),
                    "panel": [_panel_of(s.config, v) for v in ps["variant"]],
                    "words": [variant_words(v, s.config, step_size=False) for v in ps["variant"]],
                    "twin": [_twin(s.config, v) or "" for v in ps["variant"]],
                    "study": s.name,
                }
            )
        )
    return _first_wins(frames, ["variant", "D"])


def question2_figure(studies: list[Study]):
    plt = pyplot()
    levels = question2_levels(studies)
    if not len(levels):
        raise InputError(f"question 2: no scaling runs in {', '.join(str(s.folder) for s in studies)}")
    config = studies[0].config
    eta = float(_pretrain(config).get("eta", 0.5))
    stable = [v for v in set(levels.loc[levels["panel"] == "stable", "variant"])]
    rule = (
        eta_words(*(lambda pre: (pre.get("eta"), pre.get("eta_D_limit")))(
            _pretrain(config) | (_variant_settings(config, stable[0]).get("pretrain") or {})
        ))
        if stable
        else ""
    )  # fmt: skip
    c0 = min(float(c) for c in studies[0].analysis.get("target_c", [0.05]))
    flow = ((config.get("scaling") or {}).get("stability") or {}).get("flow_time_per_D3")
    panels = [
        ("paper", f"the paper's step size, eta = {eta:g}"),
        ("stable", f"a stable step size, {rule}; at small D it is the paper's"),
        ("adam", "Adam (its step size is no flow time)"),
    ]
    panels = [(key, title) for key, title in panels if (levels["panel"] == key).any()]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 6.4), layout="constrained", sharey=True)
    axes = np.atleast_1d(axes)
    Ds = sorted(set(levels["D"]))
    grid_D = np.geomspace(min(Ds), max(Ds), 100)
    # one colour per kind of training (a stable-step variant takes its fixed-step twin's), the same in every panel
    family = {v: (t or v) for v, t in zip(levels["variant"], levels["twin"])}
    kinds = sorted(set(family.values()) - {""})
    colors = {"": "k"} | {k: f"C{i % 10}" for i, k in enumerate(kinds)}
    for ax, (key, title) in zip(axes, panels):
        rows = levels[levels["panel"] == key]
        for variant in sorted(set(rows["variant"]), key=lambda v: (v != "", family[v])):
            g = rows[rows["variant"] == variant]
            twin = g["twin"].iloc[0]
            if twin:  # below D = L / eta the stable step is eta itself: the twin's runs are these runs
                same = levels[(levels["variant"] == twin) & (levels["D"] < g["D"].min())]
                g = pd.concat([same.assign(words=g["words"].iloc[0]), g])
            g = g.sort_values("D")
            label = ("reference, the paper's algorithm: " if variant == "" else "") + g["words"].iloc[0]
            _errorbar(
                ax, g["D"], g["value"], g["low"], g["high"], fmt="o-", color=colors[family[variant]], ms=4, lw=1.2,
                label=label,
            )  # fmt: skip
        ax.plot(
            grid_D, 1 - np.exp(-c0 * grid_D), ":", color="0.4", lw=1.2, label=f"the theorem's level 1 - exp(-{c0:g} D)"
        )
        _log_D_axis(ax, Ds)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("min over queries of the attention on j*, last step")
        ax.set_title(fit_text(title, 5.0, 10), fontsize=10)
        ax.grid(alpha=0.3)
        # below the panel: the curves fall to 0 at large D, where a legend inside would cover them
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    length = f"to flow time tau = eta x steps = {flow:g} D^3 (Adam: its own number of steps)" if flow else "to its end"
    seeds = sorted(set(levels["seeds"]))
    seeds = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    _title(
        fig,
        "Question 2. What does ordinary training (autograd, float32, a perturbed start) do as D grows?",
        f"Each variant of the training trained {length}, {seeds} seeds each; the mean over seeds at the last "
        f"step, with its {CONFIDENCE:.0%} interval. The theorem's selection is the dotted level and above.",
    )
    return fig


# --- question 3 -------------------------------------------------------------------------------------


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
            handles[f"d={d}"] = _errorbar(
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
        _log_y(ax)
        _log_D_axis(ax, sorted(set(levels["D"])))
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
    _title(
        fig,
        "Question 3. Does transfer need about d + D samples rather than d x D, under one tuning rule for every method?",
        f"Samples n* each method needs to reach {target:.0%} test accuracy on the transfer task, per group "
        "dimension d (colour) and number of groups D. Dashed and dotted: each shape's constant fitted to "
        "that method's points.",
    )
    return fig


# --- question 4 -------------------------------------------------------------------------------------


def _image_tasks(config: dict) -> list[str]:
    return [
        name for name, t in (config.get("tasks") or {}).items() if ((t or {}).get("task") or {}).get("kind") == "images"
    ]


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
            f"{spec.get('dataset', 'images')} {spec['classes'][0]} vs {spec['classes'][1]}"
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
    _title(
        fig,
        "Question 4. Does it happen on real images?",
        f"{spec.get('dataset', 'images')}: classes {spec['classes'][0]} vs {spec['classes'][1]} in one of "
        f"D = {spec['D']} slots, the other slots random images; pretrained {pre.get('steps', '?')} steps at "
        f"eta = {pre.get('eta', study.config.get('pretrain', {}).get('eta', '?'))}, batch {pre.get('batch', '?')}; "
        f"{seeds} seeds: mean over seeds with its {CONFIDENCE:.0%} interval.",
    )
    return fig


# --- all four ---------------------------------------------------------------------------------------

QUESTIONS = {
    "question1": lambda studies: question1_figure(studies),
    "question2": lambda studies: question2_figure(studies),
    "question3": lambda studies: question3_figure(studies[0]),
    "question4": lambda studies: question4_figure(studies[0]),
}


def figures(docs_dir: Path | str = "docs", sources: dict | None = None) -> dict:
    """Each question's figure (matplotlib) from the study folders under ``docs_dir`` (``sources``
    overrides :data:`SOURCES`, per question a list of folders, relative to ``docs_dir`` or absolute);
    a question whose folders are all missing is left out."""
    docs_dir = Path(docs_dir)
    made = {}
    for question, folders in (SOURCES | (sources or {})).items():
        studies = [read_study(docs_dir / f) for f in folders if (docs_dir / f / "tables").is_dir()]
        if studies:
            made[question] = QUESTIONS[question](studies)
    return made


def write_all(
    docs_dir: Path | str = "docs", out_dir: Path | str | None = None, sources: dict | None = None
) -> list[Path]:
    """Write ``question1.png`` ... ``question4.png`` (``out_dir``, default ``<docs_dir>/figures``) from the
    committed tables; returns the paths written."""
    plt = pyplot()
    out = Path(out_dir) if out_dir is not None else Path(docs_dir) / "figures"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for question, fig in figures(docs_dir, sources).items():
        path = out / f"{question}.png"
        with atomic_path(path) as tmp:
            # a fixed resolution and no metadata: the same tables give the same bytes
            fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths


# --- the committed study pages' figures that their tables determine ---------------------------------


def redraw_committed(docs_dir: Path | str = "docs") -> list[Path]:
    """Redraw in place the committed figures a study's committed tables determine: its out-of-sample
    figure (theorem_by_D.csv, predictions.csv, config.yaml) and each task's transfer accuracy
    (summary.csv). Only figures already committed are rewritten (a page links to them); the others
    need the study's trajectories, in results/ after a run, and its snapshot."""
    import shutil
    import tempfile

    from . import runs
    from .theorem import out_of_sample_figure

    plt = pyplot()
    written = []
    for folder in sorted(p for p in Path(docs_dir).iterdir() if (p / "tables").is_dir()):
        study = read_study(folder)
        target = folder / "scaling_out_of_sample.png"
        by_D, predictions = study.table("theorem_by_D"), study.table("predictions")
        if target.is_file() and by_D is not None and predictions is not None:
            kappas = [float(k) for k in study.analysis.get("kappas", [])]
            fig = out_of_sample_figure(levels_from_table(by_D, kappas), predictions, study.config)
            with atomic_path(target) as tmp:
                fig.savefig(tmp, format="png", metadata={"Software": None})
            plt.close(fig)
            written.append(target)
        summary = study.table("summary")
        if summary is None:
            continue
        specs, config = runs.run_specs(folder / "tables")
        for run in sorted(set(summary["run"])):
            target = folder / f"{run}_transfer_accuracy.png"
            if not target.is_file():
                continue
            with tempfile.TemporaryDirectory() as tmp:
                title = runs.describe(specs.get(run), run, config)
                made = runs.transfer_accuracy(summary[summary["run"] == run], title, Path(tmp))
                png = next(p for p in made if p.suffix == ".png")
                shutil.copyfile(png, target)
            written.append(target)
    return written
