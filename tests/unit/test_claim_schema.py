"""Claims as data (analysis/statements.py): every claims row carries typed columns beside its text, the
text is made from them in one place, and the committed tables carry them too (tools/upgrade_claims.py
typed them once from their text; nothing in the package reads a claim's text back)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from groupsparse.analysis.rows import CLAIM_COLUMNS, claim_row, prediction_text
from groupsparse.analysis.statements import STATEMENTS, About, about_of, claim_text, levels
from groupsparse.analysis.stats import Prediction
from groupsparse.findings.tables import SHIPPED

from conftest import REPO


def committed_claims(shipped) -> pd.DataFrame:
    return pd.read_csv(REPO / shipped.tables / "claims.csv")


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda s: s.name)
def test_every_committed_claims_table_has_the_typed_columns(shipped):
    claims = committed_claims(shipped)
    assert list(claims.columns) == CLAIM_COLUMNS
    named = claims["statement"].dropna()
    assert set(named) <= set(STATEMENTS)
    # only the theorem study's table, written by an older analysis, holds texts of templates since replaced
    legacy = claims["statement"].isna().sum()
    assert legacy == 0 or shipped.name == "theorem"


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda s: s.name)
def test_every_committed_claims_text_is_made_from_its_typed_columns(shipped):
    """The text the package renders from a row's typed columns is the row's text, for every row whose
    template is current: the typed columns say all the text says."""
    claims = committed_claims(shipped)
    current = claims[claims["statement"].notna()]
    assert len(current) > 0.5 * len(claims)
    for _, row in current.iterrows():
        assert claim_text(row["statement"], about_of(row)) == row["claim"]
        assert row["question"] == STATEMENTS[row["statement"]].question
        assert row["analysis"] == STATEMENTS[row["statement"]].analysis


def test_a_claim_row_is_made_from_typed_fields():
    """The API a new analysis uses: a statement, an About, the prediction and the interval."""
    about = About(
        subject="pretrained_probe", reference="logreg", run="base", downstream="transfer", target=0.9, d=10, D=16
    )
    row = claim_row("sample_gap", about, Prediction("greater", 0.0), 1.2, 0.4, 2.0, "", "config", 5, "theory", "task")
    assert row["claim"] == "pretrained_probe needs fewer samples than logreg for accuracy 0.9 (base, transfer)"
    assert (row["verdict"], row["analysis"], row["question"], row["quantity"]) == (
        "holds",
        "sample_gap",
        3,
        "log_n_star_ratio",
    )
    assert (row["prediction"], row["prediction_kind"], row["predicted_value"]) == ("> 0", "greater", 0.0)
    assert row["subject"] == "pretrained_probe" and row["target"] == 0.9 and row["role"] == "task"
    assert set(row) == set(CLAIM_COLUMNS)
    assert claim_text("sample_gap", about_of(row)) == row["claim"] and about_of(row).d == 10


def test_the_prediction_column_is_made_from_the_prediction():
    assert prediction_text(Prediction("at_most", 1.0)) == "<= 1"
    assert prediction_text(Prediction("equal", 2.0, 1.0)) == "= 2 (interval at most 1 wide)"
    assert prediction_text(None) == ""


def test_the_levels_column_reads_back():
    assert levels("24, 32, 48") == [24, 32, 48] and levels("") == [] and levels(math.nan) == []


def test_the_analysis_writes_rows_whose_text_is_their_typed_columns():
    """Every row the analysis writes (here the synthetic study of test_theorem_claims) has a statement and
    renders back to its text."""
    from test_theorem_claims import SETTINGS, min_attention_runs, power_time

    from groupsparse.analysis.claims import analyse

    claims = analyse(min_attention_runs(power_time(3.2), noise=0.01), None, SETTINGS).claims
    assert list(claims.columns) == CLAIM_COLUMNS and len(claims) > 10
    for _, row in claims.iterrows():
        assert claim_text(row["statement"], about_of(row)) == row["claim"]


TEXT_COLUMNS = {"claim", "prediction", "why", "config", "theory", "alternative"}  # display text, never read back
READING = {"split", "rsplit", "partition", "rpartition", "startswith", "endswith", "removeprefix", "removesuffix",
           "find", "rfind", "index", "contains", "match", "fullmatch", "search", "findall", "extract"}  # fmt: skip


def text_reads(tree) -> list[int]:
    """Lines where a string method or a regex reads a claims table's text column (x["claim"].split(...),
    str(r["why"]).startswith(...), c["claim"].str.contains(...), re.search(..., r["config"]))."""
    import ast

    def names_text(node) -> bool:
        return any(
            isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value in TEXT_COLUMNS
            for n in ast.walk(node)
        )

    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        f = node.func
        method = f.attr in READING and names_text(f.value)
        regex = isinstance(f.value, ast.Name) and f.value.id == "re" and any(names_text(a) for a in node.args)
        if method or regex:
            lines.append(node.lineno)
    return lines


def test_nothing_in_the_package_reads_a_claims_text():
    """No module parses a claim's (or its prediction's, its why's, its config's) text: the typed columns say
    everything a reader needs. (The one-time upgrade of the tables committed before them, tools/, is not
    part of the package.)"""
    import ast

    from test_layout import PACKAGE

    found = {
        str(p.relative_to(PACKAGE)): lines
        for p in sorted(PACKAGE.rglob("*.py"))
        if (lines := text_reads(ast.parse(p.read_text())))
    }
    assert found == {}


def test_the_text_check_sees_a_read():
    import ast

    code = 'a = r["claim"].split(": ")\nb = str(row["why"]).startswith("x")\nc = re.search("x", r["config"])\n'
    code += 'd = c["claim"].astype(str).str.contains("x")\ne = r["verdict"].startswith("x")\n'
    assert text_reads(ast.parse(code)) == [1, 2, 3, 4]
