"""The answers' words: jinja2 templates (findings/templates/) filled with each question's data.

One renderer for every place the answers appear: docs/findings.md (per question one answer sentence,
one small table, one figure and what the answer rests on), the README's four-row answers table, the
study pages' answers block and `groupsparse review`'s summary. The question modules give the data
(``context(studies)``, typed values read from the claims' typed columns and the configs); the
templates hold every word; the filters here format numbers, so a number is a table's value at the
precision shown.
"""

from __future__ import annotations

import math
import re
from functools import cache

from . import images, theorem, training, transfer
from .tables import POWERS_DISAGREE, FindingsError, Tables, num

QUESTIONS = (theorem, training, transfer, images)  # the README's questions, in its order


def sig(x, digits: int = 2) -> str:
    """A number at ``digits`` significant digits (small rates and large flow times)."""
    x = float(x)
    return "n/a" if math.isnan(x) else f"{x:.{digits}g}"


def iv(d: dict, digits: int = 3) -> str:
    """'0.109 [0.100, 0.118]' of a dict with value, low and high; '–' without a value."""
    if math.isnan(float(d["value"])):
        return "–"
    return f"{num(d['value'], digits)} [{num(d['low'], digits)}, {num(d['high'], digits)}]"


def ns(d: dict | None) -> str:
    """Samples needed with their 95% interval: '426 [357, 508]', or 'not reached by n = 4096'."""
    if d is None:
        return "–"
    if not d["reached"]:
        return f"not reached by n = {d['max_n']:.0f}"
    high = "> grid" if math.isinf(d["high"]) else f"{d['high']:.0f}"
    return f"{d['value']:.0f} [{d['low']:.0f}, {high}]"


def pw(d: dict) -> str:
    """'power 0.88'; where the pipeline's simulation and the plug-in differ by more than 0.1, both."""
    p, sim, plug = (d.get(k, math.nan) for k in ("power", "power_pipeline", "power_plugin"))
    if p is None or math.isnan(p):
        return "power n/a"
    text = f"power {p:.2f}"
    if sim == sim and plug == plug and abs(sim - plug) > POWERS_DISAGREE:
        text += f" (simulated; plug-in {plug:.2f})"
    return text


def listing(values, word: str = "and") -> str:
    """'4, 6, 8 and 12'."""
    items = [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    if not items:
        return ""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {word} " + items[-1]


# the algorithms' short names on the pages (a claims row's typed ``algorithm``; an unknown one reads as its code)
ALGORITHMS = {
    "flow": "population flow",
    "population": "population GD",
    "batch": "batch GD",
    "autograd": "autograd GD",
    "adam": "Adam",
}


def algorithm(code: str) -> str:
    return ALGORITHMS.get(str(code), str(code))


def first_upper(text: str) -> str:
    """The text with its first letter a capital (a template's clause opening a sentence)."""
    text = str(text).strip()
    return text[:1].upper() + text[1:]


def anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


@cache
def environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("groupsparse.findings", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters |= {"num": num, "sig": sig, "iv": iv, "ns": ns, "pw": pw, "listing": listing, "anchor": anchor}
    env.filters["first_upper"] = first_upper
    env.filters["algorithm"] = algorithm
    return env


def contexts(studies: dict[str, Tables]) -> list[dict]:
    """Each question's data (questions without data at hand left out: a review of one study, or tables
    written before the typed claim columns)."""
    out = []
    for q in QUESTIONS:
        try:
            c = q.context(studies)
        except (FindingsError, KeyError):
            if studies is committed_studies(studies):
                raise
            continue
        if c is not None:
            out.append(c)
    return out


def committed_studies(studies):
    """``studies`` when they are the shipped studies' committed tables (a missing claim there is an error)."""
    from .tables import SHIPPED

    return studies if set(studies) == {s.name for s in SHIPPED} else None


def one_study(tables: Tables) -> dict[str, Tables]:
    """One study's tables standing for every study a question reads (a review, a study page)."""
    return {name: tables for name in ("default", "population_gd", "theorem")}


def render(template: str, studies: dict[str, Tables], **extra) -> str:
    """``template`` (a file of findings/templates/) filled with the questions' data."""
    text = environment().get_template(template).render(questions=contexts(studies), **extra)
    return re.sub(r"\n{3,}", "\n\n", text)
