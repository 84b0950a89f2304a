"""Question 2: what does ordinary training (autograd, float32, a perturbed start) do at large D?

The data of the answer (templates/question2.j2 words it): per training variant and D, whether the
run reaches the theorem's level (min attention >= 1 - exp(-c D), the claims' ``reaches_level`` rows)
and at which step size, marked stable where eta < 8 / D (gradient descent at the zero start is
linearly stable there, docs/STUDY.md section 3.1). The variants come from three studies: the theorem
study's stability runs at eta = 0.5 (configs/theorem.yaml), the population study's plain batch gradient
descent at eta(D) = min(0.5, 6/D) (configs/population_gd.yaml), and the practitioners' sweep
(configs/practitioners.yaml, the slices that ran), each variant's settings read from its config.
"""

from __future__ import annotations

import math

from ..config.specs import step_size
from .tables import FindingsError, Tables

NUMBER = 2
TITLE = "What does ordinary training do at large D?"
FIGURE = "docs/figures/question2.png"
# the studies whose stability variants answer it, in the table's order (a D in two slices: the first's)
STUDIES = (
    "practitioners_small_D",
    "practitioners_D16",
    "practitioners_D24_stable",
    "practitioners_D24",
    "theorem",
    "population_gd",
)
FULL = "configs/practitioners.yaml"  # the sweep the practitioners_* studies are slices of
STABLE_EDGE = 8.0  # gradient descent from the zero start is linearly stable for eta < 8 / D
FAMILY = ("zero", "iid", "init", "separate", "adam", "autograd", "symmetry", "plain")  # the table's order


def _spec(t: Tables, name: str) -> dict:
    """A variant's settings: its override over the grid's pretraining and the config's."""
    config, grid = t.config, t.config["scaling"]
    spec = grid["stability"]["variants"][name] or {}
    pre = config["pretrain"] | (grid.get("pretrain") or {}) | (spec.get("pretrain") or {})
    model = config.get("model", {}) | (spec.get("model") or {})
    return {
        "optimizer": pre.get("optimizer", "sgd"),
        "gradient": pre.get("gradient", "auto"),
        "sampling": pre.get("sampling", "antithetic"),
        "batch": pre["batch"],
        "eta": float(pre["eta"]),
        "eta_D_limit": pre.get("eta_D_limit"),
        "start": "zero" if model.get("init", "zero") == "zero" else "random",
        "init_scale": float(model.get("init_scale", 0.0)),
        "separate": model.get("attention") == "separate",
        "dtype": spec.get("dtype", config.get("dtype", "float32")),
        "D_grid": list(spec.get("D_grid") or grid["D_grid"]),
    }


def eta_at(spec: dict, D: int) -> float:
    return step_size(spec["eta"], spec["eta_D_limit"] or None, D)


