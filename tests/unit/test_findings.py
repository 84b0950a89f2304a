"""The README's findings section is generated from the committed tables (docs/*/tables/*.csv):
regenerating it gives the README's bytes, every number in it is a committed table's value (or its
config's) at the precision shown, the committed tables agree with the results pages that show them,
and a finding whose claim is missing stops the generator naming the claim."""

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
    return readme.current((REPO / "README.md").read_text())


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


def test_the_readme_findings_regenerate_byte_identically_from_the_committed_tables():
    assert readme.section(committed(REPO), REPO) == section_text(), "run `groupsparse snapshot --findings-only`"


def test_the_pages_the_findings_name_regenerate_byte_identically():
    pages = readme.pages(committed(REPO), REPO)
    assert list(pages) == ["docs/studies.md", "docs/ablations.md"]
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


def test_every_question_and_bullet_names_its_tables_and_config():
    text = section_text().split("\n\n", 2)[2]  # after the marker and the introduction
    parts = [p for p in re.split(r"\n(?=- |\*\*\d\. )|\n\n", text) if p.startswith(("- ", "**"))]
    assert len(parts) >= 10
    for part in parts:
        assert re.search(r"\(from\s+\[`\w+\.csv`\]\(docs/\w+/tables/\w+\.csv\)", part), part[:80]
        assert re.search(r"of\s+`(config\.yaml|configs/(slices/)?\w+\.yaml)`", part), part[:80]


def test_no_run_history_on_the_front_page():
    text = section_text().lower()
    assert not [w for w in ("realisation", "earlier", "before its", "session") if w in text]


def test_the_d64_slice_predicts_what_was_preregistered():
    """The README says the slice's fit levels rerun give the committed predictions bit for bit."""
    slice_ = pd.read_csv(REPO / "docs/population_D64/tables/predictions.csv")
    pre = pd.read_csv(REPO / "docs/population/preregistered/predictions.csv")
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
    return tmp_path


def test_a_missing_claim_stops_the_generator_naming_it(tmp_path):
    root = copied_repo(tmp_path)
    path = root / "docs/theorem/tables/claims.csv"
    claims = pd.read_csv(path)
    gone = "autograd_float32 training reaches the theorem's level"
    claims[~claims["claim"].str.startswith(gone)].to_csv(path, index=False)
    with pytest.raises(FindingsError, match=f"{gone}.*want one"):
        readme.section(committed(root), root)


def test_the_findings_follow_the_tables(tmp_path):
    """A changed verdict changes the text: the section is read from the tables, not typed."""
    root = copied_repo(tmp_path)
    path = root / "docs/results/tables/claims.csv"
    claims = pd.read_csv(path)
    probe = claims["claim"].str.startswith("pretrained_probe: n* grows no faster than d + D") & claims[
        "claim"
    ].str.contains("accuracy 0.9")
    claims.loc[probe, "verdict"] = "inconclusive"
    claims.to_csv(path, index=False)
    before = readme.section(committed(REPO), REPO)
    after = readme.section(committed(root), root)
    flat = lambda text: " ".join(text.split())  # noqa: E731
    assert "a + b <= 1) for `pretrained_frozen_W` and `pretrained_probe` (power" in flat(before)
    assert "a + b <= 1) for `pretrained_frozen_W` (power" in flat(after)
    assert "`pretrained_probe`: n* grows like d + D" in flat(before)  # the shape named only where consistent
    assert "`pretrained_probe`: n* grows like d + D" not in flat(after)
    assert readme.write(root) and readme.current((root / "README.md").read_text()) == after
    assert not readme.write(root)


def test_the_protocol_verdict_counts_the_grid_points_from_the_table(tmp_path):
    """The paper's protocol sentence counts the grid points where 'needs fewer samples than logreg' fails."""
    root = copied_repo(tmp_path)
    path = root / "docs/results/tables/claims.csv"
    claims = pd.read_csv(path)
    text = claims["claim"].astype(str)
    at = text.str.startswith("pretrained_finetune needs fewer samples than logreg for accuracy 0.9 (scale_")
    failing = int((claims.loc[at, "verdict"] == "does not hold").sum())
    assert failing >= 1
    claims.loc[at & (claims["verdict"] == "does not hold"), "verdict"] = "holds"
    claims.loc[at[at].index[0], "verdict"] = "does not hold"
    claims.to_csv(path, index=False)
    flat = lambda text: " ".join(text.split())  # noqa: E731
    before = flat(readme.section(committed(REPO), REPO))
    after = flat(readme.section(committed(root), root))
    assert f"does not hold at {failing} of the {int(at.sum())} grid points" in before
    assert f"does not hold at 1 of the {int(at.sum())} grid points" in after


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
    before = transfer.finding(committed(root))
    config = yaml.safe_load((root / "config.yaml").read_text())
    config["scaling"]["transfer"]["sizes"] = [4, 6, 8]
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    grid = "n = 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 1024, 1448 and 2048"
    assert transfer.finding(committed(root)) == before and grid in " ".join(before.split())


