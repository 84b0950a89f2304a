"""The pre-registered out-of-sample test (analysis/predict.py, rule predict, `groupsparse check-predictions`):
laws fitted on D <= fit_D_max alone, their predictions fixed before larger D are read, one criterion for
every law, lack of fit marked, and a test that can fail either way."""

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
from groupsparse.analysis.laws import criterion_power, design, law_prediction
from groupsparse.analysis.predict import PREDICTION_COLUMNS
from groupsparse.analysis.settings import Settings
from groupsparse.io import files as io

KAPPAS = [0.5, 1]


# the theorem's form: r = (D - 1) exp(-gap), the gap t / (4 D^2) + 2:
# at t = kappa D^3, log r = log(D - 1) - kappa D / 4 - 2
def THEOREM(t, D):
    return (D - 1) * np.exp(-t / (4 * D**2) - 2)


# a power of D at every kappa: log r = -(1 + t / D^3) log D (steeper as kappa grows, never exponential in D)
def POWER(t, D):
    return np.exp(-(1 + t / D**3) * np.log(D))


def _write(traj: pd.DataFrame, folder) -> dict[int, str]:
    paths = {}
    for D, g in traj.groupby("D"):
        path = folder / f"scale_d10_D{D}.parquet"
        io.write_parquet(g, path, io.provenance("abc"))
        paths[int(D)] = str(path)
    return paths


def make_study(tmp_path, law, noise=0.02, **analysis):
    traj = min_attention_runs(law, D_grid=(4, 6, 8, 12, 16, 24, 32), seeds=5, noise=noise)
    spec = tmp_path / "analysis.json"
    config = schema_config(kappas=KAPPAS, n_boot=200, power_simulations=400, **analysis)
    spec.write_text(json.dumps(Settings.spec(config)))
    return traj, _write(traj, tmp_path), spec, Settings.from_spec(Settings.spec(config))


@pytest.fixture
def study(tmp_path):
    return make_study(tmp_path, THEOREM)


def _predict(paths, spec, s, tmp_path) -> str:
    out = tmp_path / "pred.parquet"
    fit = [p for D, p in paths.items() if s.fit_D_max >= D]
    argv = ["predict", "--trajectories", *fit, "--spec", str(spec), "--out", str(out), "--out-csv", str(tmp_path / "c")]
    assert cli.main(argv) == 0
    return str(out)


def test_the_laws_design_matrices():
    D = np.array([4.0, 8.0])
    X, off = design("theorem", D)
    assert np.allclose(off, np.log(D - 1)) and np.allclose(X, [[1, 4], [1, 8]])
    X, off = design("nested", D)
    assert X.shape == (2, 3) and not off.any()
    with pytest.raises(ValueError, match="unknown law"):
        design("cubic", D)


def test_predict_writes_the_table_from_the_fit_levels(study, tmp_path):
    traj, paths, spec, s = study
    table = io.read_parquet(_predict(paths, spec, s, tmp_path))
    assert list(table.columns) == PREDICTION_COLUMNS
    assert len(table) == len(KAPPAS) * len(s.laws) * len(s.predict_D)  # group x d x kappa x law x D
    th = table[table["law"] == "theorem"].set_index(["kappa", "D"])
    for kappa in KAPPAS:
        for D in s.predict_D:
            row = th.loc[(kappa, D)]
            truth = (D - 1) * math.exp(-kappa * D / 4 - 2)
            assert row["rest"] == pytest.approx(truth, rel=0.15) and row["rest_low"] < truth < row["rest_high"]
            assert row["fit_levels"] == "D=4; D=6; D=8; D=12; D=16" and row["seeds_per_level"] == 5
            assert row["flow_time"] == kappa * D**3 and row["eta_rule"] == "eta = 1"
    power = table[table["law"] == "power"]
    assert (power["lack_of_fit_p"] < 0.01).all() and (th["lack_of_fit_p"] > 0.001).all()


def test_predict_without_fit_runs_writes_an_empty_table(study, tmp_path):
    """A study with no scaling run at D <= fit_D_max (ablations alone, say) has nothing to predict from."""
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


