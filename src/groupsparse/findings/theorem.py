"""Question 1: does gradient descent learn the theorem's selection, at the theorem's rate?

The data of the answer (templates/question1.j2 words it), selected from the typed claims. The answer leads with
the flow study (configs/population.yaml: population gradient flow, the ODE of the invariant subspace's
coefficients) once its runs beyond its fit levels are judged: the bound with its constant fixed in advance
(kappa per c, with the local slopes of tau_c), the pre-registered kappa_c and law test (the difference between
every two laws, each law's fitted rate), its checks against gradient descent and of its sample and tolerance.
Population gradient descent (configs/population_gd.yaml and its D = 64 slice, at eta(D) = min(eta,
eta_D_limit / D)) is the flow's check there, with its own law test, batch and step-size checks, and plain batch
gradient descent beside it; before the flow's larger runs it led the answer.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..analysis.bound import TARGET_QUANTITY
from ..analysis.statements import levels
from .tables import FindingsError, Tables

NUMBER = 1
TITLE = "Does gradient descent learn the theorem's selection, at its rate?"
STUDY = "population_gd"
FLOW = "population"  # the decisive study: population gradient flow (configs/population.yaml), D = 4 ... 256
LARGEST_D = "population_D64"  # the population study's D = 64, a slice of its own (configs/slices/)
FIGURE = "docs/figures/question1.png"
PLAIN = "plain512"  # plain batch gradient descent beside population GD, up to D = 32
LAWS = ("theorem", "power", "nested")


def _float(x) -> float:
    return float(x) if x is not None and x == x else math.nan


def _interval(r) -> dict:
    return {"value": _float(r["measured"]), "low": _float(r["low"]), "high": _float(r["high"])}


def law_cells(t: Tables, variant: str, fitted_on: str = "") -> list[dict]:
    """Per kappa, the law test of one group of runs: its verdict, the law with the smallest criterion, the
    difference between every two laws with its interval, verdict and power, and each law's fitted rate c; of
    the laws fitted on ``fitted_on`` ('': the study's own runs; else another study's committed fits)."""
    cells = []
    tests = t.claims(statement="law_test", variant=variant, fitted_on=fitted_on).sort_values("kappa")
    for _, test in tests.iterrows():
        kappa = float(test["kappa"])
        differences = t.claims(statement="law_difference", variant=variant, kappa=kappa, fitted_on=fitted_on)
        if not len(differences):
            continue  # no law could be fitted: nothing to compare
        diffs = {}
        for _, r in differences.iterrows():
            diffs[f"{r['subject']}-{r['reference']}"] = _interval(r) | {
                "verdict": str(r["verdict"]),
                "power": _float(r["power"]),
                "a": str(r["subject"]),
                "b": str(r["reference"]),
            }
        rates = {
            law: _interval(r) | {"verdict": str(r["verdict"])}
            for law in ("theorem", "nested")
            if (r := t.claim(statement="law_rate", variant=variant, kappa=kappa, subject=law, fitted_on=fitted_on))
            is not None
        }
        cells.append(
            {
                "kappa": kappa,
                "verdict": str(test["verdict"]),
                "closest": str(test["subject"]),
                "criterion": _float(test["measured"]),
                "tested_D": str(test["D_grid"]),
                "replicates": _float(test["replicates"]),
                "batch": _float(test["batch"]),
                "eta_rule": str(test["eta_rule"]),
                "algorithm": str(test["algorithm"]),
                "diffs": diffs,
                "rates": rates,
            }
        )
    return cells


def theorem_counts(cells: list[dict]) -> dict:
    """How the theorem's form fared against the other laws over these law-test cells: its differences that
    another law wins, that tie, that it wins, and all of them."""
    theorem = [d for cell in cells for d in cell["diffs"].values() if d["a"] == "theorem"]
    return {
        "theorem_worse": sum(d["verdict"] == f"{d['b']} predicts better" for d in theorem),
        "theorem_tie": sum(d["verdict"] == "tie" for d in theorem),
        "theorem_better": sum(d["verdict"] == "theorem predicts better" for d in theorem),
        "theorem_total": len(theorem),
    }


def bound(t: Tables) -> list[dict]:
    """Per c (fixed before the data): the smallest kappa with which min attention reaches 1 - exp(-c D) within
    flow time kappa D^3 at every measured D, the D where its largest ratio sits, or why it is inconclusive."""
    out = []
    for _, r in t.claims(statement="bound_constant").sort_values("c").iterrows():
        Ds = levels(r["D_grid"])
        out.append(
            _interval(r)
            | {
                "c": float(r["c"]),
                "c_when": str(r["c_when"]),
                "D_grid": str(r["D_grid"]),
                "D_top": _float(r["D"]),
                "D_max": max(Ds),
                "at_largest": _float(r["D"]) == max(Ds),
                "inconclusive": r["verdict"] == "inconclusive",
                "replicates": _float(r["replicates"]),
                "algorithm": str(r["algorithm"]),
            }
        )
    return out


def checks(t: Tables) -> dict:
    """The batch and step-size checks: counts of their verdicts, the D where one differs."""
    rows = t.claims(analysis="batch_check")
    counts = {str(v): int(n) for v, n in rows["verdict"].value_counts().items()}
    differs = sorted({int(D) for D in rows.loc[rows["verdict"] == "differs", "D"].dropna()})
    measured = sorted({int(D) for D in rows["D"].dropna()})
    return {"counts": counts, "differs_at": differs, "total": len(rows), "D": measured}


def finite_batches(t: Tables) -> list[dict]:
    """The flow time to 1 - exp(-c D) at the smallest c, per D: population GD beside plain batch GD (the
    side-by-side table theorem_by_D; geometric means over seeds)."""
    if not t.has("theorem_by_D"):
        return []
    c0 = min(t.config["scaling"]["analysis"]["target_c"])
    by = t.rows("theorem_by_D", quantity=TARGET_QUANTITY.format(c=c0))
    groups = by.assign(group=by["group"].fillna("").astype(str))
    out = []
    for D in sorted(set(groups.loc[groups["group"] == PLAIN, "D"])):
        here = groups[groups["D"] == D].set_index("group")
        if "" not in here.index or not math.isfinite(float(here.loc["", "value"])):
            continue
        out.append({"D": int(D), "c": c0} | {g or "population": float(here.loc[g, "value"]) for g in here.index})
    return out


def flow(t: Tables | None) -> dict | None:
    """The flow study as far as it has run: its levels, the bound per c, its law tests (where runs above
    fit_D_max exist), the flow against population gradient descent where both ran, the mechanism per D."""
    if t is None or not t.has("claims"):
        return None
    against = t.claims(statement="flow_vs_gd")
    mechanism = {}
    for statement in ("gap_log_growth", "rest_follows_gap"):
        rows = t.claims(statement=statement).sort_values("D")
        mechanism[statement] = {
            "D": [int(D) for D in rows["D"]],
            "holds": [int(D) for D in rows.loc[rows["verdict"] == "holds", "D"]],
            "fails": [int(D) for D in rows.loc[rows["verdict"] == "does not hold", "D"]],
        }
    measured = sorted({int(D) for D in t.rows("theorem_by_D", group="", algorithm="flow")["D"]})
    predicted = _kappa_c_predictions(t)
    bounds = bound(t)
    kappa_c = []
    for b in bounds:
        judged = t.claims(statement="kappa_c_prediction", fitted_on="", c=b["c"]).sort_values(["D", "law"])
        at = []
        for D, g in judged.groupby("D", sort=True):
            laws = []
            for _, r in g.iterrows():
                p = predicted.get((r["law"], int(D), round(b["c"], 6)), {})
                laws.append({"law": str(r["law"]), "verdict": str(r["verdict"]), "bound": ""} | p)
            first = g.iloc[0]
            at.append(_interval(first) | {"D": int(D), "censored": first["high"] == math.inf, "laws": laws})
        kappa_c.append(
            {
                "c": b["c"],
                "slopes": local_slopes(t, b["c"]),
                "censored_D": censored_levels(t, b["c"]),
                "at": at,
                "judged": sum(len(a["laws"]) for a in at),
                "agree": sum(law["verdict"] == "agrees" for a in at for law in a["laws"]),
                # inside the interval, but the rival laws' predictions lie inside it too (power below min_power)
                "undecided": sum(law["verdict"] == "undecided" for a in at for law in a["laws"]),
            }
        )
    cells = law_cells(t, "")
    return {
        "settings": _settings(t)
        | {
            "measured_D": measured,
            "planned_D": sorted(int(D) for D in t.design["scaling"]["D_grid"]),  # the whole design, not the slice
            "tolerance": t.config["scaling"]["analysis"]["gap_growth_tolerance"],
            "check_tolerance": t.config["scaling"]["analysis"]["batch_tolerance"],
            "preregistered": str(Path(t.link).parent / "preregistered") if _preregistered(t).is_dir() else "",
        },
        "bound": bounds,
        "kappa_c": kappa_c,
        "checks": checks(t),
        "cells": cells,
        "ties": sum(c["diffs"]["power-nested"]["verdict"] == "tie" for c in cells if "power-nested" in c["diffs"]),
        "closest": {law: sum(c["closest"] == law for c in cells) for law in LAWS},
        **theorem_counts(cells),
        # the nested law's rate c fitted on the fit levels: above 0 (its one-sided verdict holds) at how many kappa
        "nested_c": {
            "positive": sum(c["rates"]["nested"]["verdict"] == "holds" for c in cells if "nested" in c["rates"]),
            "low": min([c["rates"]["nested"]["value"] for c in cells if "nested" in c["rates"]] or [math.nan]),
            "high": max([c["rates"]["nested"]["value"] for c in cells if "nested" in c["rates"]] or [math.nan]),
        },
        "against_gd": {
            "total": len(against),
            "agrees": int((against["verdict"] == "agrees").sum()),
            "differs": int((against["verdict"] == "differs").sum()),
            "D": sorted({int(D) for D in against["D"]}),
        },
        "mechanism": mechanism,
        "replicates": min([float(r) for r in t.claims(statement="bound_constant")["replicates"]] or [math.nan]),
    }


def _preregistered(t: Tables):
    """The study's committed pre-registered predictions beside its tables (docs/<study>/preregistered/)."""
    return t.folder.parent / "preregistered"


