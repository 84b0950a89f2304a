"""The findings (docs/findings.md) and the README's answers table are generated from the committed tables
(docs/*/tables/*.csv) through the templates: regenerating them gives their bytes, every number in them is a
committed table's value (or its config's) at the precision shown, the committed tables agree with the
results pages that show them, a claim a finding needs and does not find stops the generator naming it, and
no claim's text is read: the answers follow the typed columns alone."""

from __future__ import annotations

import bisect
import json
import math
import re
import shutil

import pandas as pd
import pytest
import yaml

from groupsparse.findings import readme
from groupsparse.findings.tables import COMMITTED, SHIPPED, FindingsError, commit_tables, committed

from conftest import REPO

NUMBER = re.compile(r"(?<![\w.^])(\d+(?:\.\d+)?(?:e-?\d+)?)(%?)")


def section_text() -> str:
    """What the generator writes for a reader: docs/findings.md and the README's answers table."""
    return (REPO / "docs" / "findings.md").read_text() + "\n" + readme.current((REPO / "README.md").read_text())


def numbers_in(text: str) -> list[str]:
    """Every number a reader sees: link targets, the question numbers and markers left out."""
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets are paths
    text = re.sub(r"<!--.*?-->", "", text)
    text = re.sub(r"^\*\*\d\. ", "**", text, flags=re.M)
    return [m.group(1) + m.group(2) for m in NUMBER.finditer(text)]


def committed_values() -> list[float]:
    """|x| of every number in the committed tables (cells, and numbers inside text cells) and in the
    configs they name (with the schema's defaults), sorted."""
    values = []
    for tables in committed(REPO).values():
        for name in COMMITTED:
            if not tables.has(name):
                continue
            df = tables.table(name)
            for column in df.columns:
                series = df[column]
                if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
                    values += [abs(float(v)) for v in series if math.isfinite(float(v))]
                else:
                    values += [float(m.group(1)) for v in series.dropna().astype(str) for m in NUMBER.finditer(v)]
        stack = [tables.config]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack += list(item.values())
            elif isinstance(item, list):
                stack += item
            elif isinstance(item, int | float) and not isinstance(item, bool):
                values.append(abs(float(item)))
    return sorted(values)


def unsupported(tokens: list[str], values: list[float]) -> list[str]:
    """The tokens no value rounds to at the token's precision."""

    def near(x: float, tol: float) -> bool:
        i = bisect.bisect_left(values, x - tol)
        return i < len(values) and values[i] <= x + tol

    bad = []
    for token in tokens:
        percent = token.endswith("%")
        text = token.rstrip("%")
        x = float(text)
        mantissa, _, exponent = text.partition("e")
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        tol = 0.5 * 10 ** (int(exponent or 0) - decimals) * (1 + 1e-9)  # half a unit in the last digit shown
        if not (near(x, tol) or (percent and near(x / 100, tol / 100))):
            bad.append(token)
    return bad


def test_the_findings_and_the_readme_answers_regenerate_byte_identically_from_the_committed_tables():
    studies = committed(REPO)
    assert readme.answers_table(studies) == readme.current((REPO / "README.md").read_text()), (
        "run `groupsparse snapshot --findings-only`"
    )
    assert readme.findings_page(studies) == (REPO / "docs" / "findings.md").read_text()


def test_the_pages_the_findings_name_regenerate_byte_identically():
    pages = readme.pages(committed(REPO), REPO)
    assert list(pages) == ["docs/findings.md", "docs/studies.md", "docs/ablations.md"]
    for name, text in pages.items():
        assert (REPO / name).read_text() == text, "run `groupsparse snapshot --findings-only`"


def test_every_number_in_the_findings_is_a_committed_tables_or_its_configs():
    tokens = numbers_in(section_text())
    assert len(tokens) > 100
    assert unsupported(tokens, committed_values()) == []


def test_the_number_check_sees_a_number_no_table_has():
    values = committed_values()
    assert unsupported(numbers_in("measured 0.565 [0.548, 0.583] in 43 seeds"), values) == []
    assert unsupported(numbers_in("measured 0.27182 and 7796.5"), values) == ["0.27182", "7796.5"]
    assert unsupported(numbers_in("predicted 1.5e-06, 7.7e-13"), values) == ["7.7e-13"]
    assert numbers_in("[x](docs/a1.csv) `pretrained_frozen_W_v0` float32\n**1. Q** 1e-6 90%") == ["1e-6", "90%"]


