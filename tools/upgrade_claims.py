"""Upgrade the committed claims tables (docs/*/tables/claims.csv) to the typed schema, once.

The claims tables committed before the schema of `groupsparse.analysis.statements` carry each claim's
parameters (c, kappa, the method, the variant, D...) only inside its English text. This script is the one
place that reads them back: it matches every committed text against the package's templates (a regex made
from each template), fills the typed columns from the match, and checks that the package renders the same
text from them (a row that does not round-trip stops the script). Beside the text it reads the row's other
columns where a field lives only there (the bound's measured levels, the seeds per level, the alternative's
value). It is not part of the package: the package never parses a claim's text
(tests/unit/test_claim_schema.py).

It also adds what the analysis now makes and the committed tables can give without a rerun (column
``computed_from`` = "committed tables"): per pre-registered law test, the difference of the criterion
between every two laws with its interval (from the committed theorem_by_D.csv's level means and
predictions.csv's predictions) and each law's fitted rate c with its interval (from predictions.csv's
coefficients and residual sum of squares).

One template changed with the schema: the bound's "for every D <= 64" (wrong for a slice without D = 24 ... 48)
reads "at every measured D (4, 6, 8, 12, 16, 64)"; the same text is replaced on the study pages
(docs/<page>.md), which show the claims table.

Run from the repository root: python tools/upgrade_claims.py  (idempotent: an upgraded table is left as is).
"""

from __future__ import annotations

import math
import re
import string
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from groupsparse.analysis.law_difference import law_difference_rows, law_rate, level_se
from groupsparse.analysis.rows import CLAIM_COLUMNS, claim_row
from groupsparse.analysis.settings import Settings
from groupsparse.analysis.statements import (
    ALGORITHM_WORDS,
    QUANTITY_WORDS,
    STATEMENTS,
    About,
    about_of,
    claim_text,
    grid_text,
)
from groupsparse.analysis.stats import Prediction
from groupsparse.config.schema import fill_defaults, study_schema
from groupsparse.findings.tables import SHIPPED

NUMBER = r"-?[0-9.]+(?:e[-+]?[0-9]+)?"
PATTERNS = {
    "algorithm_words": r".+?",
    "variant_words": r"grid|variant \S+",
    "setting_words": rf"batch \d+(?:, eta {NUMBER})?",
    "reference_setting_words": rf"batch \d+(?:, eta {NUMBER})?",
    "quantity_words": "|".join(re.escape(w) for w in sorted(QUANTITY_WORDS.values(), key=len, reverse=True)),
    "D_grid": r"[0-9, ]+",
    "D_grid_or_none": r"[0-9, ]+|none",
    "c_when": r"fixed before the data|chosen after seeing data",
}
NUMERIC = {"batch", "eta", "reference_batch", "reference_eta", "d", "D", "kappa", "c", "target", "at_n"}
# the bound's template before the schema (its text said "for every D <= D_max")
OLD_BOUND = (
    "min attention reaches 1 - exp(-{c:g} D) within flow time kappa D^3 for every D <= {D_max:.0f} (d = {d:.0f}) "
    "(c {c_when})"
)
# templates of an older analysis whose rows the theorem study's committed table still holds: typed, text kept
LEGACY = {
    "rate (descriptive): steps until {what} (d = {d:.0f})": ("convergence_time", 1, "steps"),
    "min attention reaches 1 - exp(-{c:g} D) within kappa D^3 steps for every D <= {D_max:.0f} (d = {d:.0f}) "
    "(c {c_when})": ("bound_constant", 1, "kappa"),
    "1 - min attention at {kappa:g} D^3 steps: curvature in D over the measured levels (d = {d:.0f})": (
        "attention_concentration",
        1,
        "rss_difference",
    ),
    "1 - min attention at {kappa:g} D^3 steps falls with D (d = {d:.0f})": (
        "attention_concentration",
        1,
        "exponential_slope",
    ),
    "out-of-sample: which law predicts 1 - min attention at {kappa:g} D^3 steps, D = {D:.0f} (d = {d:.0f})": (
        "out_of_sample",
        1,
        "rest",
    ),
    "1 - min attention at {kappa:g} D^3 steps at batch -> infinity ({algorithm_words}; d = {d:.0f}, D = {D:.0f})": (
        "batch_limit",
        1,
        "rest",
    ),
    "steps until min attention >= 1 - exp(-{c:g} D) at batch -> infinity ({algorithm_words}; d = {d:.0f}, "
    "D = {D:.0f})": ("batch_limit", 1, "steps"),
}


