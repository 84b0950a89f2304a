"""The ablations of the base task (docs/STUDY.md section 4, `ablations` of config.yaml): per variant, what
pretraining learned and what transfer reached at the largest n, beside the run without a change.

Read from the default study's committed pretrain_summary.csv (its rows of role `ablation`) and
summary.csv (downstream `transfer`, the largest of `ablations.transfer.sizes`); the README's table
after the four questions. The ablations figure shows the same runs' curves.
"""

from __future__ import annotations

import math

from .tables import Sources, Tables, interval, listing, num

STUDY = "default"
ATTENTION = ("attention_on_relevant_mean", "attention_on_relevant_ci_low", "attention_on_relevant_ci_high")
ACCURACY = ("mean_test_accuracy", "ci_low", "ci_high")


def change(override: dict, prefix: str = "") -> str:
    """'model.positions = add, model.init = random' from a variant's override of the base task."""
    items = []
    for key, value in override.items():
        if isinstance(value, dict):
            items.append(change(value, f"{prefix}{key}."))
        else:
            items.append(f"{prefix}{key} = {value:g}" if isinstance(value, float) else f"{prefix}{key} = {value}")
    return ", ".join(items)


def _cell(x, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else num(x, digits)


def paragraph(studies: dict[str, Tables]) -> str:
    """The README's ablations table ('' when the default study has no ablation runs)."""
    if STUDY not in studies:
        return ""
    s = Sources(studies[STUDY])
    ab = s.config.get("ablations") or {}
    if not ab.get("enabled"):
        return ""
    pre = s.table("pretrain_summary")
    runs = pre[pre["role"] == "ablation"]
    if not len(runs):
        return ""
    baseline = ab["analysis"]["baseline"]
    transfer = ab.get("transfer") or {}
    methods = list(transfer.get("methods") or []) if transfer.get("enabled") else []
    n = max(transfer.get("sizes") or [0])
    summary = s.table("summary") if methods else None
    order = [baseline] + sorted(r for r in runs["run"].astype(str) if r != baseline)
    head = ["variant", "change from the base task", "seeds ok", "attention on j* [95%]", "min over queries",
            "cos(v1, v*)", "abs(v2)", "eval accuracy"] + [f"`{m}` at n = {n} [95%]" for m in methods]  # fmt: skip
    rows = []
    for run in order:
        r = runs[runs["run"] == run]
        if not len(r):
            continue
        r = r.iloc[0]
        name = str(r["variant"]) if isinstance(r["variant"], str) and r["variant"] else run
        override = (ab.get("variants") or {}).get(name) or {}
        cells = [
            f"`{run}`",
            change(override) if override else "none (the baseline)",
            f"{int(r['n_seeds_ok'])}/{int(r['n_seeds_ok'] + r['n_seeds_diverged'])}",
            interval(r, 3, ATTENTION),
            _cell(r["attention_min_on_relevant_mean"]),
            _cell(r["cos_v1_vstar_mean"]),
            _cell(r["v2_norm_mean"]),
            _cell(r["eval_accuracy_mean"]),
        ]
        for m in methods:
            hit = summary[
                (summary["run"] == run)
                & (summary["downstream"] == "transfer")
                & (summary["method"] == m)
                & (summary["n"] == n)
            ]
            cells.append(interval(hit.iloc[0], 3, ACCURACY) if len(hit) == 1 else "–")
        rows.append("| " + " | ".join(cells) + " |")
    base = s.config["tasks"][ab["base_task"]]["task"]
    p = ab["pretrain"]
    eta = p.get("eta", s.config["pretrain"]["eta"])
    text = (
        f"**Ablations of the base task** (`ablations` of `{s.t.config_file}`: the base task d = {base['d']}, "
        f"D = {base['D']}, each variant one change, {p['seeds']} seeds, {p['steps']} steps of batch-{p['batch']} "
        f"gradient descent at eta = {eta:g} from the zero start unless the change says otherwise, the baseline "
        f"`{baseline}`; transfer at n = {listing(transfer.get('sizes') or [n])}, the largest shown). Per variant: "
        "the mean attention on "
        "j* over queries [95% interval], its minimum over queries, cos(v1, v*), abs(v2) and the eval accuracy at "
        f"the last step, then the test accuracy after transfer {s.cite()}; its figure "
        "[ablations](docs/results/scaling_ablations.png), its claims (`stability`, the variants against the "
        "baseline) in [docs/results.md](docs/results.md):\n\n"
    )
    return text + "\n".join(["| " + " | ".join(head) + " |", "|---" * len(head) + "|", *rows]) + "\n"