def _kappa_c_predictions(t: Tables) -> dict:
    """The kappa_c each law predicted from the study's fit levels, by (law, D, c): the committed pre-registered
    table beside the study's tables (docs/<study>/preregistered/), else the run's own (results/<study>/tables/)."""
    import pandas as pd

    path = _preregistered(t) / "kappa_c_predictions.csv"
    path = path if path.is_file() else t.path("kappa_c_predictions")
    if path is None:
        return {}
    table = pd.read_csv(path)
    fit_D_max = t.config["scaling"]["analysis"]["fit_D_max"]
    own = table[(table["algorithm"] == "flow") & (table["fit_D_max"] == fit_D_max)]
    return {
        (str(r["law"]), int(r["D"]), round(float(r["c"]), 6)): {
            "kappa_c": float(r["kappa_c"]),
            "low": float(r["kappa_c_low"]),
            "high": float(r["kappa_c_high"]),
            "bound": "" if not isinstance(r["censored"], str) else r["censored"],
        }
        for _, r in own.iterrows()
    }


def _tau_c_rows(t: Tables, c: float):
    """The by-D table's rows of the flow grid's flow time to 1 - exp(-c D) (bound.by_D's label)."""
    return t.rows("theorem_by_D", group="", algorithm="flow", quantity=TARGET_QUANTITY.format(c=c))