@pytest.mark.parametrize("law, winner", [(THEOREM, "theorem"), (POWER, "power")])
def test_the_law_test_can_fail_either_way(tmp_path, law, winner):
    """Data from the theorem's form: the theorem's form predicts best; data from a power law: the power law
    does. The same criterion decides both: the test is not built to pass one law."""
    traj, paths, spec, s = make_study(tmp_path, law, laws=["theorem", "power"])
    claims = analyse(traj, None, s, io.read_parquet(_predict(paths, spec, s, tmp_path))).claims
    tests = claims[claims["analysis"] == "law_test"]
    assert len(tests) == len(KAPPAS)
    assert set(tests["verdict"]) == {f"{winner} predicts best"}
    assert all("the criterion picks the true law" in c for c in tests["config"])
    per_D = claims[claims["analysis"] == "out_of_sample"]
    assert sorted(set(per_D["D"])) == [24, 32] and set(per_D["verdict"]) == {"descriptive"}


def test_a_law_that_misfits_in_sample_cannot_pass(tmp_path):
    """Power-law data and the theorem's form alone: it is the closest law (the only one), but its lack of
    fit on D <= 16 fails, so no law passes."""
    traj, paths, spec, s = make_study(tmp_path, POWER, laws=["theorem"])
    claims = analyse(traj, None, s, io.read_parquet(_predict(paths, spec, s, tmp_path))).claims
    tests = claims[claims["analysis"] == "law_test"]
    assert set(tests["verdict"]) == {"no law passes"} and all("fails lack of fit" in w for w in tests["why"])


def test_the_criterions_power_is_high_under_each_law_at_low_noise_and_falls_with_noise():
    rng = np.random.default_rng(0)
    Ds = np.array([4.0, 6, 8, 12, 16])
    targets = np.array([24.0, 32, 64])
    for noise, floor in ((0.02, 0.9), (3.0, None)):
        Y = np.log(THEOREM(Ds**3, Ds))[:, None] + noise * rng.standard_normal((5, 5))
        power = criterion_power(Ds, Y, targets, ("theorem", "power"), reps=500, seed=1)
        if floor is not None:
            assert min(power.values()) > floor
        else:
            assert min(power.values()) < 0.9  # with enough noise the laws can be confused


def test_check_predictions_gives_the_claims_verdicts_for_runs_outside_the_dag(study, tmp_path, capsys):
    """A D = 64 run made by hand: the same rows as the claims table would give it (kappa 1: r below
    float32's resolution there, inconclusive); runs at no predicted D are refused in one line."""
    traj, paths, spec, s = study
    out = _predict(paths, spec, s, tmp_path)
    capsys.readouterr()
    d64 = min_attention_runs(THEOREM, D_grid=(64,), seeds=5, noise=0.02)
    (path64,) = _write(d64, tmp_path).values()
    check = ["check-predictions", "--predictions", out, "--spec", str(spec), "--trajectories", path64]
    assert cli.main([*check, "--out-csv", str(tmp_path / "v.csv")]) == 0
    got = pd.read_csv(tmp_path / "v.csv")
    want = analyse(d64, None, s, io.read_parquet(out)).claims
    want = want[want["analysis"].isin(["out_of_sample", "law_test", "law_difference", "law_rate"])]
    assert list(got["verdict"]) == list(want["verdict"])
    assert np.allclose(got["measured"], want["measured"], equal_nan=True)
    per_D = got[got["analysis"] == "out_of_sample"].set_index("claim")
    assert list(per_D["verdict"]) == ["descriptive", "inconclusive"]
    assert cli.main(["check-predictions", "--predictions", out, "--spec", str(spec), "--trajectories", paths[4]]) == (
        cli.EXIT_INPUT
    )
    assert "no run at a D with predictions" in capsys.readouterr().err


