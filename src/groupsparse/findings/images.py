"""Question 4: does selection happen on real images?

Read from the default study's image task (config.yaml, a task with `kind: images`): what the
pretrained model attends to, and how many samples each method needs on the transfer pair.
"""

from __future__ import annotations

import math

from .tables import FindingsError, Sources, Tables, count, fold, image_tasks, interval, listing, n_lines, num, power

TITLE = "On real images?"
STUDY = "default"
NEAR_ONE = "mean attention mass on j* near 1 after pretraining"


def finding(studies: dict[str, Tables]) -> str:
    t = studies[STUDY]
    s = Sources(t)
    runs = image_tasks(s.config)
    if not runs:
        return f"**4. {TITLE}** The study has no image task."
    run = runs[0]
    task = s.config["tasks"][run]["task"]
    near = s.claim(f"{NEAR_ONE} ({run})")
    p = s.row("pretrain_summary", run=run)
    selects = near["verdict"] == "holds"
    D = task["D"]
    text = (
        f"**4. {TITLE}** {'Selection' if selects else 'No selection'}. On scikit-learn's bundled 8x8 digits "
        f"({' vs '.join(map(str, task['classes']))}, D = {D} slots of d = {task['d']} features) the model "
        f"classifies held-out inputs at {num(p['eval_accuracy_mean'])} and puts {interval(near, 2)} of its "
        f"attention on the labelled slot (uniform: 1/{D}; the claim that it is near 1: {near['verdict']}, "
        f"{power(near)})"
    )
    if not selects:
        text += f", solving the task through a position term (|v2| = {num(p['v2_norm_mean'], 1)})"
    sc = s.rows("sample_complexity", run=run, downstream="transfer", target_accuracy=0.9)
    sizes = (s.config["tasks"][run].get("transfer") or {}).get("sizes") or s.config["transfer"]["sizes"]
    order = sc.assign(sort=sc["n_needed"].astype(float)).sort_values(["sort", "method"])
    reached = [
        f"`{r['method']}` at n = {count(r['n_needed'])}" for _, r in order.iterrows() if math.isfinite(r["sort"])
    ]
    pretrained_reached = [
        r for _, r in order.iterrows() if r["method"].startswith("pretrained") and math.isfinite(r["sort"])
    ]
    text += (
        f"; transfer to {' vs '.join(map(str, task['transfer_classes']))} reaches 90% with "
        + (listing(reached) if reached else "no method")
        + ("" if pretrained_reached else f", and with no pretrained variant by n = {max(sizes)}")
        + ". The paper's CIFAR-10 experiment (`configs/cifar10.yaml`) downloads its data with one command where "
        "the internet exists; its results are not committed."
    )
    return text + f" {s.cite()}"


def summary(t: Tables) -> list[str]:
    """Per image task: attention on the labelled slot and accuracy (the pretraining summary)."""
    if not t.has("pretrain_summary"):
        return []
    try:
        runs = image_tasks(t.config)
    except FindingsError:  # a results folder without its config: no image task known
        return []
    ps = t.table("pretrain_summary")
    lines = []
    for run in runs:
        row = ps[ps["run"] == run]
        if len(row):
            r = row.iloc[0]
            near = t.claims(f"{NEAR_ONE} ({run})")
            verdict = f" (near 1: {near['verdict'].iloc[0]}, {power(near.iloc[0])})" if len(near) == 1 else ""
            mean = ("attention_on_relevant_mean", "attention_on_relevant_ci_low", "attention_on_relevant_ci_high")
            lines += fold(
                f"images, {run}: ",
                [
                    f"attention on the labelled slot {interval(r, 2, mean)}{verdict}",
                    f"eval accuracy {num(r['eval_accuracy_mean'])}",
                ],
            )
    return lines + n_lines(t, lambda run: run in runs)