def censored_levels(t: Tables, c: float) -> list[int]:
    """The measured D at which the flow did not reach 1 - exp(-c D) by its runs' end."""
    rows = _tau_c_rows(t, c)
    return sorted(int(D) for D in rows.loc[rows["censored"].astype(bool) & rows["value"].notna(), "D"])


def local_slopes(t: Tables, c: float) -> list[dict]:
    """The slopes of log tau_c on log D between neighbouring measured levels (3: kappa_c constant; above 3 it
    grows), from the by-D table's geometric means; a censored level right after the last measured one adds a
    lower bound (``at_least``: its runs' end is a lower bound on tau_c), and ends the list."""
    rows = _tau_c_rows(t, c)
    rows = rows[rows["value"].notna()].sort_values("D")
    censored = rows["censored"].astype(bool)
    reached = rows[~censored]
    D, tau = reached["D"].to_numpy(float), reached["value"].to_numpy(float)
    slopes = [
        {"from": int(a), "to": int(b), "slope": math.log(y / x) / math.log(b / a), "at_least": False}
        for a, b, x, y in zip(D, D[1:], tau, tau[1:])
    ]
    after = rows[censored & (rows["D"] > (D[-1] if D.size else math.inf))]
    if len(after):
        b, y = float(after["D"].iloc[0]), float(after["value"].iloc[0])
        slopes.append(
            {"from": int(D[-1]), "to": int(b), "slope": math.log(y / tau[-1]) / math.log(b / D[-1]), "at_least": True}
        )
    return slopes


