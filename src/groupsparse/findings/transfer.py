"""Question 3: does transfer need d + D samples rather than dD, under one tuning rule for every method?

Read from the default study (config.yaml): the joint fits n* ~ d^a D^b over its (d, D) grid, the
bound's form fitted to the average online error, and the base task's samples at the one verdict
target (`scaling.analysis.verdict_target`) with its negative control and the protocol's verdict.
"""

from __future__ import annotations

import math

from .tables import (
    FindingsError,
    Sources,
    Tables,
    fold,
    image_tasks,
    interval,
    listing,
    method_label,
    missing,
    n_interval,
    n_lines,
    num,
    power,
    span,
)

TITLE = "Does transfer need d + D samples rather than dD?"
STUDY = "default"
BELOW = ": n* grows no faster than d + D, a + b <= 1"  # the pretrained methods' claim
LIKE = ": n* grows like d D, a + b = 2"  # the linear baseline's claim
ONLINE = ": the bound's form with d + D fits the average online error better than"  # ... with d D / a constant
SHAPE = ": the shape of n* over the (d, D) grid is"  # (a, b) against the regions d + D and d D give on the grid
PROTOCOL = "pretrained_finetune"  # the paper's protocol: the pretrained W and v, all fine-tuned by online SGD


def _joint(s: Sources, method: str, target: float):
    """The joint-fit claim of ``method`` at ``target`` (None if the study makes none)."""
    c = s.t.claims(f"{method}: n* grows")
    c = c[c["claim"].str.contains(f"(accuracy {target:g}, downstream transfer)", regex=False)]
    return s.claim(c["claim"].iloc[0]) if len(c) == 1 else None


def _shape(s: Sources, method: str, target: float):
    """The shape claim of ``method`` at ``target`` (analysis/n_star_shape.py; None if the study makes none)."""
    c = s.t.claims(f"{method}{SHAPE}")
    c = c[c["claim"].str.contains(f"(accuracy {target:g}, downstream transfer)", regex=False)]
    return s.claim(c["claim"].iloc[0]) if len(c) == 1 else None


def _exponents(r) -> str:
    """'a = ... [..], b = ... [..]: verdict, why' as the shape claim records them (its config column), or '–'.
    A blocked fit (censored levels) shows the blocker alone: its wording would read more than the fit holds."""
    if r is None:
        return "–"
    text = str(r["config"]).split(" (two-sided", 1)[0]
    why = str(r["why"])
    if not text.startswith("a = ") or "nan" in text:
        return f"no fit: {r['verdict']}" + (f" ({_blocker(why)})" if _blocker(why) != why else "")
    if r["verdict"] == "inconclusive":  # the blocker first, then the wording it blocks
        why = _blocker(why)
    return f"{text}: {r['verdict']}, {why}"


def _blocker(why: str) -> str:
    """The part of a shape claim's ``why`` before its wording: the text up to the first '; ' outside
    parentheses (the blocker lists censored levels as 'd=.., D=..; d=.., D=..' inside parentheses)."""
    depth = 0
    for i, ch in enumerate(why):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and why.startswith("; ", i):
            return why[:i]
    return why


def _region(s: Sources, shape: str) -> str:
    """The region of (a, b) that ``shape`` gives on the grid, as the shape claims record it."""
    rows = s.t.claims("")
    rows = rows[rows["claim"].astype(str).str.contains(SHAPE, regex=False)]
    for text in rows.get("config", []):
        for part in str(text).split("; "):
            if part.startswith(f"{shape} region "):
                return part.removeprefix(f"{shape} region ")
    return ""


def _cell(r) -> str:
    if r is None:
        return "–"
    if missing(r["measured"]):
        return f"no fit: {r['verdict']}"
    if math.isinf(float(r["high"])):  # one-sided: the lower bound is the test
        return f"{num(r['measured'], 2)} (>= {num(r['low'], 2)}): {r['verdict']}, {power(r)}"
    return f"{interval(r, 2)}: {r['verdict']}, {power(r)}"