def regex(template: str) -> re.Pattern:
    """The template as a regex with a named group per field (a field used twice matches the same text)."""
    out, seen = [], set()
    for literal, name, spec, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if name is None:
            continue
        if name in seen:
            out.append(f"(?P={name})")
            continue
        seen.add(name)
        pattern = PATTERNS.get(name) or (NUMBER if spec else r".+?")
        out.append(f"(?P<{name}>{pattern})")
    return re.compile("".join(out) + r"\Z")


def fields(groups: dict) -> dict:
    """A match's groups as the typed columns (the words made from them turned back into them)."""
    f = {}
    for name, text in groups.items():
        if name == "algorithm_words":
            f["algorithm"] = {w: k for k, w in ALGORITHM_WORDS.items()}.get(text, text)
        elif name == "variant_words":
            f["variant"] = "" if text == "grid" else text.removeprefix("variant ")
        elif name in ("setting_words", "reference_setting_words"):
            prefix = "" if name == "setting_words" else "reference_"
            m = re.fullmatch(rf"batch (\d+)(?:, eta ({NUMBER}))?", text)
            f[f"{prefix}batch"], f[f"{prefix}eta"] = float(m.group(1)), float(m.group(2) or "nan")
        elif name == "quantity_words":
            f["quantity"] = {w: k for k, w in QUANTITY_WORDS.items()}[text]
        elif name == "D_grid_or_none":
            f["D_grid"] = "" if text == "none" else text
        elif name in NUMERIC or name == "D_max":
            f[name] = float(text)
        else:
            f[name] = text
    return f


COMPILED = {name: regex(s.template) for name, s in STATEMENTS.items()}
COMPILED_OLD_BOUND = regex(OLD_BOUND)
COMPILED_LEGACY = {regex(t): v for t, v in LEGACY.items()}


def typed(text: str) -> tuple[str, dict]:
    """(statement, typed fields) of a committed claim's text; ('', fields) for a legacy template."""
    hits = [(name, m) for name, p in COMPILED.items() if (m := p.match(text))]
    if len(hits) > 1:  # a wider pattern also matches: keep the one that renders the text back
        hits = [(n, m) for n, m in hits if claim_text(n, About(**_about_fields(fields(m.groupdict())))) == text]
    if len(hits) == 1:
        name, m = hits[0]
        return name, fields(m.groupdict())
    if m := COMPILED_OLD_BOUND.match(text):
        return "bound_constant", fields(m.groupdict())
    for p, _ in COMPILED_LEGACY.items():
        if m := p.match(text):
            return "", fields(m.groupdict())
    raise SystemExit(f"no template matches the committed claim {text!r}")


def _about_fields(f: dict) -> dict:
    return {k: v for k, v in f.items() if k in About.__dataclass_fields__}


def _legacy(text: str) -> tuple[str, int, str]:
    for p, v in COMPILED_LEGACY.items():
        if p.match(text):
            return v
    raise AssertionError(text)


def _prediction(text) -> tuple[str, float]:
    text = "" if not isinstance(text, str) else text.strip()
    for sign, kind in (("<=", "at_most"), (">", "greater"), ("<", "less"), ("=", "equal")):
        if text.startswith(sign):
            m = re.search(rf"interval at most ({NUMBER}) wide", text)
            return kind, float(m.group(1)) if m else math.nan
    return ("region", math.nan) if text.startswith("(a") else ("", math.nan)


def _alternative(text) -> tuple[str, float]:
    if not isinstance(text, str) or not text:
        return "", math.nan
    m = re.fullmatch(rf"(.*) \(value ({NUMBER})\)", text)
    return (m.group(1), float(m.group(2))) if m else (text, math.nan)


def _seeds_per_level(config) -> float:
    m = re.search(r"seeds per level ([0-9, ]+)", str(config))
    return float(min(int(x) for x in m.group(1).split(",") if x.strip())) if m else math.nan


def _config(folder: Path) -> dict:
    config = yaml.safe_load((folder / "config.yaml").read_text()) if (folder / "config.yaml").is_file() else None
    if config is None:
        prov = __import__("json").loads((folder / "provenance.json").read_text())
        config = yaml.safe_load(Path(prov["config"]).read_text())
    fill_defaults(config, study_schema())
    return config


