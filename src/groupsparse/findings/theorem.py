"""Question 1: does gradient descent learn the theorem's selection, at the theorem's rate?

Read from the population study's claims, predictions and side-by-side table (configs/population.yaml):
population gradient descent (each batch gradient projected onto the invariant subspace) at the step
size eta(D) = min(eta, eta_D_limit / D); the pre-registered law test, the bound's constant in flow
time, the batch and step-size checks, and plain batch gradient descent beside it.
"""

from __future__ import annotations

import numpy as np

from .tables import Sources, Tables, fold, interval, listing, num

TITLE = "Does gradient descent learn the theorem's selection, at its rate?"
STUDY = "population"
LARGEST_D = "population_D64"  # the population study's D = 64, a slice of its own (configs/slices/)
LAW_TEST = "pre-registered law test, "
LAW_WORDS = {
    "theorem": "the theorem's form (D - 1) exp(-c D)",
    "power": "a power of D",
    "nested": "the nested D^b exp(-c D)",
    "exponential": "exp(a + b D)",
}


def _law_tests(s: Sources, algorithm: str):
    c = s.table("claims")
    rows = c[(c["analysis"] == "law_test") & c["claim"].astype(str).str.startswith(LAW_TEST + algorithm)]
    return rows.sort_values("claim")


def _kappa(claim: str) -> str:
    return claim.split("at flow time ", 1)[1].split(" D^3", 1)[0]


def _lack_of_fit(s: Sources, group: str, kappa: float) -> dict[str, float]:
    p = s.table("predictions")
    g = p[(p["group"].fillna("").astype(str) == group) & ((p["kappa"] - kappa).abs() < 1e-9)]
    return {law: float(q["lack_of_fit_p"].iloc[0]) for law, q in g.groupby("law")}


def _law_bullet(s: Sources, algorithm: str, group: str, label: str) -> tuple[str, list[str]]:
    rows = _law_tests(s, algorithm)
    a = s.config["scaling"]["analysis"]
    cells, verdicts = [], []
    for _, r in rows.iterrows():
        kappa = _kappa(str(r["claim"]))
        lof = _lack_of_fit(s, group, float(kappa))
        lof_text = ", ".join(f"{law} {num(p, 2 if p >= 0.01 else 5)}" for law, p in sorted(lof.items()))
        cells.append(f"kappa = {kappa}: {r['verdict']} ({r['why']}; lack of fit p: {lof_text})")
        verdicts.append(str(r["verdict"]))
    text = (
        f"- *The law, pre-registered ({label}).* Rule `predict` fitted {', '.join(LAW_WORDS[x] for x in a['laws'])} "
        f"to r = 1 - min attention at flow time kappa D^3 on the D <= {a['fit_D_max']} runs alone, and the "
        "predictions were committed ([docs/population/preregistered/](docs/population/preregistered)) before any "
        f"run at D = {listing(a['predict_D'])} finished. The criterion, fixed before the data and the same for "
        "every law: the smallest sum over the tested D of |log measured - log predicted|; a law failing lack of "
        f"fit on D <= {a['fit_D_max']} cannot pass. " + "; ".join(cells) + "."
    )
    return text, verdicts


def _constant(s: Sources) -> str:
    grid, a = s.config["scaling"], s.config["scaling"]["analysis"]
    c = s.table("claims")
    rows = c[c["analysis"] == "bound_constant"].sort_values("claim")
    parts = []
    for _, r in rows.iterrows():
        claim = str(r["claim"])
        cc = claim.split("exp(-", 1)[1].split(" D)", 1)[0]
        if r["verdict"] == "inconclusive":
            parts.append(f"c = {cc}: inconclusive ({r['why']})")
        else:
            slopes = str(r["why"]).split("local slopes ", 1)[-1]
            grows = (
                "; the largest ratio is at the largest D, so the constant may still grow"
                if ("the largest ratio is at the largest D" in str(r["why"]))
                else ""
            )
            parts.append(f"c = {cc}: kappa = {interval(r)} (local slopes of log tau_c on log D: {slopes}{grows})")
    fixed = "fixed before these runs" if not a["target_c_post_hoc"] else "chosen after seeing data"
    return (
        "- *The bound with its constant* (flow time tau = eta x steps). The smallest kappa with which the minimum "
        f"over queries of S[j*, j] reaches 1 - exp(-c D) within tau = kappa D^3 at every D <= {max(grid['D_grid'])} "
        f"(c {fixed}): " + "; ".join(parts) + "."
    )


def _grid_batch(grid: dict) -> str:
    """'batch 128' or 'batch 128 (32 at D = 64, 96)': the grid's batch, and where scaling.batch_by_D sets another."""
    other = [f"{e['batch']} at D = {listing(e['D'])}" for e in grid.get("batch_by_D") or []]
    return f"batch {grid['pretrain']['batch']}" + (f" ({'; '.join(other)})" if other else "")