def _pretraining(pre: dict, s: Sources) -> str:
    """Which algorithm made the pretrained model the transfer numbers start from, at which step size."""
    pre = s.config["pretrain"] | pre
    return f"pretrained by batch-{pre['batch']} gradient descent from the zero start at eta = {float(pre['eta']):g}"


def _grid(s: Sources) -> str:
    grid = s.config["scaling"]
    tr = grid["transfer"]
    return (
        f"d = {listing(grid['d_grid'])} x D = {listing(grid['transfer_D_grid'])}, {_pretraining(grid['pretrain'], s)}, "
        f"{grid['pretrain']['seeds']} "
        f"seeds, n = {listing(tr['sizes'])}, every method tuned by the same rule (`transfer.selection: "
        f"{tr.get('selection') or s.config['transfer']['selection']}`)"
    )


def _fits(t: Tables) -> str:
    s = Sources(t)
    a = s.config["scaling"]["analysis"]
    targets = a["accuracy_targets"]
    rows = []
    for method in a["methods"]:
        cells = [_joint(s, method, target) for target in targets]
        if any(c is not None for c in cells):
            rows.append(f"| {method_label(method)} (`{method}`) | " + " | ".join(map(_cell, cells)) + " |")
            rows[-1] += " " + " | ".join(_exponents(_shape(s, method, target)) for target in targets) + " |"
    header = (
        "| method | "
        + " | ".join(f"a + b at {target:.0%} accuracy" for target in targets)
        + " | "
        + " | ".join(f"(a, b) [95%] at {target:.0%}: the shape" for target in targets)
        + " |"
    )
    return (
        "- *The joint fit* n* ~ d^a D^b of the samples needed, over the grid (d + D is a + b = 1, dD is a + b = 2; "
        "for a pretrained method the claim is one-sided, a + b <= 1, tested by its one-sided 95% lower bound; "
        "power against the other law). The bound a + b <= 1 is not the shape d + D: on this grid the fits of "
        f"n* = C (d + D) give the region {_region(s, 'd + D') or 'of (a, b)'} and those of C d D the point (1, 1) "
        "(analysis/n_star_shape.py); the shape columns say which region the two-sided intervals of a and b meet "
        f"(holds: d + D's and not d D's; a verdict from censored levels reads inconclusive) {s.cite()}:\n\n"
        + "\n".join([header, "|---|" + "---|" * (2 * len(targets)), *rows])
        + "\n"
    )


def _online(t: Tables) -> str:
    s = Sources(t)
    rows = [s.claim(c) for c in s.t.claims("")["claim"] if ONLINE in str(c)]
    if not rows:
        return ""
    parts = []
    for alternative, label in ((" with d D", "d D"), (" a constant", "a constant in (d, D)")):
        against = [r for r in rows if f"{ONLINE}{alternative}" in str(r["claim"])]
        if not against:
            continue
        better = [r for r in against if r["verdict"] == "holds"]
        text = f"against {label}, d + D fits better for {len(better)} of the {len(against)} online-SGD methods"
        if better:
            text += f" (power {span([float(r['power']) for r in better], 2)})"
        for verdict in sorted({r["verdict"] for r in against} - {"holds"}):
            rest = [float(r["power"]) for r in against if r["verdict"] == verdict]
            text += f", {verdict} for {len(rest)} (power {span(rest, 2)})"
        parts.append(text)
    return (
        "- *The theorem's own quantity*, the average online error, fitted in the bound's form with free "
        f"exponents: {'; '.join(parts)}. {s.cite()}"
    )


