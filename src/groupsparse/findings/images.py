"""Question 4: does selection happen on real images?

The data of the answer (templates/question4.j2 words it), from the default study's image task
(config.yaml, a task of a kind that reads a dataset): what the pretrained model attends to (the
``final_attention`` claim of that run), how it classifies, and the samples each method needs on the
transfer pair; and what ran, so the answer says how far it reaches (one pair of classes, the flow time
and the seeds).
"""

from __future__ import annotations

from .tables import FindingsError, Tables, image_tasks
from .transfer import n_star

NUMBER = 4
TITLE = "On real images?"
STUDY = "default"
FIGURE = "docs/figures/question4.png"


def context(studies: dict[str, Tables]) -> dict | None:
    t = studies.get(STUDY)
    if t is None or not t.has("pretrain_summary"):
        return None
    try:
        runs = image_tasks(t.config)
        near = t.claims(statement="final_attention", run=runs[0]) if runs else None
    except FindingsError:
        return None
    if not runs or near is None or len(near) != 1:
        return None
    run, near = runs[0], near.iloc[0]
    entry = t.config["tasks"][run]
    task = entry["task"]
    pre = t.config["pretrain"] | (entry.get("pretrain") or {})
    p = t.row("pretrain_summary", run=run)
    sizes = (entry.get("transfer") or {}).get("sizes") or t.config["transfer"]["sizes"]
    target = float(t.config["scaling"]["analysis"]["verdict_target"])
    n = n_star(t, run, target)
    return {
        "number": NUMBER,
        "title": TITLE,
        "figure": FIGURE,
        "config": t.config_file,
        "tables": t.link,
        "page": t.page,
        "run": run,
        "dataset": task.get("dataset", ""),
        "classes": task.get("classes", []),
        "transfer_classes": task.get("transfer_classes", []),
        "d": task["d"],
        "D": task["D"],
        "seeds": int(p["n_seeds_ok"]),
        "steps": int(p["final_step"]),
        "batch": pre["batch"],
        "eta": float(pre["eta"]),
        "flow_time_per_D3": float(p["final_step"]) * float(pre["eta"]) / task["D"] ** 3,
        "attention": {"value": float(near["measured"]), "low": float(near["low"]), "high": float(near["high"])},
        "verdict": str(near["verdict"]),
        **{k: float(near[k]) for k in ("power", "power_plugin", "power_pipeline")},
        "near_one": float(near["predicted_value"]),
        "eval_accuracy": float(p["eval_accuracy_mean"]),
        "v2_norm": float(p["v2_norm_mean"]),
        "target": target,
        "n": n,
        "largest_n": max(sizes),
        "pretrained_reached": [m for m, v in n.items() if m.startswith("pretrained") and v["reached"]],
    }
