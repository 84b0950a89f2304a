"""Question 3: does transfer need d + D samples rather than dD, under one tuning rule for every method?

The data of the answer (templates/question3.j2 words it), from the default study (config.yaml) at
its one verdict target (`scaling.analysis.verdict_target`): the samples each method needs on the base
task, the joint fit n* ~ d^a D^b over the (d, D) grid with what the two intervals exclude (the shape's
words come from them: a grows, falls or is not detectably different from 0, and so is b), the bound
a + b <= 1, the paper's protocol under both readings of its read-out v (kept: our reading; reset to 0)
against logistic regression, and the negative control.
"""

from __future__ import annotations

import math

from .tables import FindingsError, Tables, method_label

NUMBER = 3
TITLE = "Does transfer need d + D samples rather than dD?"
STUDY = "default"
FIGURE = "docs/figures/question3.png"
BASELINE = "logreg"
PROTOCOL = "pretrained_finetune"  # the paper's protocol: the pretrained W and v, all fine-tuned by online SGD


def _float(x) -> float:
    return float(x) if x is not None and x == x else math.nan


def direction(low: float, high: float) -> str:
    """What an exponent's interval excludes: 'grows' (above 0), 'falls' (below 0), 'not detectably' (holds 0)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "unknown"
    return "grows" if low > 0 else "falls" if high < 0 else "not detectably"


def n_star(t: Tables, run: str, target: float) -> dict[str, dict]:
    """Per method: the samples it needs for ``target`` on ``run``'s transfer task, with the 95% interval."""
    if not t.has("sample_complexity"):
        return {}
    sc = t.rows("sample_complexity", run=run, downstream="transfer", target_accuracy=target)
    return {
        str(r["method"]): {
            "value": _float(r["n_needed"]),
            "low": _float(r["ci_low"]),
            "high": _float(r["ci_high"]),
            "reached": bool(r["reached_on_grid"]),
            "max_n": _float(r["max_n_on_grid"]),
            "seeds": int(r["n_seeds"]),
            "label": method_label(str(r["method"])),
        }
        for _, r in sc.sort_values("method").iterrows()
    }


def shapes(t: Tables, target: float) -> list[dict]:
    """Per method with a theory: the fitted exponents a (of d) and b (of D) with intervals, their directions,
    the region verdict, and the bound a + b <= 1 (pretrained) or = 2 (logistic regression)."""
    out = []
    for _, r in t.claims(statement="n_star_shape", target=target, downstream="transfer").iterrows():
        method = str(r["subject"])
        total = t.claims(statement=["n_star_sum_at_most", "n_star_sum_equals"], subject=method, target=target)
        total = total[total["form"].astype(str) == "n*"]
        s = total.iloc[0] if len(total) == 1 else None
        out.append(
            {
                "method": method,
                "label": method_label(method),
                "expected": str(r["law"]),
                "a": {"value": _float(r["measured"]), "low": _float(r["low"]), "high": _float(r["high"])},
                "b": {
                    "value": _float(r["exponent_b"]),
                    "low": _float(r["exponent_b_low"]),
                    "high": _float(r["exponent_b_high"]),
                },
                "with_d": direction(_float(r["low"]), _float(r["high"])),
                "with_D": direction(_float(r["exponent_b_low"]), _float(r["exponent_b_high"])),
                "verdict": str(r["verdict"]),
                "regions": str(r["regions"]),
                "sum": None
                if s is None
                else {
                    "statement": str(s["statement"]),
                    "value": _float(s["measured"]),
                    "low": _float(s["low"]),
                    "high": _float(s["high"]),
                    "verdict": str(s["verdict"]),
                    "power": _float(s["power"]),
                    "power_plugin": _float(s["power_plugin"]),
                    "power_pipeline": _float(s["power_pipeline"]),
                    "alternative": str(s["alternative_name"]),
                },
                "replicates": _float(r["replicates"]),
            }
        )
    return out


def protocol(t: Tables, run: str, target: float, n: dict) -> list[dict]:
    """Per fine-tuning method that keeps the pretrained v: its n* kept and reset, the gap's verdict."""
    out = []
    for _, r in t.claims(statement="protocol_gap", run=run, target=target).iterrows():
        kept, reset = str(r["subject"]), str(r["reference"])
        out.append(
            {
                "kept": kept,
                "reset": reset,
                "n_kept": n.get(kept),
                "n_reset": n.get(reset),
                "gap": {"value": _float(r["measured"]), "low": _float(r["low"]), "high": _float(r["high"])},
                "verdict": str(r["verdict"]),
                "power": _float(r["power"]),
                "power_plugin": _float(r["power_plugin"]),
            }
        )
    return out


def against_baseline(t: Tables, target: float) -> dict[str, dict]:
    """Per pretrained method: the verdicts of "needs fewer samples than logreg" over the grid's points, the
    base task's, and the grid's D."""
    out: dict[str, dict] = {}
    rows = t.claims(statement="sample_gap", target=target, downstream="transfer", reference=BASELINE)
    for method, g in rows.groupby("subject", sort=True):
        grid = g[g["run"].astype(str).str.startswith("scale_")]  # the run names the grid gives its points
        base = g[g["run"] == "base"]
        by_D = {int(D): sorted(h["verdict"].astype(str)) for D, h in grid.groupby("D")}
        out[str(method)] = {
            "grid": {str(v): int(n) for v, n in grid["verdict"].value_counts().items()},
            "points": len(grid),
            "base": str(base["verdict"].iloc[0]) if len(base) else "",
            "by_D": by_D,
            "largest_D": max(by_D) if by_D else None,
        }
    return out


def control(t: Tables, run: str) -> float:
    """The largest mean test accuracy of a pretrained method on the negative control (j* moved), any n."""
    if not t.has("summary"):
        return math.nan
    s = t.rows("summary", run=run, downstream="negative_control")
    s = s[s["method"].astype(str).str.startswith("pretrained")]
    return float(s["mean_test_accuracy"].max()) if len(s) else math.nan


def context(studies: dict[str, Tables]) -> dict | None:
    t = studies.get(STUDY)
    try:
        if t is None or not len(t.claims(statement="n_star_shape")):
            return None
    except FindingsError:
        return None
    config = t.config
    grid, a = config["scaling"], config["scaling"]["analysis"]
    target = float(a["verdict_target"])
    run = "base" if "base" in config["tasks"] else next(iter(config["tasks"]))
    pre = config["pretrain"] | (grid.get("pretrain") or {})
    n = n_star(t, run, target)
    return {
        "number": NUMBER,
        "title": TITLE,
        "figure": FIGURE,
        "config": t.config_file,
        "tables": t.link,
        "page": t.page,
        "target": target,
        "run": run,
        "task": config["tasks"][run]["task"],
        "d_grid": grid["d_grid"],
        "D_grid": grid["transfer_D_grid"],
        "sizes": grid["transfer"]["sizes"],
        "selection": grid["transfer"].get("selection") or config["transfer"]["selection"],
        "seeds": grid["pretrain"]["seeds"],
        "pretrain": {"batch": pre["batch"], "eta": float(pre["eta"]), "steps": pre.get("steps")},
        "n": n,
        "baseline": BASELINE,
        "protocol_method": PROTOCOL,
        "shapes": shapes(t, target),
        "protocol": protocol(t, run, target, n),
        "against_baseline": against_baseline(t, target),
        "control": control(t, run),
    }
