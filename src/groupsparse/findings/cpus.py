"""The same study on another CPU: its committed tables beside the README's, and what differs.

A shipped study with ``same_as`` set (findings.tables.SHIPPED) is a rerun of another shipped study's
config on another CPU, committed by `groupsparse snapshot --docs docs/<page>` like any run. The README's
paragraph here names the claims whose verdict differs between the two runs and the largest
differences in the claims' measured values and in the samples needed (n*), each number a table's own.
"""

from __future__ import annotations

import math

from .tables import SHIPPED, Sources, Tables, n_interval, num

SHOWN = 6  # differing verdicts listed in the README (the rest: the two claims tables side by side)


def _cpu(t: Tables) -> str:
    import json

    path = t.folder / "provenance.json"
    cpu = (json.loads(path.read_text()).get("cpu") or {}) if path.is_file() else {}
    return f"{cpu.get('model', 'an unrecorded CPU')} ({', '.join(cpu.get('isa') or []) or 'instruction set unknown'})"


def _short(claim: str, width: int = 70) -> str:
    return claim if len(claim) <= width else claim[: width - 3].rstrip() + "..."


def compared(a: Tables, b: Tables):
    """(claims joined on their text, n* joined on (run, downstream, method, target)), columns _a and _b."""
    claims = a.table("claims").merge(b.table("claims"), on="claim", suffixes=("_a", "_b"))
    keys = ["run", "downstream", "method", "target_accuracy"]
    n = a.table("sample_complexity").merge(b.table("sample_complexity"), on=keys, suffixes=("_a", "_b"))
    return claims, n


def _relative(x, y) -> float:
    x, y = float(x), float(y)
    if not (math.isfinite(x) and math.isfinite(y)) or max(abs(x), abs(y)) == 0:
        return math.nan
    return abs(x - y) / max(abs(x), abs(y))


def paragraph(studies: dict[str, Tables]) -> str:
    """The README's paragraph for every shipped rerun on another CPU ('' when there is none)."""
    parts = []
    for s in SHIPPED:
        if s.same_as is None or s.name not in studies:
            continue
        a, b = studies[s.same_as], studies[s.name]
        src_a, src_b = Sources(a), Sources(b)
        src_a.table("claims"), src_b.table("claims")
        src_a.table("sample_complexity"), src_b.table("sample_complexity")
        claims, n = compared(a, b)
        differ = claims[claims["verdict_a"] != claims["verdict_b"]]
        text = (
            f"**The same study on another CPU.** `{a.config_file}` ran also on {_cpu(b)} "
            f"([{s.page}.md]({s.page}.md)), the README's runs being on {_cpu(a)}. "
        )
        if differ.empty:
            text += "Every claim has the same verdict on both. "
        else:
            shown = [
                f'"{_short(r["claim"])}": {r["verdict_a"]} ({num(r["measured_a"])}) here, {r["verdict_b"]} '
                f"({num(r['measured_b'])}) there"
                for _, r in differ.head(SHOWN).iterrows()
            ]
            more = "; and more (the two claims tables side by side)" if len(differ) > SHOWN else ""
            text += "Verdicts that differ: " + "; ".join(shown) + more + ". "
        claims = claims.assign(rel=[_relative(x, y) for x, y in zip(claims["measured_a"], claims["measured_b"])])
        judged = claims[~claims["verdict_a"].isin(["descriptive"])].dropna(subset=["rel"])
        if not judged.empty:
            r = judged.loc[judged["rel"].idxmax()]
            text += (
                f'The largest difference in a judged claim\'s measured value: "{_short(r["claim"])}", '
                f"{num(r['measured_a'])} [{num(r['low_a'])}, {num(r['high_a'])}] here, {num(r['measured_b'])} "
                f"[{num(r['low_b'])}, {num(r['high_b'])}] there. "
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
                f"{n_interval(side)} here, {n_interval(other)} there; the intervals "
                f"{'overlap' if _overlap(side, other) else 'do not overlap'}. "
            )
        text += f"{src_a.cite()[:-1]}; {src_b.cite()[1:]}"
        parts.append(text)
    return "\n\n".join(parts)


def _overlap(x: dict, y: dict) -> bool:
    lo = max(float(x["ci_low"]), float(y["ci_low"]))
    hi = min(float(x["ci_high"]), float(y["ci_high"]))
    return lo <= hi