def _settings(t: Tables) -> dict:
    grid = t.config["scaling"]
    pre = t.config["pretrain"] | grid["pretrain"]
    return {
        "config": t.config_file,
        "page": t.page,
        "tables": t.link,
        "d": grid["d_grid"],
        "D_grid": grid["D_grid"],
        "batch": pre["batch"],
        "batch_by_D": grid.get("batch_by_D") or [],
        "eta": pre["eta"],
        "eta_D_limit": pre.get("eta_D_limit"),
        "seeds": pre["seeds"],
        "flow_time_per_D3": grid["flow_time_per_D3"],
        "fit_D_max": grid["analysis"]["fit_D_max"],
        "min_power": grid["analysis"]["min_power"],
        "predict_D": grid["analysis"]["predict_D"],
        "dtype": t.config["dtype"],
        "solver": pre.get("solver", "gd"),
        "samples": (pre.get("flow") or {}).get("samples"),
        "rtol": (pre.get("flow") or {}).get("rtol"),
    }


def context(studies: dict[str, Tables]) -> dict | None:
    """The answer's data, or None where the study has no law test (review of another study)."""
    t = studies.get(STUDY)
    try:
        if t is None or not len(t.claims(statement="law_test")):
            return None
    except FindingsError:
        return None
    population = law_cells(t, "")
    if not population:
        return None
    largest = studies.get(LARGEST_D)
    at_64 = law_cells(largest, "") if largest is not None and largest.has("claims") else []
    flow_context = flow(studies.get(FLOW))
    return {
        "number": NUMBER,
        "title": TITLE,
        "figure": FIGURE,
        "settings": _settings(t),
        "largest": _settings(largest) | {"bound": bound(largest)} if at_64 else None,
        "cells": population,
        "cells_64": at_64,
        "plain": law_cells(t, PLAIN),
        "bound": bound(t),
        "checks": checks(t),
        "finite_batches": finite_batches(t),
        **theorem_counts(population + at_64),
        "replicates": min([c["replicates"] for c in population + at_64] or [math.nan]),
        "flow": flow_context,
        # the flow leads the answer once its runs beyond its fit levels are judged (its law test has cells)
        "flow_led": bool(flow_context and flow_context["cells"]),
    }