def test_a_diverged_seed_makes_its_cell_inconclusive(study, tmp_path):
    """One seed of the D = 32 run diverges: its D = 32 rows and the law test are inconclusive (why:
    diverged), never judged on the other seeds, while D = 24 keeps its measurement; the figure draws."""
    import matplotlib

    matplotlib.use("Agg")
    from groupsparse.figures.theorem import levels_from_trajectories, out_of_sample_figure

    traj, paths, spec, s = study
    predictions = io.read_parquet(_predict(paths, spec, s, tmp_path))
    one = (traj["D"] == 32) & (traj["seed"] == 1)
    traj = traj[~one | (traj["step"] <= 5000)].copy()
    traj.loc[one & (traj["step"] <= 5000), "status"] = "diverged"
    claims = analyse(traj, None, s, predictions).claims
    rows = claims[claims["analysis"] == "out_of_sample"].set_index("D")
    assert set(rows.loc[32, "verdict"]) == {"inconclusive"} and set(rows.loc[32, "why"]) == {"diverged"}
    assert set(rows.loc[24, "verdict"]) == {"descriptive"}
    assert set(claims.loc[claims["analysis"] == "law_test", "verdict"]) == {"inconclusive"}
    fig = out_of_sample_figure(levels_from_trajectories(traj, s), predictions)
    assert len([ax for ax in fig.axes if ax.has_data()]) == len(KAPPAS)


def test_prediction_intervals_of_a_three_parameter_law_cover(tmp_path):
    """The nested law's textbook interval (3 parameters, 2 degrees of freedom on 5 levels) covers a new
    level mean at the study's design in 92-98% of simulated studies."""
    rng = np.random.default_rng(3)
    Ds, new_D = np.array([4.0, 6, 8, 12, 16]), np.array([24.0, 32])
    truth = lambda D: 0.5 - 0.8 * np.log(D) - 0.1 * D  # noqa: E731
    Y = truth(Ds)[None, :, None] + 0.05 * rng.standard_normal((2000, 5, 5))
    new = truth(new_D) + 0.05 * rng.standard_normal((2000, 2, 5)).mean(-1)
    p = law_prediction("nested", Ds, Y, new_D)
    coverage = (np.abs(new - p["pred"]) <= p["half"]).mean(axis=0)
    assert np.all((coverage >= 0.92) & (coverage <= 0.98)), coverage


def inverse_kappa_predictions(D: int, A: float) -> pd.DataFrame:
    """A predictions table of one law at one D: log r = log A - log kappa over kappa = 0.5 ... 8, its interval
    +-0.5 on the log scale (so the flow time to exp(-c D) is kappa_c = A exp(c D), the interval x exp(+-0.5))."""
    kappas = np.array([0.5, 1, 2, 4, 8])
    log_rest = math.log(A) - np.log(kappas)
    return pd.DataFrame(
        {
            "group": "", "d": 10, "law": "power", "D": D, "algorithm": "flow", "fit_D_max": 64, "kappa": kappas,
            "log_rest": log_rest, "log_low": log_rest - 0.5, "log_high": log_rest + 0.5, "fit_levels": "D=4",
        }
    )  # fmt: skip


def test_kappa_c_is_read_off_each_laws_predictions_with_its_interval():
    """r = A kappa^-1 at D: the flow time to exp(-c D) is kappa_c = A exp(c D) exactly (log-linear in log kappa),
    the interval's ends map through the same curve, and a target beyond the grid is censored."""
    from groupsparse.analysis.kappa_prediction import kappa_c_predictions

    D, A = 80, math.exp(-3.5)
    out = kappa_c_predictions(inverse_kappa_predictions(D, A), [0.05, 0.1]).set_index("c")
    assert out.loc[0.05, "kappa_c"] == pytest.approx(A * math.exp(0.05 * D))
    assert out.loc[0.05, "kappa_c_low"] == pytest.approx(A * math.exp(0.05 * D - 0.5))
    assert out.loc[0.05, "kappa_c_high"] == pytest.approx(A * math.exp(0.05 * D + 0.5))
    assert out.loc[0.05, "censored"] == ""
    assert out.loc[0.1, "censored"] == "above" and out.loc[0.1, "kappa_c_high"] == math.inf