def _base(t: Tables) -> str:
    s = Sources(t)
    runs = [r for r in s.table("sample_complexity")["run"].unique()]
    run = "base" if "base" in runs else runs[0]
    task = s.config["tasks"][run]["task"]
    target = float(s.config["scaling"]["analysis"]["verdict_target"])
    sc = s.rows("sample_complexity", run=run, downstream="transfer", target_accuracy=target)
    order = sc.assign(sort=sc["n_needed"].astype(float)).sort_values(["sort", "method"])
    reached = [f"`{r['method']}` {n_interval(r)}" for _, r in order.iterrows() if math.isfinite(float(r["n_needed"]))]
    never = [f"`{r['method']}`" for _, r in order.iterrows() if not math.isfinite(float(r["n_needed"]))]
    largest = max(s.config["tasks"][run].get("transfer", {}).get("sizes") or s.config["transfer"]["sizes"])
    text = (
        f"- *On the base task* (d = {task['d']}, D = {task['D']}, "
        f"{_pretraining(s.config['tasks'][run].get('pretrain') or {}, s)}) the samples for {target:.0%} test accuracy "
        f"[95% interval] are: {', '.join(reached)}"
        + (f"; not reached by n = {largest}: {', '.join(never)}" if never else "")
        + "."
    )
    text += _protocol(s, run, target)
    control = s.rows("summary", run=run, downstream="negative_control")
    pretrained = control[control["method"].str.startswith("pretrained")]
    if len(pretrained):
        text += (
            f" The negative control (j* moved) keeps every pretrained method near chance: mean test accuracy at most "
            f"{num(pretrained['mean_test_accuracy'].max())} at any n."
        )
    return text + f" {s.cite()}"


def _protocol(s: Sources, run: str, target: float) -> str:
    """The paper's protocol as a verdict (analysis/protocol.py), where the tables have it."""
    rows = s.t.claims("")
    text = rows["claim"].astype(str)
    at = f"for accuracy {target:g} ({run}, transfer)"
    gap = rows[text.str.contains("with v reset to 0", regex=False) & text.str.contains(at, regex=False)]
    if not len(gap):
        return (
            " What the pretrained v kept costs the paper's protocol (`pretrained_finetune`: W and v by online SGD from "
            "the pretrained W and v, our reading) is not tested in these tables (they predate the protocol claims)."
        )
    r = s.claim(gap["claim"].iloc[0])
    align = rows[text.str.startswith("cos(v1, new v*)") & text.str.endswith(f"({run}, transfer)")]
    steps = rows[
        text.str.contains("share of cross-validated step sizes", regex=False) & text.str.endswith(f"({run}, transfer)")
    ]
    out = (
        " The paper's protocol (our reading: the pretrained v kept) against the same with v reset to 0, "
        f"log(n*_kept / n*_reset) at {target:.0%}: {_cell(r)}"
    )
    if len(align):
        a = s.claim(align["claim"].iloc[0])
        out += f"; cos(v1, new v*) after fine-tuning, reset minus kept: {_cell(a)}"
        out += _alignment_over_n(s, run, a["claim"])
    if len(steps):
        out += f"; steps at the grid's edge: {num(s.claim(steps['claim'].iloc[0])['measured'], 2)} of the fits"
    return out + "."


def _alignment_over_n(s: Sources, run: str, claim: str) -> str:
    """'; over n, cos(v1, new v*) kept / reset: n = 4: ... ' from the summary's read-out alignment (the
    protocol's mechanism along the n grid), at the first n and every factor 16 after it, and the last."""
    kept, reset = claim.split("from the pretrained v (", 1)[1].split(")", 1)[0], claim.split("from v = 0 (", 1)[1]
    reset = reset.split(")", 1)[0]
    rows = s.rows("summary", run=run, downstream="transfer")
    if "mean_cos_v1_new" not in rows.columns:
        return ""  # tables from before the summary carried the alignment
    at = {m: rows[rows["method"] == m].set_index("n") for m in (kept, reset)}
    sizes = sorted(set(at[kept].index) & set(at[reset].index))
    if not sizes:
        return ""
    shown = [n for n in sizes if any(n == sizes[0] * 16**k for k in range(8))]
    shown += [sizes[-1]] if sizes[-1] not in shown else []
    cells = [
        f"n = {n}: {num(at[kept].loc[n, 'mean_cos_v1_new'])} / {num(at[reset].loc[n, 'mean_cos_v1_new'])}"
        for n in shown
    ]
    old = ", ".join(f"{num(at[kept].loc[n, 'mean_cos_v1_old'])}" for n in shown)
    return (
        f"; over n, cos(v1, new v*) of the fitted read-out, kept / reset: {', '.join(cells)} (kept v1's cos with "
        f"the pretraining v* at the same n: {old})"
    )