def test_each_question_has_its_answer_table_figure_and_sources_one_click_from_the_readme():
    page = (REPO / "docs" / "findings.md").read_text()
    sections = re.split(r"\n## (?=\d\. )", page)[1:]
    assert len(sections) == 4
    answers = readme.current((REPO / "README.md").read_text())
    for number, section in enumerate(sections, 1):
        section = section.split("\n## ", 1)[0]
        assert section.startswith(f"{number}. ") and "**Answer.**" in section and "**Strength of evidence:**" in section
        assert re.search(r"\n\|---\|", section), f"question {number}: no table"
        assert f"](figures/question{number}.png)" in section
        assert re.search(r"Tables: \[claims\.csv\]\(\w+/tables/claims\.csv\)", section), section[:80]
        assert re.search(r"of\s+`(config\.yaml|configs/(slices/)?\w+\.yaml)`", section)
        assert f"(docs/figures/question{number}.png)" in answers and f"(docs/findings.md#{number}-" in answers


def test_the_readme_stays_a_front_page():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for command in (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && snakemake --cores all",
        'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test,slurm]" && python -m pytest',
    ):
        assert f"```bash\n{command}\n```" in text


def test_no_run_history_on_the_front_page():
    text = section_text().lower()
    assert not [w for w in ("realisation", "earlier", "before its", "session") if w in text]


def test_the_d64_slice_predicts_what_was_preregistered():
    """The README says the slice's fit levels rerun give the committed predictions bit for bit."""
    slice_ = pd.read_csv(REPO / "docs/population_D64/tables/predictions.csv")
    pre = pd.read_csv(REPO / "docs/population_gd/preregistered/predictions.csv")
    on = ["group", "law", "kappa", "D"]
    both = slice_.merge(pre, on=on, suffixes=("", "_pre"))
    assert len(both) == len(slice_[slice_["D"].isin(pre["D"])]) > 0
    for column in ("rest", "rest_low", "rest_high", "lack_of_fit_p"):
        assert (both[column] == both[f"{column}_pre"]).all(), column


# --- the committed tables agree with the results pages that show them (docs/results.md, docs/theorem.md)


def markdown_header(page: str, heading: str) -> list[str]:
    """The column names of the first table under ``## heading``."""
    body = page.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [c.strip() for c in next(x for x in body.splitlines() if x.startswith("| "))[2:-2].split(" | ")]


def markdown_rows(page: str, heading: str, cells: int) -> list[list[str]]:
    """The rows of the first table under ``## heading`` (each split from the right into ``cells``)."""
    body = page.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in line[2:-2].rsplit(" | ", cells - 1)] for line in lines]


def agrees(shown: str, value) -> bool:
    """A page's cell (at its precision; '–' for a missing value) and a table's value."""
    if shown in ("–", "nan"):
        return value is None or (isinstance(value, float) and math.isnan(value))
    if shown in ("inf", "-inf"):
        return float(value) == float(shown)
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    stored = 0.5 * 10 ** (math.floor(math.log10(abs(float(value)))) - 5) if float(value) else 0.0  # CSV: %.6g
    return abs(float(shown) - float(value)) <= 0.5 * 10**-decimals + stored + 1e-9


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda s: s.name)
def test_the_committed_claims_are_those_the_results_page_shows(shipped):
    page = (REPO / f"{shipped.page}.md").read_text()
    claims = pd.read_csv(REPO / shipped.tables / "claims.csv")
    # rows added later from the committed tables (the law differences and rates) are on no page of the run
    claims = claims[claims["computed_from"] == "run"].set_index("claim")
    heading = "Claims (verdicts by the rule in `groupsparse.analysis.stats`)"
    header = markdown_header(page, heading)  # pages written before the power columns have fewer
    rows = markdown_rows(page, heading, len(header))
    assert len(rows) == len(claims)
    for cells in rows:
        claim, measured, low, high, verdict, power = (
            cells[header.index(k)] for k in ("claim", "measured", "low", "high", "verdict", "power")
        )
        r = claims.loc[claim]
        assert verdict == r["verdict"], claim
        for shown, column in ((measured, "measured"), (low, "low"), (high, "high"), (power, "power")):
            assert agrees(shown, r[column]), (claim, column, shown, r[column])


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda s: s.name)
def test_the_committed_predictions_are_those_the_results_page_shows(shipped):
    page = (REPO / f"{shipped.page}.md").read_text()
    p = pd.read_csv(REPO / shipped.tables / "predictions.csv")
    heading = "Out-of-sample predictions (fitted on the small-D runs alone)"
    header = markdown_header(page, heading)  # the population study's page has no step column (flow time)
    rows = markdown_rows(page, heading, len(header))
    assert len(rows) == len(p)
    for (_, r), shown in zip(p.iterrows(), rows):
        assert shown[header.index("law")] == r["law"]
        for column in ("d", "kappa", "D", "step", "rest", "rest_low", "rest_high"):
            if column in header:
                cell = shown[header.index(column)]
                assert agrees(cell, r[column]), (column, cell, r[column])