def test_a_measured_kappa_c_is_judged_against_each_laws_prediction_a_censored_end_as_a_bound():
    """The same predictions (kappa_c = A exp(c D), interval x exp(+-0.5); c = 0.1 beyond the grid) against
    measured flow times at D = 80: inside the interval agrees, outside differs; a measurement not reached by
    the run's end agrees with a prediction beyond the grid and differs from one inside it. "agrees" is a failure
    to reject: it stands only with power against the rival law's prediction (far: power near 1), and reads
    "undecided" where the rival predicts nearly the same kappa_c or there is no rival."""
    from schema_settings import settings

    from groupsparse.analysis.kappa_prediction import kappa_c_claims

    D, A = 80, math.exp(-3.5)
    traj = pd.DataFrame(
        {"role": "scaling", "variant": "", "d": [10], "D": [D], "algorithm": "flow", "samples": 2048.0, "rtol": 1e-6}
    )
    s = settings(fit_D_max=64, target_c=(0.05, 0.1))
    expected = A * math.exp(0.05 * D)

    def judged(kappa_c05: float, reached_c01: bool, rival: float | None = math.exp(1.5)) -> dict[float, dict]:
        preds = inverse_kappa_predictions(D, A)
        if rival is not None:  # the nested law predicting kappa_c x rival
            preds = pd.concat([preds, inverse_kappa_predictions(D, A * rival).assign(law="nested")])
        seeds = np.arange(4)
        tau05 = kappa_c05 * D**3 * np.exp(0.05 * (seeds - 1.5))  # four seeds around kappa_c05
        cr = pd.DataFrame(
            {
                "run": "scale_d10_D80", "role": "scaling", "variant": "", "d": 10, "D": D, "seed": np.tile(seeds, 2),
                "quantity": "attention_min_on_relevant", "c": np.repeat([0.05, 0.1], 4),
                "flow_time": np.concatenate([tau05, np.full(4, (1.0 if reached_c01 else 8.0) * D**3)]),
                "censored": np.repeat([False, not reached_c01], 4), "reason": "",
            }
        )  # fmt: skip
        rows = [r for r in kappa_c_claims(traj, cr, preds, s) if r["law"] == "power"]
        assert rows and all(r["statement"] == "kappa_c_prediction" for r in rows)
        return {r["c"]: r for r in rows}

    far = judged(expected * 1.2, reached_c01=False)
    # c = 0.1 not reached by kappa 8: both laws said beyond 8, so the run tells them apart no better than chance
    assert {c: r["verdict"] for c, r in far.items()} == {0.05: "agrees", 0.1: "undecided"} and far[0.1]["power"] == 0
    # a rival whose whole interval says "reached by 8" (kappa_c e^1 x [e^-0.5, e^0.5]) would have been seen
    below = judged(expected * 1.2, reached_c01=False, rival=math.exp(-3.5))
    assert below[0.1]["verdict"] == "agrees" and below[0.1]["power"] == 1
    assert far[0.05]["power"] > 0.99 and far[0.05]["alternative_name"] == "the nested law's kappa_c"
    assert far[0.05]["alternative_value"] == pytest.approx(expected * math.exp(1.5))
    assert judged(expected * 2.0, reached_c01=False)[0.05]["verdict"] == "differs"  # exp(0.5) = 1.65: outside
    assert judged(expected / 2.0, reached_c01=False)[0.05]["verdict"] == "differs"
    # c = 0.1's prediction is 'beyond 8': a run that reaches it at kappa 1 contradicts it
    assert judged(expected, reached_c01=True)[0.1]["verdict"] == "differs"
    # a rival predicting 1.1 x the same kappa_c lies inside the interval too: no power to tell them apart
    near = judged(expected * 1.2, reached_c01=False, rival=1.1)[0.05]
    assert near["verdict"] == "undecided" and near["power"] < s.min_power and near["power_veto"] is True
    assert judged(expected * 1.2, reached_c01=False, rival=None)[0.05]["verdict"] == "undecided"