def upgraded(folder: Path) -> tuple[pd.DataFrame, dict[str, str]]:
    """The folder's claims with the typed columns (and the added rows), and {old text: new text}."""
    claims = pd.read_csv(folder / "claims.csv")
    by = pd.read_csv(folder / "theorem_by_D.csv") if (folder / "theorem_by_D.csv").is_file() else None
    if by is not None:
        by = by.assign(group=by["group"].fillna("").astype(str))
    renamed, rows = {}, []
    for r in claims.to_dict("records"):
        statement, f = typed(r["claim"])
        kind, tolerance = _prediction(r.get("prediction"))
        name, value = _alternative(r.get("alternative"))
        row = {k: r.get(k, math.nan) for k in CLAIM_COLUMNS}
        about = About(**_about_fields(f))
        if statement:
            s = STATEMENTS[statement]
            row.update(analysis=s.analysis, question=s.question, quantity=about.quantity or s.quantity)
        else:
            analysis, question, quantity = _legacy(r["claim"])
            row.update(analysis=analysis, question=question, quantity=quantity)
        if statement == "bound_constant":
            about = _bound(about, r, by, f)
        if statement == "n_star_shape":
            about = _shape(about, str(r.get("config", "")))
        about = _settings_from_tables(statement, about, r, by)
        if statement == "law_test":
            about = replace(about, subject=_law_of(r["verdict"], r.get("why")))
        for k, v in about.__dict__.items():  # the text's fields; where it has none, the committed column's
            if k != "quantity" and (_set(v) or not _set(row.get(k))):
                row[k] = v
        row.update(
            statement=statement,
            prediction_kind=kind,
            tolerance=tolerance,
            alternative_name=name,
            alternative_value=value,
            power_veto=str(r.get("why", "")).startswith("undecided (power"),
            computed_from="run",
        )
        if statement:
            text = claim_text(statement, about)
            if text != r["claim"]:
                if statement != "bound_constant":
                    raise SystemExit(f"{folder}: {r['claim']!r} renders back as {text!r}")
                renamed[r["claim"]] = text
                row["claim"] = text
                row["why"] = re.sub(
                    r"for every D <= \d+", f"at every measured D ({about.D_grid})", str(row.get("why", ""))
                )
        rows.append(row)
    table = pd.DataFrame(rows, columns=CLAIM_COLUMNS)
    if (folder / "predictions.csv").is_file() and by is not None:
        table = pd.concat([table, pd.DataFrame(_law_rows(folder, table, by), columns=CLAIM_COLUMNS)])
    return table, renamed


def _set(v) -> bool:
    return not (v is None or v == "" or (isinstance(v, float) and math.isnan(v)))


def _law_of(verdict: str, why) -> str:
    """The law a law-test row names: its winner, or the closest law of 'no law passes'."""
    if str(verdict).endswith(" predicts best"):
        return str(verdict).removesuffix(" predicts best")
    m = re.match(r"closest: (\w+)", str(why))
    return m.group(1) if m else ""


def _bound(about: About, r: dict, by, f: dict) -> About:
    """The bound's measured levels and the level of its largest ratio, from its config column."""
    config = str(r.get("config", ""))
    levels = [int(x) for x in re.findall(r"D=(\d+): ", config.split("per level:", 1)[1].split(";", 1)[0])]
    below = re.search(r"the target lies below the start at D = \[([0-9, ]+)\]", config)
    levels = sorted(set(levels) | ({int(x) for x in below.group(1).split(",")} if below else set()))
    top = re.search(r"interval: the seeds' t interval at D = (\d+)", config)
    D_top = float(top.group(1)) if top else math.nan
    seeds = math.nan
    if by is not None and top:
        q = by[(by["group"] == "") & (by["D"] == D_top)]
        q = q[q["quantity"] == f"flow time until min attention >= 1 - exp(-{f['c']:g} D)"]
        seeds = float(q["seeds"].iloc[0]) if len(q) else math.nan
    return replace(about, D=D_top, D_grid=grid_text(levels), replicates=seeds)


def _shape(about: About, config: str) -> About:
    """The n* shape's exponent of D with its interval, the regions and the grid's D, from its config column."""
    m = re.match(r"a = \S+ \[\S+, \S+\], b = (\S+) \[(\S+), (\S+)\] \(two-sided 95%\); (.*?); levels (.*)", config)
    Ds = sorted({int(x) for x in re.findall(r"D=(\d+)", m.group(5))})
    b, low, high = (float(m.group(i)) for i in (1, 2, 3))
    return replace(
        about, exponent_b=b, exponent_b_low=low, exponent_b_high=high, regions=m.group(4), D_grid=grid_text(Ds)
    )


