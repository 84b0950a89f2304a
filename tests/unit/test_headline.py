"""Figures a newcomer reads: the README's one figure per question made from the committed tables alone,
titles that fit their panels, words for the tables' code names, no "nan" and no "no data" anywhere, no
censored value drawn as a number, and no committed figure of a section its study did not run."""

from __future__ import annotations

import re
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from schema_settings import settings
from test_scaling import synthetic_trajectories

from groupsparse.analysis.claims import analyse
from groupsparse.analysis.scaling_laws import REACHED_AT_START
from groupsparse.figures import headline, pyplot, scaling
from groupsparse.figures.sample_complexity import _interval
from groupsparse.figures.theorem import levels_from_table, out_of_sample_figure
from groupsparse.figures.words import method_label, variant_label

from conftest import REPO

DOCS = REPO / "docs"
NAN = re.compile(r"\bnan\b", re.IGNORECASE)


def texts(fig) -> list[str]:
    """Every text a reader sees: titles, labels, tick labels, legends, annotations."""
    fig.canvas.draw()
    found = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_visible()]
    return [t.replace("\u00a0", " ") for t in found if t]


def assert_readable(fig) -> None:
    """No 'nan', no 'no data', and every panel title within its panel's width (10% slack)."""
    shown = texts(fig)
    assert not [t for t in shown if NAN.search(t)], [t for t in shown if NAN.search(t)]
    assert not [t for t in shown if "no data" in t.lower()]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        title = ax.title
        if ax.axison and title.get_text():
            assert title.get_window_extent(renderer).width <= 1.1 * ax.get_window_extent(renderer).width, (
                title.get_text()
            )


@pytest.fixture(scope="module")
def committed_tables(tmp_path_factory):
    """The committed studies' tables alone (no figure, no results/): what a fresh checkout has."""
    root = tmp_path_factory.mktemp("docs")
    for tables in DOCS.glob("*/tables"):
        shutil.copytree(tables, root / tables.parent.name / "tables")
    return root


def test_each_question_has_a_headline_figure_made_from_the_committed_tables_alone(committed_tables, tmp_path):
    paths = headline.write_all(committed_tables, tmp_path)
    assert [p.name for p in paths] == [f"question{i}.png" for i in (1, 2, 3, 4)]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    # the same tables give the same bytes (the committed figures regenerate identically)
    again = headline.write_all(committed_tables, tmp_path / "again")
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in again]


def test_the_headline_figures_say_nothing_a_reader_cannot_use(committed_tables):
    figures = headline.figures(committed_tables)
    assert set(figures) == {"question1", "question2", "question3", "question4"}
    for question, fig in figures.items():
        assert_readable(fig)
        shown = " ".join(texts(fig))
        assert f"Question {question[-1]}." in shown
        # words, not the tables' code names
        for code in ("pretrained_frozen_W", "attention_on_relevant", "cos_v1_vstar", "plain512", "zero_etaD"):
            assert code not in shown, (question, code)
        pyplot().close(fig)


def test_the_committed_headline_figures_are_the_tables_figures(committed_tables, tmp_path):
    """docs/figures/question*.png are what `groupsparse plot --headline` makes from the committed tables."""
    from PIL import Image

    from groupsparse.cli import main
    from groupsparse.figures.headline import png_metadata

    assert main(["plot", "--headline", "--docs", str(committed_tables), "--outdir", str(tmp_path)]) == 0
    for made in sorted(tmp_path.glob("question*.png")):
        committed = DOCS / "figures" / made.name
        drawn_by = Image.open(committed).info.get("Software")
        if drawn_by != png_metadata()["Software"]:  # another matplotlib draws other bytes from the same tables
            pytest.skip(f"{committed} was drawn by {drawn_by}; regenerate: groupsparse plot --headline")
        assert made.read_bytes() == committed.read_bytes(), f"{made.name}: regenerate: groupsparse plot --headline"


def test_question1_takes_a_new_study_up_to_D_256(committed_tables, tmp_path):
    """The law figure is general: a study with levels and predictions at D = 128 and 256 shows them."""
    folder = tmp_path / "population_large" / "tables"
    shutil.copytree(committed_tables / "population_gd" / "tables", folder)
    by_D = pd.read_csv(folder / "theorem_by_D.csv")
    grid = by_D[by_D["group"].isna() & (by_D["D"] == 48)]
    big = pd.concat([grid.assign(D=D, value=grid["value"] * 48 / D) for D in (128, 256)])
    pd.concat([by_D, big]).to_csv(folder / "theorem_by_D.csv", index=False)
    pred = pd.read_csv(folder / "predictions.csv")
    pd.concat([pred, pred[pred["D"] == 48].assign(D=256)]).to_csv(folder / "predictions.csv", index=False)
    fig = headline.question1_figure([headline.read_study(folder.parent)])
    ticks = {t.get_text() for ax in fig.axes for t in ax.get_xticklabels()}
    assert {"128", "256"} <= ticks
    assert_readable(fig)
    pyplot().close(fig)