def test_the_committed_sample_complexity_is_what_the_results_page_shows():
    page = (REPO / "docs" / "results.md").read_text()
    sc = pd.read_csv(REPO / "docs" / "results" / "tables" / "sample_complexity.csv")
    for run in ("base", "digits"):
        block = page.split(f"## Transfer: {run}\n", 1)[1].split("samples needed for 90%", 1)[1].split("\n## ", 1)[0]
        for line in [x for x in block.splitlines() if x.startswith("| ")][1:]:
            method, at_90, _ = (c.strip() for c in line[2:-2].split(" | "))
            at = (sc["run"] == run) & (sc["method"] == method) & (sc["target_accuracy"] == 0.9)
            r = sc[at & (sc["downstream"] == "transfer")].iloc[0]  # the page's table: the transfer task
            n = at_90.split(" [")[0]
            assert (n == "> grid" and math.isinf(r["n_needed"])) or agrees(n, r["n_needed"]), (run, method)


# --- the generator's own behaviour


def copied_repo(tmp_path):
    """README, configs, schema-free copies of the committed tables: a repository the generator can read."""
    for name in ("README.md", "config.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    for s in SHIPPED:
        shutil.copytree(REPO / s.tables, tmp_path / s.tables)
        preregistered = (REPO / s.tables).parent / "preregistered"  # the predictions the flow's kappa_c is judged by
        if preregistered.is_dir():
            shutil.copytree(preregistered, (tmp_path / s.tables).parent / "preregistered")
    return tmp_path


def test_a_missing_claim_stops_the_generator_naming_it(tmp_path):
    root = copied_repo(tmp_path)
    path = root / "docs/population_gd/tables/claims.csv"
    claims = pd.read_csv(path)
    claims[claims["statement"] != "law_rate"].to_csv(path, index=False)
    with pytest.raises(FindingsError, match="0 claims with statement = 'law_rate'.*want one"):
        readme.findings_page(committed(root))


def test_the_findings_follow_the_typed_columns_not_the_text(tmp_path):
    """A changed interval changes the words (the shape's words come from what b's interval excludes), and
    text columns emptied change nothing: no claim's text is read."""
    root = copied_repo(tmp_path)
    before = readme.findings_page(committed(REPO))
    path = root / "docs/results/tables/claims.csv"
    claims = pd.read_csv(path)
    probe = (
        (claims["statement"] == "n_star_shape") & (claims["subject"] == "pretrained_probe") & (claims["target"] == 0.9)
    )
    assert probe.sum() == 1
    flat = lambda text: " ".join(text.split())  # noqa: E731
    assert "b = 0.015 [-0.282, 0.312] (grows with d, not detectably with D)" in flat(before)
    claims.loc[probe, "exponent_b_low"] = 0.05
    claims.to_csv(path, index=False)
    assert "b = 0.015 [0.050, 0.312] (grows with d, with D)" in flat(readme.findings_page(committed(root)))
    for s in SHIPPED:  # the text columns emptied: the same pages, the same README table
        path = root / s.tables / "claims.csv"
        c = pd.read_csv(REPO / s.tables / "claims.csv")
        c.assign(**{k: "" for k in ("claim", "theory", "prediction", "why", "config", "alternative")}).to_csv(
            path, index=False
        )
    studies = committed(root)
    assert readme.findings_page(studies) == before
    assert readme.answers_table(studies) == readme.answers_table(committed(REPO))


def test_the_protocol_counts_the_grid_points_from_the_table(tmp_path):
    """The paper's protocol against logistic regression counts the grid points' verdicts."""
    root = copied_repo(tmp_path)
    path = root / "docs/results/tables/claims.csv"
    claims = pd.read_csv(path)
    at = (
        (claims["statement"] == "sample_gap")
        & (claims["subject"] == "pretrained_finetune")
        & (claims["target"] == 0.9)
        & claims["run"].astype(str).str.startswith("scale_")
    )
    failing = int((claims.loc[at, "verdict"] == "does not hold").sum())
    assert failing >= 2
    claims.loc[at[at].index[0], "verdict"] = "holds"
    claims.to_csv(path, index=False)
    flat = lambda text: " ".join(text.split())  # noqa: E731
    assert f"`pretrained_finetune`: {failing} does not hold" in flat(readme.findings_page(committed(REPO)))
    assert f"`pretrained_finetune`: {failing - 1} does not hold, 1 holds" in flat(readme.findings_page(committed(root)))


def test_commit_tables_copies_the_runs_csv_tables_and_removes_those_it_did_not_make(tmp_path):
    results = tmp_path / "results/theorem"
    (results / "tables").mkdir(parents=True)
    (results / "tables" / "claims.csv").write_text("claim,verdict\na,holds\n")
    (results / "provenance.json").write_text(
        json.dumps({"study": {"study_name": "theorem"}, "git_commit": "abc", "cpu": {"model": "X"}, "versions": {}})
    )
    folder = tmp_path / "docs/theorem/tables"
    folder.mkdir(parents=True)
    (folder / "summary.csv").write_text("stale\n")
    assert commit_tables(results, folder) == ["claims"]
    assert (folder / "claims.csv").read_text() == "claim,verdict\na,holds\n"
    assert not (folder / "summary.csv").exists()
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["config"] == "configs/theorem.yaml" and prov["git_commit"] == "abc" and prov["cpu"] == {"model": "X"}
    made_by = yaml.safe_load((folder / "config.yaml").read_text())
    assert made_by == {"study_name": "theorem"}  # the config that made the tables, beside them


def test_the_transfer_answer_quotes_the_config_that_made_its_tables(tmp_path):
    """The shipped config may move on (a finer n grid) after its tables were committed: the answer still
    quotes the grid and targets of the config beside the tables."""
    from groupsparse.findings import transfer

    root = copied_repo(tmp_path)
    before = transfer.context(committed(root))
    config = yaml.safe_load((root / "config.yaml").read_text())
    config["scaling"]["transfer"]["sizes"] = [4, 6, 8]
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    after = transfer.context(committed(root))
    assert after["sizes"] == before["sizes"] and after["sizes"][-1] == 2048


def test_the_protocol_is_stated_under_both_readings_of_v():
    """Kept (our reading) and reset to 0, each with its n* on the base task from the committed table."""
    page = " ".join((REPO / "docs" / "findings.md").read_text().split())
    sc = pd.read_csv(REPO / "docs/results/tables/sample_complexity.csv")
    at = sc[(sc["run"] == "base") & (sc["downstream"] == "transfer") & (sc["target_accuracy"] == 0.9)]
    n = {r["method"]: f"{r['n_needed']:.0f} [{r['ci_low']:.0f}, {r['ci_high']:.0f}]" for _, r in at.iterrows()}
    assert f"it needs {n['pretrained_finetune']} with v kept, {n['pretrained_finetune_v0']} with v reset to 0" in page
    assert f"against `logreg`'s {n['logreg']}" in page


def test_the_other_cpu_paragraph_names_what_differs(tmp_path):
    """The rerun on another CPU is compared claim by claim and n* by n*: identical tables give "the same
    verdict on both"; a changed verdict and a changed n* are named with both tables' values."""
    from groupsparse.findings import cpus
    from groupsparse.findings.tables import Tables

    same = tmp_path / "same"
    shutil.copytree(REPO / "docs/results/tables", same)
    a = Tables(REPO / "docs/results/tables", "config.yaml", "docs/results/tables")
    claims, n = cpus.compared(a, Tables(same, "config.yaml", "same"))
    assert len(claims) == len(a.table("claims")) and (claims["verdict_a"] == claims["verdict_b"]).all()
    assert len(n) == len(a.table("sample_complexity"))

    changed = tmp_path / "changed"
    shutil.copytree(REPO / "docs/results/tables", changed)
    c = pd.read_csv(changed / "claims.csv")
    row = c.index[c["verdict"] == "holds"][0]
    c.loc[row, "verdict"] = "does not hold"
    c.to_csv(changed / "claims.csv", index=False)
    s = pd.read_csv(changed / "sample_complexity.csv")
    hit = s.index[s["reached_on_grid"].astype(bool)][0]
    s.loc[hit, ["n_needed", "ci_low", "ci_high"]] = s.loc[hit, ["n_needed", "ci_low", "ci_high"]] * 50
    s.to_csv(changed / "sample_complexity.csv", index=False)
    claims, n = cpus.compared(a, Tables(changed, "config.yaml", "changed"))
    differ = claims[claims["verdict_a"] != claims["verdict_b"]]
    assert list(differ["claim"]) == [c.loc[row, "claim"]]
    ratio = n["n_needed_b"] / n["n_needed_a"]
    assert (ratio.round(6) == 50).sum() == 1
    from groupsparse.findings.tables import Shipped

    monkey = pytest.MonkeyPatch()
    monkey.setattr(cpus, "SHIPPED", (Shipped("default", "config.yaml", "docs/results"),
                                     Shipped("other", "config.yaml", "changed", same_as="default")))  # fmt: skip
    try:
        (run,) = cpus.context({"default": a, "other": Tables(changed, "config.yaml", "changed")})
        (plain,) = cpus.context({"default": a, "other": Tables(same, "config.yaml", "same")})
    finally:
        monkey.undo()
    assert [d["claim"] for d in run["differ"]] == [cpus._short(c.loc[row, "claim"])]
    assert run["differ"][0]["b"] == "does not hold"
    assert run["largest"]["method"] == s.loc[hit, "method"] and run["largest"]["run"] == s.loc[hit, "run"]
    assert not run["largest"]["overlap"] and plain["differ"] == []


def test_the_ablations_table_has_a_row_per_ablation_run_read_from_the_pretraining_summary(tmp_path):
    """One row per ablation run of the committed pretrain_summary.csv, the baseline first; a changed
    value in that table changes its cell."""
    root = copied_repo(tmp_path)
    path = root / "docs/results/tables/pretrain_summary.csv"
    pre = pd.read_csv(path)
    runs = pre.loc[pre["role"] == "ablation", "run"].tolist()
    shown = lambda text: re.findall(r"^\| `(ablation_\w+)` \|.*$", text, flags=re.M)  # noqa: E731
    before = readme.pages(committed(REPO), REPO)["docs/ablations.md"]
    assert shown(before) == ["ablation_none"] + sorted(r for r in runs if r != "ablation_none")
    pre.loc[pre["run"] == "ablation_iid_batches", "attention_min_on_relevant_mean"] = 0.123456
    pre.to_csv(path, index=False)
    after = readme.pages(committed(root), root)["docs/ablations.md"]
    row = lambda text: next(line for line in text.splitlines() if line.startswith("| `ablation_iid_batches` |"))  # noqa: E731
    assert row(after).split(" | ")[4] == "0.123" != row(before).split(" | ")[4]


def test_the_studies_page_has_a_row_per_shipped_study_read_from_its_provenance(tmp_path):
    """docs/studies.md names every shipped study once, with the CPU and commit of its committed
    provenance: a changed provenance changes its row and no other."""
    root = copied_repo(tmp_path)
    rows = lambda text: {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}  # noqa: E731
    before = rows(readme.studies_page(REPO))
    assert set(before) == {"study"} | {s.name for s in SHIPPED}
    path = root / "docs/population_gd/tables/provenance.json"
    prov = json.loads(path.read_text())
    prov["git_commit"], prov["cpu"] = "abcdef0123", {"model": "A test CPU", "isa": ["sse4_2"]}
    path.write_text(json.dumps(prov))
    after = rows(readme.studies_page(root))
    assert after["population_gd"].endswith("| A test CPU (sse4_2) | abcdef0 |")
    assert [k for k in before if before[k] != after[k]] == ["population_gd"]


def test_the_training_table_reads_each_variants_verdicts_from_its_tables(tmp_path):
    """Question 2's table: a verdict changed in a practitioners' slice moves its D to the other column."""
    root = copied_repo(tmp_path)
    path = root / "docs/practitioners_D16/tables/claims.csv"
    claims = pd.read_csv(path)
    at = (claims["statement"] == "reaches_level") & (claims["variant"] == "separate_etaD") & (claims["D"] == 16)
    assert at.sum() == 1 and claims.loc[at, "verdict"].iloc[0] == "does not hold"
    row = lambda text: next(x for x in text.splitlines() if "(`separate_etaD`) |" in x)  # noqa: E731
    assert row(readme.findings_page(committed(REPO))).endswith("| 3 | – | 16, 24 | – |")
    claims.loc[at, "verdict"] = "holds"
    claims.to_csv(path, index=False)
    assert row(readme.findings_page(committed(root))).endswith("| 3 | 16 | 24 | – |")


def test_runs_at_two_commits_are_compared_under_the_current_verdict_rule(tmp_path):
    """A table written before a directional 'holds' kept its verdict whatever its power shows 'undecided
    (power p)' where a newer one shows 'holds' on the same interval: not a difference between the CPUs. A
    failure to reject (an at-most bound) vetoed for its power stays 'undecided' under the current rule too."""
    from groupsparse.analysis.power import verdict_now
    from groupsparse.findings import cpus
    from groupsparse.findings.tables import Tables

    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(REPO / "docs/results/tables", old)
    shutil.copytree(REPO / "docs/results/tables", new)
    c = pd.read_csv(new / "claims.csv")
    prediction = c["prediction"].astype(str)
    directional = c.index[(c["verdict"] == "holds") & prediction.str.startswith(">")][:3]
    bound = c.index[(c["verdict"] == "consistent") & prediction.str.startswith("<=")][:2]
    assert len(directional) and len(bound)
    # the older rule's table: both kinds turned 'undecided' for a low power
    was = c.copy()
    was.loc[[*directional, *bound], "verdict"] = "undecided"
    was.loc[[*directional, *bound], "power_veto"] = True  # the power turned them undecided (a typed column)
    was.loc[[*directional, *bound], "why"] = "undecided (power 0.30 against an alternative, plug-in); " + c.loc[
        [*directional, *bound], "why"
    ].astype(str)
    was.to_csv(old / "claims.csv", index=False)
    now = was.apply(verdict_now, axis=1)
    assert (now[directional] == "holds").all() and (now[bound] == "undecided").all()
    claims, _ = cpus.compared(Tables(old, "config.yaml", "old"), Tables(new, "config.yaml", "new"))
    differ = claims[claims["verdict_a"] != claims["verdict_b"]]
    assert sorted(differ["claim"]) == sorted(c.loc[bound, "claim"])  # only the bounds: still undecided there


def test_a_simulated_power_far_from_the_plug_in_shows_both():
    """The verdict's power is the pipeline simulation's; where the plug-in differs by more than 0.1 the reader
    sees both, so a plug-in that flatters (or undersells) a design is not hidden."""
    from groupsparse.findings.render import pw as power

    apart = {"power": 0.07, "power_pipeline": 0.07, "power_plugin": 0.34}
    assert power(apart) == "power 0.07 (simulated; plug-in 0.34)"
    close = {"power": 0.88, "power_pipeline": 0.88, "power_plugin": 0.93}
    assert power(close) == "power 0.88"
    plug_in_only = {"power": 0.5, "power_pipeline": math.nan, "power_plugin": 0.5}
    assert power(plug_in_only) == "power 0.50"
    assert power({"power": math.nan}) == "power n/a"


def test_a_censored_level_after_the_last_measured_one_bounds_the_local_slope_from_below():
    """The flow study's committed by-D table: where tau_c is censored at a level (its runs' end, a lower bound),
    the local slope of log tau_c on log D from the last measured level to it is a lower bound, computed from the
    run's end; every other slope joins two measured levels."""
    from groupsparse.findings.tables import Tables
    from groupsparse.findings.theorem import TARGET_QUANTITY, local_slopes

    t = Tables(REPO / "docs/population/tables", "configs/population.yaml", "docs/population/tables")
    by_D = pd.read_csv(REPO / "docs/population/tables/theorem_by_D.csv", keep_default_na=False)
    for c in (0.02, 0.05, 0.1):
        rows = by_D[(by_D["algorithm"] == "flow") & (by_D["quantity"] == TARGET_QUANTITY.format(c=c))]
        rows = rows[rows["group"] == ""]  # the grid's runs, not the flow checks' (group check:...) at the same D
        rows = rows[rows["value"] != ""].assign(value=lambda r: r["value"].astype(float)).sort_values("D")
        assert rows["D"].is_unique
        censored = rows["censored"].astype(str) == "True"
        slopes = local_slopes(t, c)
        assert all(not s["at_least"] for s in slopes[:-1])
        reached = rows[~censored]
        after = rows[censored & (rows["D"] > reached["D"].max())]
        assert bool(slopes and slopes[-1]["at_least"]) == bool(len(after))
        if len(after):
            (a, b), (x, y) = (
                (reached["D"].iloc[-1], after["D"].iloc[0]),
                (reached["value"].iloc[-1], after["value"].iloc[0]),
            )
            assert slopes[-1]["from"] == a and slopes[-1]["to"] == b
            assert slopes[-1]["slope"] == pytest.approx(math.log(y / x) / math.log(b / a))
