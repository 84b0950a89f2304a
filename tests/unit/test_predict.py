"""The out-of-sample test end to end: `groupsparse predict` on the D <= fit_D_max runs, its table, its
refusal of a larger-D run, and the claims that judge the larger-D runs against it."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from schema_settings import schema_config
from test_theorem_claims import min_attention_runs

from groupsparse import cli
from groupsparse.analysis.claims import analyse
from groupsparse.analysis.predict import PREDICTION_COLUMNS
from groupsparse.analysis.settings import Settings
from groupsparse.io import files as io

# 1 - min attention = exp(-t / (4 D^2)): at t = kappa D^3 it is exp(-kappa D / 4), exactly exponential in D
EXPONENTIAL = lambda t, D: np.exp(-t / (4 * D**2))  # noqa: E731
KAPPAS = [0.5, 1]


def _write(traj: pd.DataFrame, folder) -> dict[int, str]:
    paths = {}
    for D, g in traj.groupby("D"):
        path = folder / f"scale_d10_D{D}.parquet"
        io.write_parquet(g, path, io.provenance("abc"))
        paths[int(D)] = str(path)
    return paths


@pytest.fixture
def study(tmp_path):
    traj = min_attention_runs(EXPONENTIAL, D_grid=(4, 6, 8, 12, 16, 24, 32), seeds=5, noise=0.02)
    spec = tmp_path / "analysis.json"
    config = schema_config(kappas=KAPPAS, n_boot=200)
    spec.write_text(json.dumps(Settings.spec(config)))
    return traj, _write(traj, tmp_path), spec, Settings.from_spec(Settings.spec(config))


def test_predict_writes_the_table_from_the_fit_levels(study, tmp_path):
    traj, paths, spec, s = study
    out = tmp_path / "pred.parquet"
    fit = [p for D, p in paths.items() if s.fit_D_max >= D]
    argv = [
        "predict",
        "--trajectories",
        *fit,
        "--spec",
        str(spec),
        "--out",
        str(out),
        "--out-csv",
        str(tmp_path / "p.csv"),
    ]
    assert cli.main(argv) == 0
    table = io.read_parquet(out)
    assert list(table.columns) == PREDICTION_COLUMNS
    assert len(table) == len(KAPPAS) * 2 * len(s.predict_D)  # d x kappa x law x D
    exp_ = table[table["law"] == "exponential"].set_index(["kappa", "D"])
    for kappa in KAPPAS:
        for D in s.predict_D:
            row = exp_.loc[(kappa, D)]
            truth = math.exp(-kappa * D / 4)
            assert row["rest"] == pytest.approx(truth, rel=0.15) and row["rest_low"] < truth < row["rest_high"]
            assert row["fit_levels"] == "D=4; D=6; D=8; D=12; D=16" and row["seeds_per_level"] == 5
    power = table[table["law"] == "power"].set_index(["kappa", "D"])
    assert power.loc[(1, 64), "rest_low"] > math.exp(-16)  # the power law cannot bend down to exp(-16)
    assert (power["lack_of_fit_p"] < 0.01).all() and (exp_["lack_of_fit_p"] > 0.001).all()


def test_predict_without_fit_runs_writes_an_empty_table(study, tmp_path):
    """A study with no grid run at D <= fit_D_max (ablations alone, say) has nothing to predict from."""
    _, _, spec, _ = study
    out = tmp_path / "pred.parquet"
    argv = ["predict", "--trajectories", "--spec", str(spec), "--out", str(out), "--out-csv", str(tmp_path / "p.csv")]
    assert cli.main(argv) == 0
    table = io.read_parquet(out)
    assert list(table.columns) == PREDICTION_COLUMNS and table.empty


def test_predict_refuses_a_run_beyond_fit_D_max(study, tmp_path):
    _, paths, spec, _ = study
    argv = ["predict", "--trajectories", *paths.values(), "--spec", str(spec)]
    argv += ["--out", str(tmp_path / "p.parquet"), "--out-csv", str(tmp_path / "p.csv")]
    assert cli.main(argv) == cli.EXIT_INPUT
    assert not (tmp_path / "p.parquet").exists()


def test_the_claims_say_which_law_holds_the_measurement(study, tmp_path):
    traj, paths, spec, s = study
    out = tmp_path / "pred.parquet"
    fit = [p for D, p in paths.items() if s.fit_D_max >= D]
    cli.main(
        ["predict", "--trajectories", *fit, "--spec", str(spec), "--out", str(out), "--out-csv", str(tmp_path / "c")]
    )
    claims = analyse(traj, None, s, io.read_parquet(out)).claims
    rows = claims[claims["analysis"] == "out_of_sample"]
    assert sorted(set(rows["D"])) == [24, 32] and len(rows) == 2 * len(KAPPAS)
    assert set(rows["verdict"]) == {"one law: exponential"}
    for _, r in rows.iterrows():
        assert r["measured"] == pytest.approx(
            math.exp(-r["D"] * float(r["claim"].split(" at ")[1].split(" D^3")[0]) / 4), rel=0.05
        )
        assert "exponential: predicted" in r["config"] and "power: predicted" in r["config"]


def test_check_predictions_gives_the_claims_verdicts_for_runs_outside_the_dag(study, tmp_path, capsys):
    """A D = 64 run made by hand (an exponential law's data): the same verdicts as the claims table would
    give it (kappa 0.5: the exponential law's; kappa 1: exp(-16), below float32's resolution, inconclusive);
    runs at no predicted D are refused in one line."""
    traj, paths, spec, s = study
    out = tmp_path / "pred.parquet"
    fit = [p for D, p in paths.items() if s.fit_D_max >= D]
    argv = ["predict", "--trajectories", *fit, "--spec", str(spec), "--out", str(out), "--out-csv", str(tmp_path / "c")]
    assert cli.main(argv) == 0
    capsys.readouterr()
    d64 = min_attention_runs(EXPONENTIAL, D_grid=(64,), seeds=5, noise=0.02)
    (path64,) = _write(d64, tmp_path).values()
    check = ["check-predictions", "--predictions", str(out), "--spec", str(spec), "--trajectories", path64]
    assert cli.main([*check, "--out-csv", str(tmp_path / "v.csv")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(KAPPAS) and all("D = 64" in line for line in lines)
    assert "one law: exponential" in lines[0] and "inconclusive; below float32 resolution" in lines[1]
    want = analyse(pd.concat([traj, d64]), None, s, io.read_parquet(out)).claims
    want = want[(want["analysis"] == "out_of_sample") & (want["D"] == 64)]
    got = pd.read_csv(tmp_path / "v.csv")
    assert list(got["verdict"]) == list(want["verdict"]) and np.allclose(
        got["measured"], want["measured"], equal_nan=True
    )
    assert cli.main(
        ["check-predictions", "--predictions", str(out), "--spec", str(spec), "--trajectories", fit[0]]
    ) == (cli.EXIT_INPUT)
    assert "no run at a D with predictions" in capsys.readouterr().err


def test_a_diverged_seed_makes_its_cell_inconclusive_and_the_figure_draws_it_hollow(study, tmp_path):
    """One seed of the D = 32 run diverges: its cells are inconclusive (why: diverged), never judged on the
    other seeds, while D = 24 keeps its verdict; the out-of-sample figure draws the other seeds' mean
    at D = 32 hollow and D = 24 filled."""
    import matplotlib

    matplotlib.use("Agg")
    from groupsparse.figures.theorem import out_of_sample_figure

    traj, paths, spec, s = study
    out = tmp_path / "pred.parquet"
    fit = [p for D, p in paths.items() if s.fit_D_max >= D]
    argv = ["predict", "--trajectories", *fit, "--spec", str(spec), "--out", str(out), "--out-csv", str(tmp_path / "c")]
    assert cli.main(argv) == 0
    one = (traj["D"] == 32) & (traj["seed"] == 1)
    traj = traj[~one | (traj["step"] <= 5000)].copy()
    traj.loc[one & (traj["step"] <= 5000), "status"] = "diverged"
    predictions = io.read_parquet(out)
    rows = analyse(traj, None, s, predictions).claims
    rows = rows[rows["analysis"] == "out_of_sample"].set_index("D")
    assert set(rows.loc[32, "verdict"]) == {"inconclusive"} and set(rows.loc[32, "why"]) == {"diverged"}
    assert set(rows.loc[24, "verdict"]) == {"one law: exponential"}
    fig = out_of_sample_figure(traj, predictions, KAPPAS)
    for ax in fig.axes:
        faces = {
            int(line.get_xdata()[0]): line.get_markerfacecolor()
            for line in ax.get_lines()
            if line.get_marker() == "o" and len(line.get_xdata()) == 1
        }
        assert faces[32] == "none" and faces[24] != "none"