def _check_words(entry: dict) -> str:
    """'at batch 512 (D = 4, ..., 32)' or 'at half the step size (D = 8, 12, 16)' from a batch_check entry."""
    where = f"D = {listing(entry['D'])}"
    if entry.get("flow_time_per_D3") is not None:
        where += f", up to flow time {entry['flow_time_per_D3']:g} D^3"
    factor = entry.get("eta_factor", 1)
    if factor != 1:
        return f"at {factor:g} x the step size ({where})"
    return f"at batch {listing(entry['batches'])} ({where})"


def _checks(s: Sources) -> str:
    c = s.table("claims")
    rows = c[c["analysis"] == "batch_check"]
    if not len(rows):
        return ""
    counts = rows["verdict"].value_counts()
    differs = rows[rows["verdict"] == "differs"]
    where = sorted({int(D) for D in differs["D"].dropna()}) if len(differs) else []
    tol = s.config["scaling"]["analysis"]["batch_tolerance"]
    text = (
        "- *Does the measurement depend on its batch or step size?* The grid's tasks "
        + "; ".join(_check_words(e) for e in s.config["scaling"]["batch_check"])
        + f", paired by seed, against the tolerance +-{tol:g} on the log scale: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
    )
    if where:
        text += f" (differs at D = {listing(where)})"
    return text + (
        ". With two replicates per run a t interval has one degree of freedom, so most checks cannot confirm "
        "agreement; their point differences are in the claims table."
    )


def _finite_batches(s: Sources) -> str:
    by = s.table("theorem_by_D")
    c0 = min(s.config["scaling"]["analysis"]["target_c"])
    target = [q for q in by["quantity"].unique() if q.startswith("flow time until") and f"exp(-{c0:g} D)" in q]
    if not target:
        return ""
    g = by[by["quantity"] == target[0]].assign(group=lambda x: x["group"].fillna("").astype(str))
    groups = {"": "population GD", "plain512": "batch-512 GD", "plain2048": "batch-2048 GD"}
    Ds = sorted(set(g.loc[g["group"] == "plain512", "D"]) & set(g.loc[g["group"] == "", "D"]))
    parts = []
    for D in Ds:
        here = g[g["D"] == D].set_index("group")
        if not np.isfinite(here.loc[here.index == "", "value"]).any():
            continue  # the target lies below the start at this D
        values = [f"{words} {num(here.loc[k, 'value'], 0)}" for k, words in groups.items() if k in here.index]
        parts.append(f"D = {D}: " + ", ".join(values))
    return (
        "- *Finite batches leave population gradient descent* (plain batch gradient descent, no projection, on the "
        f"same tasks at the same step size): the flow time to 1 - exp(-{c0:g} D), geometric means over seeds, "
        + "; ".join(parts)
        + ". Figure [population and batch](docs/population/scaling_population_and_batch.png)."
    )


def _largest_D(t: Tables) -> str:
    """The D = 64 slice (configs/slices/population_D64.yaml): measured against each law's pre-registered
    prediction per kappa, the slice's law-test verdicts, the flow time to the smallest target c, its batch check."""
    s = Sources(t)
    grid = s.config["scaling"]
    p, by = s.table("predictions"), s.table("theorem_by_D")
    p = p[p["group"].fillna("").astype(str) == ""]
    by = by.assign(group=by["group"].fillna("").astype(str))
    parts = []
    for D in grid["analysis"]["predict_D"]:
        here = by[(by["D"] == D) & (by["group"] == "")]
        cells = []
        for _, r in _law_tests(s, "population gradient descent").iterrows():
            kappa = float(_kappa(str(r["claim"])))
            m = here[here["quantity"] == f"1 - min attention at flow time {kappa:g} D^3"]
            laws = p[(p["D"] == D) & ((p["kappa"] - kappa).abs() < 1e-9)].sort_values("law")
            predicted = ", ".join(f"{law} {q['rest']:.2g}" for law, q in laws.set_index("law").iterrows())
            cells.append(
                f"kappa = {kappa:g}: measured {interval(m.iloc[0], 4, ('value', 'low', 'high'))}, predicted "
                f"{predicted}: {r['verdict']} ({r['why']})"
            )
        c0 = min(grid["analysis"]["target_c"])
        reach = here[here["quantity"] == f"flow time until min attention >= 1 - exp(-{c0:g} D)"].iloc[0]
        eta = float(reach["eta"])
        time = (
            f"censored at flow time {num(reach['value'], 0)}"
            if reach["censored"]
            else f"flow time {interval(reach, 0, ('value', 'low', 'high'))}"
        )
        others = [
            f"1 - exp(-{cc:g} D) censored at {num(q['value'], 0)}"
            for cc in sorted(grid["analysis"]["target_c"])[1:]
            for _, q in here[here["quantity"] == f"flow time until min attention >= 1 - exp(-{cc:g} D)"].iterrows()
            if q["censored"]
        ]
        parts.append(
            f"D = {D} (batch {int(reach['batch'])}, eta = {eta:g}, {int(reach['seeds'])} replicates), 1 - min "
            "attention at flow time kappa D^3: "
            + "; ".join(cells)
            + f". To 1 - exp(-{c0:g} D): {time}"
            + "".join(f"; {o}" for o in others)
            + _batch_check_at(s, D)
        )
    page = t.link.removesuffix("/tables")
    return (
        f"- *At D = {listing(grid['analysis']['predict_D'])}* (`{t.config_file}`: configs/population.yaml's fit "
        "levels rerun, which gives the committed predictions bit for bit, and the larger D added; the same "
        f"criterion): " + " ".join(parts) + f". Its page [{page}.md]({page}.md). {s.cite()}"
    )