def test_the_transfer_answer_states_the_protocol_verdict_where_the_tables_have_it(tmp_path):
    from groupsparse.findings import transfer

    root = copied_repo(tmp_path)
    path = root / "docs/results/tables/claims.csv"
    # tables without the protocol claims (as committed before they existed) say so
    claims = pd.read_csv(path)
    claims = claims[~claims["analysis"].astype(str).str.startswith("protocol")]
    claims.to_csv(path, index=False)
    assert "not tested in these tables" in transfer.finding(committed(root))
    kept, reset = "pretrained_finetune", "pretrained_finetune_v0"
    rows = [
        {
            "claim": f"{kept} with v reset to 0 ({reset}) needs fewer samples for accuracy 0.9 (base, transfer)",
            "prediction": "> 0",
            "measured": 3.1,
            "low": 2.2,
            "high": 4.0,
            "verdict": "holds",
            "power": 0.97,
            "alternative": "a factor 2 fewer samples, log 2 (value 0.693)",
        },
        {
            "claim": f"cos(v1, new v*) after fine-tuning at n = 4096: higher from v = 0 ({reset}) than from the "
            f"pretrained v ({kept}) (base, transfer)",
            "prediction": "> 0",
            "measured": 0.41,
            "low": 0.3,
            "high": 0.52,
            "verdict": "holds",
            "power": 1.0,
            "alternative": "a difference of 0.1 (value 0.1)",
        },
        {
            "claim": f"{kept}: share of cross-validated step sizes at an edge of the eta_rel grid (base, transfer)",
            "measured": 0.62,
            "verdict": "descriptive",
        },
    ]
    pd.concat([claims, pd.DataFrame(rows)], ignore_index=True).to_csv(path, index=False)
    # a summary from before it carried the read-out alignment (older tables)
    summary_path = root / "docs/results/tables/summary.csv"
    summary = pd.read_csv(summary_path)
    summary.drop(columns=[c for c in summary.columns if "cos_v1" in c]).to_csv(summary_path, index=False)
    text = " ".join(transfer.finding(committed(root)).split())
    assert "v reset to 0, log(n*_kept / n*_reset) at 90%: 3.10 [2.20, 4.00]: holds, power 0.97" in text, text
    assert "reset minus kept" in text and "0.62 of the fits" in text and "not tested" not in text
    assert "over n" not in text  # a summary without the read-out alignment (older tables): no trajectory
    # with the summary's alignment columns: the trajectory at the first n, every factor 16 and the last
    rows = (summary["run"] == "base") & (summary["downstream"] == "transfer")
    summary["mean_cos_v1_new"] = float("nan")
    summary["mean_cos_v1_old"] = float("nan")
    for method, shift in ((kept, 0.0), (reset, 0.5)):
        at = rows & (summary["method"] == method)
        summary.loc[at, "mean_cos_v1_new"] = [min(0.999, 0.1 + shift + 1e-4 * n) for n in summary.loc[at, "n"]]
        summary.loc[at, "mean_cos_v1_old"] = 0.25
    summary.to_csv(summary_path, index=False)
    text = " ".join(transfer.finding(committed(root)).split())
    assert "cos(v1, new v*) of the fitted read-out, kept / reset: n = 4: 0.100 / 0.600, n = 64: 0.106 / 0.606, " in text
    assert (
        "n = 1024: 0.202 / 0.702, n = 4096: 0.510 / 0.999 (kept v1's cos with the pretraining v* at the same n:" in text
    )


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
        text = cpus.paragraph({"default": a, "other": Tables(changed, "config.yaml", "changed")})
        plain = cpus.paragraph({"default": a, "other": Tables(same, "config.yaml", "same")})
    finally:
        monkey.undo()
    assert cpus._short(c.loc[row, "claim"]) in text and "does not hold" in text
    assert f"{s.loc[hit, 'method']} on {s.loc[hit, 'run']}" in text and "do not overlap" in text
    assert "Every claim has the same verdict on both." in plain


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
    path = root / "docs/population/tables/provenance.json"
    prov = json.loads(path.read_text())
    prov["git_commit"], prov["cpu"] = "abcdef0123", {"model": "A test CPU", "isa": ["sse4_2"]}
    path.write_text(json.dumps(prov))
    after = rows(readme.studies_page(root))
    assert after["population"].endswith("| A test CPU (sse4_2) | abcdef0 |")
    assert [k for k in before if before[k] != after[k]] == ["population"]