def _protocol_verdict(s: Sources, target: float) -> str:
    """The paper's protocol against logistic regression, over the base task and the grid's points."""
    rows = s.t.claims(f"{PROTOCOL} needs fewer samples than logreg for accuracy {target:g} (")
    if not len(rows):
        return ""
    image = set(image_tasks(s.config))
    runs = {str(c).rsplit("(", 1)[1].split(",", 1)[0]: v for c, v in zip(rows["claim"], rows["verdict"])}
    runs = {run: v for run, v in runs.items() if run not in image}
    grid = {run: v for run, v in runs.items() if run.startswith("scale_")}
    fails = sum(v == "does not hold" for v in grid.values())
    text = (
        f". The paper's protocol (`{PROTOCOL}`: the pretrained W and v, all fine-tuned by online SGD; that v is "
        "kept is our reading) does not need fewer samples than `logreg`: that claim "
    )
    if "base" in runs:
        text += f"{runs['base']} on the base task and "
    return text + f"does not hold at {fails} of the {len(grid)} grid points, at {target:.0%}"


def finding(studies: dict[str, Tables]) -> str:
    t = studies[STUDY]
    s = Sources(t)
    a = s.config["scaling"]["analysis"]
    target = float(a["verdict_target"])  # one target for every method compared (fixed in the config)
    below = {m: r for m in a["methods"] if (r := _joint(s, m, target)) is not None and BELOW in r["claim"]}
    consistent = [m for m, r in below.items() if r["verdict"] == "consistent"]
    others = sorted({r["verdict"] for m, r in below.items() if m not in consistent})
    held = {m: r for m in a["methods"] if (r := _joint(s, m, target)) is not None and LIKE in r["claim"]}
    if consistent:
        powers = span([float(below[m]["power"]) for m in consistent], 2)
        answer = (
            f"At {target:.0%} accuracy the data are consistent with the bound (n* no faster than d + D, a + b <= 1) "
            f"for {listing([f'`{m}`' for m in consistent])} (power {powers} against dD)"
        )
    else:
        answer = f"At {target:.0%} accuracy no pretrained method is consistent with the bound n* <= C (d + D)"
    if others:
        answer += f", {' or '.join(others)} for the other pretrained methods"
    shapes = [f"`{m}`: {r['why']}" for m in below if (r := _shape(s, m, target)) is not None and m in consistent]
    if shapes:
        answer += f"; the fitted shape, (a, b) against the regions d + D and d D give on this grid: {'; '.join(shapes)}"
    for m, r in held.items():
        answer += f"; for `{m}` (on vec(X)) n* ~ dD " + ("holds" if r["verdict"] == "holds" else f"is {r['verdict']}")
    answer += _protocol_verdict(s, target)
    config = (
        f"(`{t.config_file}`: {_grid(s)}; [docs/results.md](docs/results.md), figure "
        "[sample complexity](docs/results/scaling_sample_complexity.png).)"
    )
    parts = [f"**3. {TITLE}** {answer} {s.cite()}. {config}", _fits(t), _online(t), _base(t)]
    return "\n".join(p for p in parts if p)


def summary(t: Tables) -> list[str]:
    """Per task run (image tasks under question 4): the methods by the samples they need for 90%;
    the joint fits' verdicts with their power."""
    lines = []
    try:
        images = set(image_tasks(t.config))
    except FindingsError:  # no config at hand: every task run is shown here
        images = set()
    lines += n_lines(t, lambda run: run not in images)
    joint = t.claims("")
    text = joint["claim"].astype(str)
    joint = joint[text.str.contains(BELOW, regex=False) | text.str.contains(LIKE, regex=False)]
    by: dict = {}
    for _, r in joint.iterrows():
        method, rest = str(r["claim"]).split(": n* grows", 1)
        target = float(rest.split("(accuracy ", 1)[1].split(",", 1)[0])
        by.setdefault(method, []).append(f"{target:.0%} {r['verdict']} ({power(r)})")
    if by:
        lines.append("joint fit n* ~ d^a D^b, a + b against d + D and dD:")
        for method, cells in by.items():  # folded: a simulated power beside its plug-in makes a long line
            lines += fold(f"  {method}: ", cells)
    return lines
