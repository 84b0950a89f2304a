"""Questions 1 and 2: does gradient descent select the label's group at the theorem's rate
(population gradient descent against the pre-registered laws, and the bound's constant kappa_c), and
what does ordinary training (the practitioners' variants) do as D grows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.bound import TARGET_QUANTITY
from ...analysis.stats import CONFIDENCE
from ...io.files import InputError
from .. import fit_text, mark_at_floor, pyplot
from ..theorem import LAW_STYLE, law_curve, levels_from_table
from ..words import eta_words, variant_words
from .common import Study, errorbar, first_wins, log_D_axis, question_title


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
    measured = first_wins(measured, ["d", "kappa", "D"])
    predicted = first_wins(predicted, ["d", "kappa", "law", "D"])
    if len(predicted) and fit_max is not None:  # one source of predictions: the first study's own fits
        predicted = predicted[predicted["fit_D_max"].astype(int) == fit_max]
    return measured, predicted, kappas, fit_max


def _algorithm(study: Study) -> str:
    """'gradient flow' or 'gradient descent': what the study's pretraining solved."""
    pretrain = ((study.config.get("scaling") or {}).get("pretrain")) or {}
    return "gradient flow" if pretrain.get("solver") == "flow" else "gradient descent"


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
    return first_wins(frames, ["c", "d", "D"])


def question1_figure(studies: list[Study], kappas: tuple[float, ...] | None = None):
    """The law test's panels (r at flow time kappa D^3: measured, each law's curve and pre-registered predictions),
    one per kappa of the study's or of ``kappas`` (a subset, for display), and kappa_c(D) for each target c."""
    plt = pyplot()
    measured, predicted, all_kappas, fit_max = question1_levels(studies)
    kappas = [k for k in all_kappas if kappas is None or any(abs(k - x) < 1e-12 for x in kappas)]
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
                handles[key] = errorbar(
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
            Ds = np.geomspace(min(all_D), max(all_D), 200)
            curve = law_curve(q, law, Ds)
            if curve is not None:
                (handles[law],) = ax.plot(Ds, curve, color=color, lw=1.2, zorder=2)
            shift = 1 + 0.035 * (i - (len(laws) - 1) / 2)  # side by side at each predicted D
            handles["prediction"] = errorbar(
                ax, q["D"] * shift, q["rest"], q["rest_low"], q["rest_high"], fmt="s", mfc="none", color=color, ms=4
            )
        ax.set_yscale("log")
        log_D_axis(ax, all_D)
        ax.set_ylabel("r = 1 - min attention on j*")
        ax.set_title(f"r at flow time {kappa:g} D^3", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    ax = axes[-1]
    for i, (c, g) in enumerate(kc.groupby("c", sort=True)):
        g = g.sort_values("D")
        color = f"C{i + 4}"
        reached = g[~g["censored"] & np.isfinite(g["value"])]
        if len(reached):
            handles[f"c={c:g}"] = errorbar(
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
    log_D_axis(ax, sorted(set(kc["D"])) if len(kc) else all_D)
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
    algorithm = _algorithm(studies[0])
    time = "flow time tau" if algorithm == "gradient flow" else "flow time tau = eta x steps"
    question_title(
        fig,
        f"Question 1. Does population {algorithm} reach the theorem's selection at the theorem's rate?",
        f"Population {algorithm} from the zero start (d = {d}); r = 1 - min over queries of the attention on "
        f"the label's group j*, at {time} = kappa D^3. The theorem bounds r by "
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
    return first_wins(frames, ["variant", "D"])


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
            errorbar(
                ax, g["D"], g["value"], g["low"], g["high"], fmt="o-", color=colors[family[variant]], ms=4, lw=1.2,
                label=label,
            )  # fmt: skip
        ax.plot(
            grid_D, 1 - np.exp(-c0 * grid_D), ":", color="0.4", lw=1.2, label=f"the theorem's level 1 - exp(-{c0:g} D)"
        )
        log_D_axis(ax, Ds)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("min over queries of the attention on j*, last step")
        ax.set_title(fit_text(title, 5.0, 10), fontsize=10)
        ax.grid(alpha=0.3)
        # below the panel: the curves fall to 0 at large D, where a legend inside would cover them
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    length = f"to flow time tau = eta x steps = {flow:g} D^3 (Adam: its own number of steps)" if flow else "to its end"
    seeds = sorted(set(levels["seeds"]))
    seeds = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    question_title(
        fig,
        "Question 2. What does ordinary training (autograd, float32, a perturbed start) do as D grows?",
        f"Each variant of the training trained {length}, {seeds} seeds each; the mean over seeds at the last "
        f"step, with its {CONFIDENCE:.0%} interval. The theorem's selection is the dotted level and above.",
    )
    return fig
