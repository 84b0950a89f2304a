"""The same study on another CPU: its committed tables beside the README's, and what differs.

A shipped study with ``same_as`` set (findings.tables.SHIPPED) is a rerun of another shipped study's
config on another CPU, committed by `groupsparse snapshot --docs docs/<page>` like any run. The README's
paragraph here names the claims whose verdict differs between the two runs and the largest
differences in the claims' measured values and in the samples needed (n*), each number a table's own.
"""

from __future__ import annotations

import math

from .tables import SHIPPED, Sources, Tables, cpu_of, cpu_text, n_interval, num

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


def compared(a: Tables | Sources, b: Tables | Sources):
    """(claims joined on their text, n* joined on (run, downstream, method, target)), columns _a and _b
    (Sources record the tables read, for the paragraph's citation); verdicts under the current rule."""
    claims = _now(a.table("claims")).merge(_now(b.table("claims")), on="claim", suffixes=("_a", "_b"))
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


def paragraph(studies: dict[str, Tables]) -> str:
    """The README's paragraph for every shipped rerun on another CPU ('' when there is none)."""
    parts = []
    for s in SHIPPED:
        if s.same_as is None or s.name not in studies:
            continue
        a, b = studies[s.same_as], studies[s.name]
        src_a, src_b = Sources(a), Sources(b)
        claims, n = compared(src_a, src_b)
        differ = claims[claims["verdict_a"] != claims["verdict_b"]]
        here, there = _name(a), _name(b)
        text = (
            f"**The same study on another CPU.** `{a.config_file}` ran also on {cpu_text(b.folder)} "
            f"([{s.page}.md]({s.page}.md)), every job as in the questions above (the same config, algorithms "
            f"and step sizes); the README's runs are on {cpu_text(a.folder)}."
        )
        commits = (_commit(a), _commit(b))
        if commits[0] != commits[1]:
            text += (
                f" The two ran at different commits ({commits[0]} and {commits[1]}); their verdicts are compared "
                "under the current verdict rule, which each row's interval, prediction and power decide."
            )
        text += " "
        if differ.empty:
            text += "Every claim has the same verdict on both. "
        else:
            shown = [
                f'"{_short(r["claim"])}": {r["verdict_a"]} ({num(r["measured_a"])}) on {here}, {r["verdict_b"]} '
                f"({num(r['measured_b'])}) on {there}"
                for _, r in differ.head(SHOWN).iterrows()
            ]
            more = "; and more (the two claims tables side by side)" if len(differ) > SHOWN else ""
            text += "Verdicts that differ: " + "; ".join(shown) + more + ". "
        claims = claims.assign(widths=[_in_widths(r) for _, r in claims.iterrows()])
        judged = claims[~claims["verdict_a"].isin(["descriptive"])].dropna(subset=["widths"])
        if not judged.empty:
            r = judged.loc[judged["widths"].idxmax()]
            text += (
                "The judged claim whose measured value moves most against its interval: "
                f'"{_short(r["claim"])}", {num(r["measured_a"])} [{num(r["low_a"])}, {num(r["high_a"])}] on '
                f"{here}, {num(r['measured_b'])} [{num(r['low_b'])}, {num(r['high_b'])}] on {there}. "
            )
        both = n[n["reached_on_grid_a"].astype(bool) & n["reached_on_grid_b"].astype(bool)]
        if not both.empty:
            ratio = [max(x, y) / min(x, y) for x, y in zip(both["n_needed_a"], both["n_needed_b"])]
            r = both.iloc[max(range(len(ratio)), key=ratio.__getitem__)]
            side = {c: r[f"{c}_a"] for c in ("n_needed", "ci_low", "ci_high")}
            other = {c: r[f"{c}_b"] for c in ("n_needed", "ci_low", "ci_high")}
            text += (
                f"The largest difference in samples needed where both reach the target: {r['method']} on "
                f"{r['run']} ({r['downstream']}, accuracy {num(r['target_accuracy'], 2)}), n* "
                f"{n_interval(side)} on {here}, {n_interval(other)} on {there}; the intervals "
                f"{'overlap' if _overlap(side, other) else 'do not overlap'}. "
            )
        text += f"{src_a.cite()[:-1]}; {src_b.cite()[1:]}"
        parts.append(text)
    return "\n\n".join(parts)


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
