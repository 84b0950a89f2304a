"""Figures a reader can use: legends name methods as the tables do, no figure has more than 12
panels, and no panel shows only censored markers (it is named in the title instead)."""

from __future__ import annotations

import pandas as pd
from schema_settings import settings
from test_scaling import synthetic_trajectories

from groupsparse.analysis.claims import analyse
from groupsparse.figures import pyplot, runs, scaling
from groupsparse.figures.words import method_words


def drawn_panels(fig) -> list:
    return [ax for ax in fig.axes if ax.axison and (ax.collections or ax.lines)]


def test_convergence_is_split_with_at_most_12_panels_and_no_all_censored_panel():
    # 4 levels of d x (3 thresholds + 3 theorem targets); d = 40 never trains long enough for 0.99
    parts = [synthetic_trajectories(3.0, D_grid=(4, 8, 16), seeds=2, d=d, seed=d) for d in (5, 10, 20)]
    slow = synthetic_trajectories(3.0, D_grid=(4, 8, 16), seeds=2, d=40, c=50.0, budget=300, seed=40)
    a = analyse(
        pd.concat(parts + [slow]),
        None,
        settings(n_boot=50, loss_target=None, thresholds=(0.5, 0.9, 0.99), target_c=(0.1, 0.125, 0.15)),
    )
    records = [r for r in a.fits if r.analysis == "convergence_time"]
    assert len(records) > 12  # the old single figure would have had them all
    censored_only = [r for r in records if r.points["censored"].astype(bool).all()]
    assert censored_only  # the slow d = 40 runs: at least one panel of only censored markers
    for descriptive in (False, True):
        fig = scaling.convergence_figure(records, descriptive=descriptive)
        panels = drawn_panels(fig)
        assert 0 < len(panels) <= scaling.MAX_PANELS
        title = fig._suptitle.get_text().replace("\u00a0", " ")
        for r in censored_only:
            if ("c" not in r.group) == descriptive:
                assert "only censored seeds not drawn" in title and "d = 40" in title
        pyplot().close(fig)


def test_transfer_legend_names_each_method_once_as_the_tables_do(tmp_path, monkeypatch):
    methods = ["pretrained_finetune", "logreg", "mlp"]
    rows = [
        {
            "downstream": down,
            "method": m,
            "n": n,
            "mean_test_accuracy": 0.6 + 0.01 * i,
            "ci_low": 0.55,
            "ci_high": 0.7,
            "n_seeds_not_ok": 0,
        }
        for down in ("transfer", "negative_control")
        for i, m in enumerate(methods)
        for n in (8, 32)
    ]
    captured = {}
    monkeypatch.setattr(runs, "save", lambda fig, outdir, name: captured.setdefault(name, fig) and [])
    runs.transfer_accuracy(pd.DataFrame(rows), "t", tmp_path)
    legend_texts = [t.get_text() for leg in captured["transfer_accuracy"].legends for t in leg.get_texts()]
    # each method once, in words with the tables' name beside it, and the chance line
    assert legend_texts == [f"{method_words(m)} ({m})" for m in methods] + ["chance (0.5)"]


def test_a_study_gets_only_the_scaling_figures_it_has_data_for(tmp_path):
    """No "no data" panels: sample complexity and online error need transfer at the scaling levels, the
    ablations figure ablation runs; write_all draws the names it is given."""
    from groupsparse.commands.estimate import load_study
    from groupsparse.io.tables import SCALING_FIGURES, scaling_figures

    from conftest import REPO

    assert scaling_figures(load_study(str(REPO / "config.yaml"))[1]) == list(SCALING_FIGURES)
    population = scaling_figures(load_study(str(REPO / "configs/population_gd.yaml"))[1])
    assert not {"sample_complexity", "online_error", "ablations"} & set(population)
    assert {"convergence_time", "out_of_sample"} <= set(population)
    analysis = analyse(synthetic_trajectories(3.0, D_grid=(4, 8), seeds=2), None, settings(n_boot=50))
    written = scaling.write_all(analysis, tmp_path, ["convergence_time", "ablations"])
    assert sorted(p.name for p in written) == sorted(
        f"{n}.{e}" for n in ("convergence_time", "ablations") for e in ("png", "pdf")
    )