def _batch_check_at(s: Sources, D: int) -> str:
    """'. Batch check (at batch 128 (D = 64, up to ...)): <quantity>: log difference ... (verdict); ...'."""
    c = s.table("claims")
    rows = c[(c["analysis"] == "batch_check") & (c["D"] == D) & c["low"].notna()]
    entries = [e for e in s.config["scaling"]["batch_check"] if D in e["D"]]
    if not len(rows) or not entries:
        return ""
    quantity = [str(q["claim"]).split(": ", 1)[1].split(" at batch", 1)[0] for _, q in rows.iterrows()]
    checks = [
        f"{name}: log difference {interval(q)} ({q['verdict']})" for name, (_, q) in zip(quantity, rows.iterrows())
    ]
    return f". Batch check {'; '.join(_check_words(e) for e in entries)}: " + "; ".join(checks)


def finding(studies: dict[str, Tables]) -> str:
    t = studies[STUDY]
    s = Sources(t)
    grid, pre = s.config["scaling"], s.config["scaling"]["pretrain"]
    law, verdicts = _law_bullet(s, "population gradient descent", "", "population gradient descent")
    passed = [v for v in verdicts if v.endswith("predicts best")]
    theorem = [v for v in passed if v.startswith("theorem")]
    if theorem and len(theorem) == len(verdicts):
        answer = "Yes, for the theorem's algorithm: the theorem's form predicted every cell out of sample"
    elif passed:
        winners = sorted({v.removesuffix(" predicts best") for v in passed})
        answer = (
            f"Not at the theorem's rate law: for population gradient descent at a stable step size, "
            f"{' and '.join(LAW_WORDS[w] for w in winners)} predicted D >= 24 best in {len(passed)} of "
            f"{len(verdicts)} cells, the theorem's form in {len(theorem)}"
        )
    else:
        answer = "Undecided: no law passes the pre-registered test (" + ", ".join(verdicts) + ")"
    config = (
        f"(`{t.config_file}`: population gradient descent, d = {listing(grid['d_grid'])}, "
        f"D = {listing(grid['D_grid'])}, {pre['seeds']} replicates, {s.config['dtype']}, {_grid_batch(grid)}, "
        f"eta(D) = min({pre['eta']:g}, {pre['eta_D_limit']:g}/D), flow time up to {grid['flow_time_per_D3']:g} D^3; "
        "its page [docs/population.md](docs/population.md), figure "
        "[out of sample](docs/population/scaling_out_of_sample.png).)"
    )
    bullets = [law, _constant(s), _checks(s), _finite_batches(s)]
    plain, _ = _law_bullet(s, "batch gradient descent (variant plain512", "plain512", "plain batch-512 GD")
    bullets.append(plain)
    cited = [b + f" {s.cite()}" for b in bullets if b]
    if LARGEST_D in studies:  # beside the law test it extends; it cites its own tables
        cited.insert(1, _largest_D(studies[LARGEST_D]))
    return "\n".join([f"**1. {TITLE}** {answer}. {s.cite()} {config}"] + cited)


def summary(t: Tables) -> list[str]:
    """The law test's verdicts and the constant kappa per c, where the study has them."""
    lines = []
    tests = t.claims(LAW_TEST)
    for _, r in tests.iterrows():
        head = str(r["claim"]).removeprefix(LAW_TEST).split(":", 1)[0].split(" (")[0]
        lines += fold(
            f"law test, {head}, kappa {_kappa(str(r['claim']))}: ", f"{r['verdict']} ({r['why']})".split(" "), sep=" "
        )
    kappa = t.claims("min attention reaches 1 - exp(")
    several_d = "d" in kappa.columns and kappa["d"].nunique() > 1
    for _, r in kappa.iterrows():
        text = str(r["claim"])
        c = text.split("exp(-", 1)[1].split(" D)", 1)[0]
        value = num(r["measured"], 2) if r["verdict"] != "inconclusive" else "inconclusive"
        at_d = f" (d = {int(r['d'])})" if several_d else ""
        lines.append(f"kappa (flow time) to reach 1 - exp(-{c} D){at_d}: {value}")
    return lines
