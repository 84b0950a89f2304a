"""The same study on another CPU: its committed tables beside the README's, and what differs.

A shipped study with ``same_as`` set (findings.tables.SHIPPED) is a rerun of another shipped study's
config on another CPU, committed by `groupsparse snapshot --docs docs/<page>` like any run. The findings'
section (templates/other_cpus.j2) names the claims whose verdict differs between the two runs and the
largest differences in the claims' measured values and in the samples needed (n*), each number a table's own.
"""

from __future__ import annotations

import math

from .tables import SHIPPED, Tables, cpu_of, cpu_text, n_interval

SHOWN = 6  # differing verdicts listed in the README (the rest: the two claims tables side by side)


def _name(t: Tables) -> str:
    """'the Intel(R) Xeon(R) Processor': the CPU's model, to say which run a number is from."""
    return "the " + cpu_of(t.folder).get("model", "unrecorded CPU")


def _short(claim: str, width: int = 90) -> str:
    return claim if len(claim) <= width else claim[: width - 3].rstrip() + "..."


def _now(claims):
    """The claims with each verdict under the current rule (analysis.power.verdict_now): two runs made at
    different commits are compared on what their intervals say now, not on a rule that changed between them."""
    from ..analysis.power import verdict_now

    return claims.assign(verdict=claims.apply(verdict_now, axis=1)) if len(claims) else claims


def _typed(claims):
    """The claims with their text made anew from their typed columns (analysis.statements): the identity the
    two runs' claims are joined on, and the text shown."""
    from ..analysis.statements import about_of, claim_text

    text = [claim_text(r["statement"], about_of(r)) for _, r in claims.iterrows()]
    return claims.assign(claim=text)


def compared(a: Tables, b: Tables):
    """(claims joined on their typed columns' text, n* joined on (run, downstream, method, target)), columns _a
    and _b; verdicts under the current rule."""
    claims = _now(_typed(a.claims())).merge(_now(_typed(b.claims())), on="claim", suffixes=("_a", "_b"))
    keys = ["run", "downstream", "method", "target_accuracy"]
    n = a.table("sample_complexity").merge(b.table("sample_complexity"), on=keys, suffixes=("_a", "_b"))
    return claims, n


def _half_width(m, lo, hi) -> float:
    """Half an interval's width; a one-sided interval's finite side; NaN without one."""
    m, lo, hi = float(m), float(lo), float(hi)
    if math.isfinite(lo) and math.isfinite(hi):
        return (hi - lo) / 2
    sides = [x for x in (m - lo, hi - m) if math.isfinite(x)]
    return min(sides) if sides else math.nan


def _in_widths(r) -> float:
    """|measured here - measured there| in half-widths of the narrower of the two intervals."""
    width = min(_half_width(r[f"measured_{k}"], r[f"low_{k}"], r[f"high_{k}"]) for k in "ab")
    gap = abs(float(r["measured_a"]) - float(r["measured_b"]))
    return gap / width if width > 0 and math.isfinite(gap) else math.nan


def context(studies: dict[str, Tables]) -> list[dict]:
    """Per shipped rerun on another CPU (templates/other_cpus.j2 words it): both runs' CPUs and commits,
    the claims whose verdict differs, the judged claim that moves most against its interval and the largest
    difference in samples needed."""
    out = []
    for s in SHIPPED:
        if s.same_as is None or s.name not in studies or s.same_as not in studies:
            continue
        a, b = studies[s.same_as], studies[s.name]
        claims, n = compared(a, b)
        differ = claims[claims["verdict_a"] != claims["verdict_b"]]
        claims = claims.assign(widths=[_in_widths(r) for _, r in claims.iterrows()])
        judged = claims[~claims["verdict_a"].isin(["descriptive"])].dropna(subset=["widths"])
        both = n[n["reached_on_grid_a"].astype(bool) & n["reached_on_grid_b"].astype(bool)]
        largest = None
        if not both.empty:
            ratio = [max(x, y) / min(x, y) for x, y in zip(both["n_needed_a"], both["n_needed_b"])]
            r = both.iloc[max(range(len(ratio)), key=ratio.__getitem__)]
            here = {c: r[f"{c}_a"] for c in ("n_needed", "ci_low", "ci_high")}
            there = {c: r[f"{c}_b"] for c in ("n_needed", "ci_low", "ci_high")}
            largest = {
                "method": r["method"],
                "run": r["run"],
                "downstream": r["downstream"],
                "target": float(r["target_accuracy"]),
                "here": n_interval(here),
                "there": n_interval(there),
                "overlap": _overlap(here, there),
            }
        moves = None
        if not judged.empty:
            r = judged.loc[judged["widths"].idxmax()]
            values = {f"{k}_{x}": float(r[f"{k}_{x}"]) for k in ("measured", "low", "high") for x in "ab"}
            moves = {"claim": _short(r["claim"])} | values
        out.append(
            {
                "config": a.config_file,
                "page": s.page,
                "cpu_a": cpu_text(a.folder),
                "cpu_b": cpu_text(b.folder),
                "name_a": _name(a),
                "name_b": _name(b),
                "commits": (_commit(a), _commit(b)),
                "differ": [
                    {"claim": _short(r["claim"]), "a": r["verdict_a"], "b": r["verdict_b"]}
                    | {"measured_a": float(r["measured_a"]), "measured_b": float(r["measured_b"])}
                    for _, r in differ.head(SHOWN).iterrows()
                ],
                "more": max(len(differ) - SHOWN, 0),
                "moves": moves,
                "largest": largest,
                "tables": (a.link, b.link),
            }
        )
    return out


def _commit(t: Tables) -> str:
    """The short commit a committed folder's run was made at ('unrecorded' without one)."""
    import json

    path = t.folder / "provenance.json"
    commit = json.loads(path.read_text()).get("git_commit") if path.is_file() else None
    return str(commit)[:7] if commit else "unrecorded"


def _overlap(x: dict, y: dict) -> bool:
    lo = max(float(x["ci_low"]), float(y["ci_low"]))
    hi = min(float(x["ci_high"]), float(y["ci_high"]))
    return lo <= hi