def test_the_step_size_contrast_counts_the_practitioners_verdicts_from_their_tables(tmp_path):
    """Question 2's sentence on the two step sizes counts the practitioners' slices' verdicts at each D
    where both ran: a verdict changed in the committed claims changes the counts."""
    root = copied_repo(tmp_path)
    path = root / "docs/practitioners_D16/tables/claims.csv"
    claims = pd.read_csv(path)
    level = claims["claim"].str.contains("training reaches the theorem's level") & claims["claim"].str.endswith(
        "(D = 16)"
    )
    fast = level & claims["claim"].str.contains("_eta05 ")
    slow = level & claims["claim"].str.contains("_etaD ")
    assert fast.sum() == slow.sum() == 4
    flat = lambda text: " ".join(text.split())  # noqa: E731
    before = flat(readme.section(committed(REPO), REPO))
    holding = int((claims.loc[fast, "verdict"] == "holds").sum())
    assert f"at D = 16, eta = 0.5: {holding} hold" in before
    claims.loc[fast, "verdict"] = "holds"
    claims.to_csv(path, index=False)
    after = flat(readme.section(committed(root), root))
    names = sorted(claims.loc[fast, "claim"].str.split(" ").str[0])  # the variants, in the table's order
    assert f"at D = 16, eta = 0.5: 4 hold ({', '.join(f'`{n}`' for n in names)}); eta(D)" in after


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


def test_the_tuned_adam_is_chosen_by_the_configs_rule_from_the_table(tmp_path):
    """configs/practitioners.yaml: of the Adam variants the tuned one has the lower mean eval loss at D = 8,
    read from the committed claims; swapping the two losses swaps the choice."""
    root = copied_repo(tmp_path)
    path = root / "docs/practitioners_small_D/tables/claims.csv"
    claims = pd.read_csv(path)
    loss = {
        n: claims.index[claims["claim"] == f"{n} training at D = 8: eval loss at the last step (d = 10)"][0]
        for n in ("adam_0p001", "adam_0p01")
    }
    values = {n: float(claims.loc[i, "measured"]) for n, i in loss.items()}
    best = min(values, key=values.get)
    flat = lambda text: " ".join(text.split())  # noqa: E731
    assert f"the lower mean eval loss at D = 8): `{best}`" in flat(readme.section(committed(REPO), REPO))
    claims.loc[loss["adam_0p001"], "measured"], claims.loc[loss["adam_0p01"], "measured"] = (
        values["adam_0p01"],
        values["adam_0p001"],
    )
    claims.to_csv(path, index=False)
    other = next(n for n in values if n != best)
    assert f"the lower mean eval loss at D = 8): `{other}`" in flat(readme.section(committed(root), root))


def test_a_simulated_power_far_from_the_plug_in_shows_both():
    """The verdict's power is the pipeline simulation's; where the plug-in differs by more than 0.1 the reader
    sees both, so a plug-in that flatters (or undersells) a design is not hidden."""
    from groupsparse.findings.tables import power

    apart = {"power": 0.07, "power_pipeline": 0.07, "power_plugin": 0.34}
    assert power(apart) == "power 0.07 (simulated; plug-in 0.34)"
    close = {"power": 0.88, "power_pipeline": 0.88, "power_plugin": 0.93}
    assert power(close) == "power 0.88"
    plug_in_only = {"power": 0.5, "power_pipeline": math.nan, "power_plugin": 0.5}
    assert power(plug_in_only) == "power 0.50"
    assert power({"power": math.nan}) == "power n/a"