def test_the_out_of_sample_titles_fit_and_name_the_runs_in_words():
    """The committed population study's figure: once cut mid-word ("... D=8: 0.5, D=)") with rows named
    grid, plain2048, plain512; now every title fits and says what ran, the code name beside the words."""
    tables = DOCS / "population_gd" / "tables"
    config = yaml.safe_load((tables / "config.yaml").read_text())
    kappas = config["scaling"]["analysis"]["kappas"]
    measured = levels_from_table(pd.read_csv(tables / "theorem_by_D.csv"), kappas)
    fig = out_of_sample_figure(measured, pd.read_csv(tables / "predictions.csv"), config)
    assert_readable(fig)
    titles = [ax.get_title().replace("\u00a0", " ") for ax in fig.axes if ax.get_title()]
    assert len(titles) == 9
    assert all("population GD" in t for t in titles[:3]) and all("(plain2048)" in t for t in titles[3:6])
    assert not any(t.startswith("grid") for t in titles)
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "prediction, 95% interval" in legend and "measured beyond the fit" in legend
    pyplot().close(fig)


def test_a_censored_crossing_is_a_marker_at_its_bound_never_a_number():
    """A target reached before the first record has no time (its flow time was drawn at 1e-12 once, the
    axis spanning 1e-12 to 1e4): now a marker at the panel's floor, named in the legend."""
    traj = synthetic_trajectories(3.0, D_grid=(4, 8, 16), seeds=2)
    first = (traj["D"] == 4) & (traj["step"] == 0)
    traj.loc[first, "attention_min_on_relevant"] = 0.99  # D = 4 starts above every target
    analysis = analyse(traj, None, settings(n_boot=50, target_c=(0.1,)))
    records = [r for r in analysis.fits if r.analysis == "convergence_time" and "c" in r.group]
    assert (records[0].points["reason"].astype(str).str.startswith(REACHED_AT_START)).any()
    fig = scaling.convergence_figure(records)
    ax = next(a for a in fig.axes if a.has_data())
    low = ax.get_ylim()[0]
    assert low > 1e-3, ax.get_ylim()  # no point at 1e-12
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("reached before the first record") for t in legend), legend
    assert_readable(fig)
    pyplot().close(fig)


def test_a_fit_without_a_number_quotes_none():
    """Every level censored: the joint fit's coefficients are NaN; the title once read 'a = nan [nan, nan]'."""
    nan = SimpleNamespace(name="log d", value=np.nan, low=np.nan, high=np.nan)
    rec = SimpleNamespace(tests=[SimpleNamespace(coefficient=nan)])
    assert _interval(rec, "log d", "a") == ""
    half = SimpleNamespace(name="log d", value=0.5, low=np.nan, high=1.0)
    assert _interval(SimpleNamespace(tests=[SimpleNamespace(coefficient=half)]), "log d", "a") == "a = 0.50 [?, 1.00]"


def test_code_names_become_words_from_the_configs_settings():
    config = yaml.safe_load((DOCS / "practitioners_D16" / "tables" / "config.yaml").read_text())
    assert variant_label("separate_etaD", config) == (
        "autograd GD, separate W_K, W_Q, random start N(0, 0.01^2), eta = min(0.5, 6/D) (separate_etaD)"
    )
    assert variant_label("", config) == "reference runs: batch GD, batch 512, eta = 0.5"
    assert variant_label("check:batch512", config) == "batch-size check: batch 512 (batch512)"
    assert variant_label("batch128_eta0p5", config) == "step-size check: eta x 0.5, batch 128 (batch128_eta0p5)"
    assert method_label("pretrained_frozen_W") == "pretrained, W frozen, v fine-tuned (pretrained_frozen_W)"
    assert variant_label("not_in_the_config", config) == "not in the config (not_in_the_config)"


def study_folders():
    return sorted(p.parent.parent for p in DOCS.glob("*/tables/config.yaml"))


@pytest.mark.parametrize("folder", study_folders(), ids=lambda p: p.name)
def test_no_committed_figure_of_a_section_its_study_did_not_run(folder):
    """A page shows the scaling figures its study has data for (io.tables.scaling_figures), and no
    figure of a pretraining-only placeholder task (a 100-step run that learns nothing)."""
    import copy

    from groupsparse.config.specs import ConfigError
    from groupsparse.figures.runs import placeholder
    from groupsparse.io.tables import SCALING_FIGURES, scaling_figures
    from groupsparse.study.runs import expand

    config = yaml.safe_load((folder / "tables" / "config.yaml").read_text())
    try:
        runs = expand(copy.deepcopy(config))
    except (ConfigError, KeyError, ValueError) as exc:  # a config from before a schema change
        pytest.skip(f"{folder.name}: its config no longer expands ({exc})")
    made = {f"scaling_{name}.png" for name in scaling_figures(runs)}
    # the figures the code makes (an older snapshot may keep one it no longer makes, with its data)
    committed = {p.name for p in folder.glob("scaling_*.png")} & {f"scaling_{n}.png" for n in SCALING_FIGURES}
    assert committed <= made, committed - made
    for name, run in runs.items():
        if placeholder(run.spec, config):
            assert not list(folder.glob(f"{name}_*.png")), name


def test_a_pretraining_only_placeholder_task_says_what_it_is():
    """The population study's named task is 100 steps that learn nothing: its figures' title says so."""
    import copy

    from groupsparse.figures.runs import describe
    from groupsparse.study.runs import expand

    config = yaml.safe_load((DOCS / "population_gd" / "tables" / "config.yaml").read_text())
    runs = expand(copy.deepcopy(config))
    title = describe(runs["base"].spec, "base", config)
    assert "100 steps" in title and "not a result of the study" in title
    default = yaml.safe_load((DOCS / "results" / "tables" / "config.yaml").read_text())
    assert "not a result" not in describe(expand(copy.deepcopy(default))["base"].spec, "base", default)