def _settings_from_tables(statement: str, about: About, r: dict, by) -> About:
    """The algorithm, batch and step size of a run group, and the seeds behind the interval."""
    values = dict(about.__dict__)
    if statement in ("reaches_level", "last_step") and by is not None:
        q = by[(by["group"] == about.variant) & (by["D"] == about.D)]
        if len(q):
            values.update(algorithm=str(q["algorithm"].iloc[0]), batch=float(q["batch"].iloc[0]))
            values.update(eta=float(q["eta"].iloc[0]))
    if statement == "law_test" and by is not None:
        quantity = f"1 - min attention at flow time {about.kappa:g} D^3"
        Ds = [int(x) for x in about.D_grid.split(",") if x.strip()]
        q = by[(by["group"] == about.variant) & by["D"].isin(Ds) & (by["quantity"] == quantity)]
        values["replicates"] = float(q["seeds"].min()) if len(q) else math.nan
    if statement == "bound_constant" and by is not None:
        q = by[by["group"] == ""]
        if len(q):
            values.update(algorithm="population" if q["algorithm"].iloc[0] == "population" else "batch")
    if values.get("replicates") != values.get("replicates"):  # NaN: from the row
        seeds = _seeds_per_level(r.get("config"))
        values["replicates"] = seeds if seeds == seeds else float(r.get("n", math.nan))
    return About(**values)


def _law_rows(folder: Path, table: pd.DataFrame, by: pd.DataFrame) -> list[dict]:
    """Per law test: the differences between laws and each law's rate, from the committed tables."""
    config = _config(folder)
    s = Settings.from_spec(Settings.spec(config))
    preds = pd.read_csv(folder / "predictions.csv")
    preds = preds.assign(group=preds["group"].astype(object).where(preds["group"].notna(), ""))
    preds = preds.assign(blocker=preds["blocker"].astype(object).where(preds["blocker"].notna(), ""))
    out = []
    for _, test in table[table["statement"] == "law_test"].iterrows():
        about = about_of(test)
        p_cell = preds[
            (preds["group"] == about.variant) & (preds["d"] == about.d) & ((preds["kappa"] - about.kappa).abs() < 1e-9)
        ]
        quantity = f"1 - min attention at flow time {about.kappa:g} D^3"
        level_stats = {}
        for D in [int(x) for x in str(about.D_grid).split(",") if x.strip()]:
            q = by[(by["group"] == about.variant) & (by["D"] == D) & (by["quantity"] == quantity)]
            if len(q) and np.isfinite(q[["value", "low", "high"]].to_numpy(float)).all():
                r = q.iloc[0]
                se = level_se(math.log(r["low"]), math.log(r["high"]), int(r["seeds"]))
                level_stats[D] = (math.log(r["value"]), se, int(r["seeds"]))
        blockers = [] if test["verdict"] != "inconclusive" else [str(test.get("why", ""))]
        for row in law_difference_rows(about, level_stats, p_cell, blockers, s):
            out.append(row | {"computed_from": "committed tables"})
        for law in s.laws:
            fit = p_cell[p_cell["law"] == law]
            if not len(fit) or fit["blocker"].astype(bool).any() or not isinstance(fit["coefficients"].iloc[0], str):
                continue
            f = fit.iloc[0]
            Ds = [int(x.removeprefix("D=")) for x in f["fit_levels"].split("; ")]
            c, low, high, dof = law_rate(law, Ds, [float(x) for x in f["coefficients"].split()], float(f["rss"]))
            if not np.isfinite(c):
                continue
            here = replace(about, subject=law, D_grid=grid_text(Ds), replicates=float(f["seeds_per_level"]))
            row = claim_row(
                "law_rate",
                here,
                Prediction("greater", 0.0),
                c,
                low,
                high,
                "",
                f"fit levels D = {grid_text(Ds)}, {int(f['seeds_per_level'])} seeds each; the level means' OLS fit, "
                f"t interval with {dof:.0f} degrees of freedom (s^2 = RSS / (L - p), lack of fit included); from "
                "the committed predictions.csv",
                int(f["seeds_per_level"]) * len(Ds),
                "exp(-Theta(D)): a law whose fitted c is above 0 decays exponentially in D whatever its prefactor",
            )
            out.append(row | {"computed_from": "committed tables"})
    return out


def main(root: Path = Path(".")) -> int:
    for shipped in SHIPPED:
        folder = root / shipped.tables
        claims = pd.read_csv(folder / "claims.csv")
        if "statement" in claims.columns:
            print(f"{folder}: already upgraded")
            continue
        table, renamed = upgraded(folder)
        table.to_csv(folder / "claims.csv", index=False, float_format="%.10g")
        page = root / f"{shipped.page}.md"
        if renamed and page.is_file():
            text = page.read_text()
            for old, new in renamed.items():
                text = text.replace(f"| {old} |", f"| {new} |")
            page.write_text(text)
        added = int((table["computed_from"] == "committed tables").sum())
        print(f"{folder}: {len(claims)} claims typed, {len(renamed)} texts renamed, {added} rows added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