def variants(studies: dict[str, Tables]) -> list[dict]:
    """Every stability variant of the studies at hand, with its settings and its verdict per D."""
    out: dict[str, dict] = {}
    for study in STUDIES:
        t = studies.get(study)
        if t is None or not t.has("claims"):
            continue
        try:
            names = list((t.config["scaling"].get("stability") or {}).get("variants") or {})
        except FindingsError:
            continue
        for name in names:
            spec = _spec(t, name)
            seeds = int(t.config["scaling"]["stability"]["seeds"])
            v = out.setdefault(name, spec | {"name": name, "study": study, "studies": [], "at": {}, "seeds": seeds})
            for _, r in t.claims(statement="reaches_level", variant=name).iterrows():
                D = int(r["D"])
                if D in v["at"]:
                    continue  # the same run in an earlier slice
                v["studies"] += [study] if study not in v["studies"] else []
                eta = eta_at(spec, D)
                v["at"][D] = {
                    "verdict": str(r["verdict"]),
                    "value": float(r["measured"]),
                    "low": float(r["low"]),
                    "high": float(r["high"]),
                    "c": float(r["c"]),
                    "eta": eta,
                    "stable": None if spec["optimizer"] == "adam" else eta < STABLE_EDGE / D,
                    "v2_ratio": _described(t, name, D, "v2_ratio"),
                    "eval_loss": _described(t, name, D, "eval_loss"),
                    "mean_attention": _described(t, name, D, "mean_attention"),
                }
    order = lambda v: (next((i for i, f in enumerate(FAMILY) if v["name"].startswith(f)), 9), v["name"])  # noqa: E731
    ran = [v for v in out.values() if v["at"]]
    for v in ran:
        v["Ds"] = sorted(v["at"])
        v["holds"] = [D for D in v["Ds"] if v["at"][D]["verdict"] == "holds"]
        v["fails"] = [D for D in v["Ds"] if v["at"][D]["verdict"] == "does not hold"]
        v["undecided"] = [D for D in v["Ds"] if D not in v["holds"] + v["fails"]]
        v["fails_stable"] = [D for D in v["fails"] if v["at"][D]["stable"]]
        v["fails_past_edge"] = [D for D in v["fails"] if v["at"][D]["stable"] is False]
    return sorted(ran, key=order)


def _described(t: Tables, name: str, D: int, quantity: str) -> float:
    rows = t.claims(statement="last_step", variant=name, D=float(D), quantity=quantity)
    return float(rows["measured"].iloc[0]) if len(rows) == 1 else math.nan


def context(studies: dict[str, Tables]) -> dict | None:
    """The answer's data, or None where no study at hand has stability runs."""
    runs = variants(studies)
    if not runs:
        return None
    zero = [v for v in runs if v["start"] == "zero" and v["optimizer"] != "adam"]
    works = [v for v in zero if v["holds"] and not v["fails_stable"] and any(v["at"][D]["stable"] for D in v["holds"])]
    stable_works = [v for v in works if v["eta_D_limit"]]  # at a stable step at every D (eta(D))
    fails_stable = [v for v in runs if v["fails_stable"]]
    past_edge = [v for v in runs if v["fails_past_edge"] and not v["fails_stable"]]
    failing = [(v, D) for v in runs for D in v["fails"]]
    beyond = [v for v in runs if v["optimizer"] != "adam" and any(v["at"][D]["stable"] is False for D in v["Ds"])]
    used = [s for s in STUDIES if any(s in v["studies"] for v in runs)]
    seeds = {s: int(studies[s].config["scaling"]["stability"]["seeds"]) for s in used}
    return {
        "number": NUMBER,
        "title": TITLE,
        "figure": FIGURE,
        "runs": runs,
        "Ds": sorted({D for v in runs for D in v["Ds"]}),
        "works": works,
        "stable_works": stable_works,
        "fails_stable": fails_stable,
        "adam": [v for v in runs if v["optimizer"] == "adam"],
        "practitioners_D": sorted({D for v in runs if v["study"].startswith("practitioners") for D in v["Ds"]}),
        "past_edge": past_edge,
        "all_fail_past_edge": bool(beyond) and all(v["fails_past_edge"] for v in beyond),
        "v2_ratios": [v["at"][D]["v2_ratio"] for v, D in failing if math.isfinite(v["at"][D]["v2_ratio"])],
        "eval_losses": [v["at"][D]["eval_loss"] for v, D in failing if math.isfinite(v["at"][D]["eval_loss"])],
        "stable_edge": STABLE_EDGE,
        "levels_c": sorted({a["c"] for v in runs for a in v["at"].values()}),
        "random_scales": sorted({f"{v['init_scale']:g}" for v in runs if v["start"] == "random"}, key=float),
        "full": FULL,
        "sources": [
            {"config": studies[s].config_file, "tables": studies[s].link, "page": studies[s].page} for s in used
        ],
        "seeds": sorted(set(seeds.values())),
        "replicates": float(min(seeds.values())),
    }
