"""The scaling analysis recovers known exponents from synthetic tables, keeps censored data,
and judges claims by its stated rule, deterministically."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from schema_settings import schema_config, settings

from groupsparse.analysis import inputs, scaling_laws
from groupsparse.analysis.claims import CLAIM_COLUMNS, analyse
from groupsparse.analysis.settings import Settings
from groupsparse.analysis.stats import VERDICTS, Prediction, first_crossing, verdict
from groupsparse.io.files import InputError

FAST = settings(n_boot=400, loss_target=None)


# -- synthetic tables ----------------------------------------------------------------------


def synthetic_trajectories(
    exponent: float,
    D_grid=(4, 8, 16, 32),
    seeds=4,
    d=10,
    c=0.5,
    noise=0.05,
    budget=None,
    seed=0,
    prefix="scale_",
    role="scaling",
) -> pd.DataFrame:
    """Attention mass = sigmoid(4 (log t - log T)), T = c D^exponent times log-normal seed noise.

    Every threshold q is then reached at T * (q / (1 - q))^(1/4): all scale as D^exponent. The
    minimum over queries is 1 - exp(-t D / T): it reaches the theorem's 1 - exp(-c' D) at t = c' T,
    so those times scale as D^exponent too (and with exponent 3, 1 - min at kappa D^3 steps is
    exactly exp(-(kappa / c) D)).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for D in D_grid:
        steps_max = budget or int(40 * c * max(D_grid) ** exponent)
        steps = np.unique(np.r_[0, np.round(np.geomspace(1, steps_max, 300))]).astype(int)
        for s in range(seeds):
            T = c * D**exponent * math.exp(noise * rng.standard_normal())
            mass = 1 / (1 + np.exp(-4 * (np.log(np.maximum(steps, 1e-9)) - math.log(T))))
            mass[steps == 0] = 1 / D
            low = 1 - np.exp(-steps * D / T)
            for st, m, lo in zip(steps, mass, low):
                rows.append(
                    {
                        "run": f"{prefix}d{d}_D{D}",
                        "role": role,
                        "variant": "",
                        "task_name": f"{prefix}d{d}_D{D}",
                        "d": d,
                        "D": D,
                        "seed": s,
                        "j_star": 0,
                        "step": int(st),
                        "eta": 1.0,  # flow time = steps: the synthetic laws are written in steps
                        "flow_time": float(st),
                        "train_loss": 1 - m,
                        "eval_loss": 1 - m,
                        "eval_accuracy": m,
                        "attention_on_relevant": m,
                        "attention_min_on_relevant": lo,
                        "cos_v1_vstar": 0.99,
                        "status": "ok",
                        "diverged_step": -1,
                    }
                )
    return pd.DataFrame(rows)


def accuracy_curve(n, scale):
    return 1 - 0.5 * np.exp(-n / scale)


FACTORIAL = tuple((d, D) for d in (5, 10, 20) for D in (4, 8, 16))  # the light grid's 3 x 3


def synthetic_transfer(
    configs=((5, 4), (10, 8), (20, 16), (40, 8)),
    seeds=4,
    noise=0.01,
    c=1.0,
    grid=None,
    seed=0,
    logreg_cap=None,
    scales=None,
) -> pd.DataFrame:
    """Pretrained accuracy saturates at n ~ c (d + D), logistic regression at n ~ c d D
    (``scales``: method -> f(d, D) instead)."""
    rng = np.random.default_rng(seed)
    grid = np.unique(np.round(np.geomspace(4, 8192, 27))).astype(int) if grid is None else grid
    scales = scales or {"pretrained_finetune": lambda d, D: d + D, "logreg": lambda d, D: d * D}
    rows = []
    for d, D in configs:
        for method, scale in ((m, c * f(d, D)) for m, f in scales.items()):
            if method == "logreg" and logreg_cap is not None:
                scale = scale if d * D <= logreg_cap else 1e9
            for s in range(seeds):
                acc = np.clip(accuracy_curve(grid, scale) + noise * rng.standard_normal(grid.size), 0, 1)
                for n, a in zip(grid, acc):
                    rows.append(
                        {
                            "run": f"scale_d{d}_D{D}",
                            "role": "scaling",
                            "variant": "",
                            "task_name": f"scale_d{d}_D{D}",
                            "d": d,
                            "D": D,
                            "downstream": "transfer",
                            "seed": s,
                            "j_star": 0,
                            "method": method,
                            "n": int(n),
                            "test_accuracy": float(a),
                            "status": "ok",
                        }
                    )
    return pd.DataFrame(rows)


def as_run(df: pd.DataFrame, run: str, role: str, variant: str = "") -> pd.DataFrame:
    """The same rows as another run (its role and variant are columns, as the jobs write them)."""
    return df.assign(run=run, role=role, variant=variant)


def claim(analysis, text: str) -> pd.Series:
    hit = analysis.claims[analysis.claims["claim"].str.contains(text, regex=False)]
    assert len(hit) == 1, (text, analysis.claims["claim"].tolist())
    return hit.iloc[0]


# -- crossings -----------------------------------------------------------------------------


def test_first_crossing_interpolates_on_log_steps_and_linearly_from_zero():
    x = np.array([0, 10, 100, 1000])
    Y = np.array(
        [
            [0.0, 0.4, 0.8, 0.9],  # 0.6 is halfway from 10 to 100 in value: sqrt(10*100)
            [0.0, 0.4, 0.8, 0.9],
        ]
    )
    t, reached = first_crossing(x, Y, 0.6)
    assert reached.all() and t[0] == pytest.approx(math.sqrt(1000))
    t, _ = first_crossing(x, Y[:1], 0.2)  # between step 0 and 10: linear
    assert t[0] == pytest.approx(5.0)
    t, reached = first_crossing(x, Y[:1], 0.95)
    assert not reached[0] and t[0] == 1000  # censored: the last step, a lower bound
    t, reached = first_crossing(x, np.array([[0.9, 0.5, 0.2, 0.1]]), 0.3, direction="down")
    assert reached[0] and 10 < t[0] < 100


def test_first_crossing_is_the_first_not_the_last_and_skips_unrecorded_points():
    x = np.array([1, 2, 4, 8])
    t, reached = first_crossing(x, np.array([[0.1, 0.7, 0.3, 0.9]]), 0.5)
    assert reached[0] and 1 < t[0] < 2
    t, reached = first_crossing(x, np.array([[0.1, np.nan, np.nan, np.nan]]), 0.5)
    assert not reached[0] and t[0] == 1  # last *recorded* step


def test_crossing_times_keep_censored_and_diverged_seeds():
    traj = synthetic_trajectories(3.0, D_grid=(4, 8), seeds=2, budget=200)
    # seed 1 at D=8 diverges at step 50: its rows stop there
    div = (traj["D"] == 8) & (traj["seed"] == 1)
    traj = traj[~(div & (traj["step"] > 50))].copy()
    traj.loc[div, "status"] = "diverged"
    traj.loc[div, "diverged_step"] = 51
    cr = scaling_laws.crossing_times(traj, thresholds=(0.5, 0.99))
    assert len(cr) == 2 * 2 * 2  # nothing dropped
    d8 = cr[(cr["D"] == 8) & (cr["threshold"] == 0.99)].set_index("seed")
    assert d8["censored"].all()  # T(0.99) = 0.5 * 512 * 99^(1/4) > 200
    assert d8.loc[0, "reason"] == "not reached within the budget" and d8.loc[0, "step"] == 200
    assert d8.loc[1, "reason"] == "diverged at step 51" and d8.loc[1, "step"] == 50
    d4 = cr[(cr["D"] == 4) & (cr["threshold"] == 0.5)]
    assert not d4["censored"].any()
    assert np.allclose(d4["step"], 0.5 * 64, rtol=0.2)


# -- convergence-time fits -----------------------------------------------------------------


def test_cubic_growth_is_recovered_and_fixed_thresholds_stay_descriptive():
    """Over 10 synthetic studies the 95% interval should contain 3 about 9.5 times; demand 8."""
    s = settings(n_boot=300, loss_target=None, thresholds=(0.5, 0.99))
    covered = 0
    for data_seed in range(10):
        a = analyse(synthetic_trajectories(3.0, seed=data_seed), None, s)
        fits = a.fits_table().set_index(["analysis", "label"])
        for thr in (0.5, 0.99):
            row = fits.loc[("convergence_time", f"mean attention on j* >= {thr:g}")]
            assert row["slope"] == pytest.approx(3.0, abs=0.1)
            assert row["n_levels"] == 4 and row["usable"] and row["high"] - row["low"] < 0.5
            covered += row["low"] <= 3.0 <= row["high"]
        # a rate the theorem does not bound: no verdict on the theorem
        assert claim(a, "steps until mean attention on j* >= 0.99")["verdict"] == "descriptive"
    assert covered >= 16


def test_another_exponent_is_a_descriptive_rate():
    a = analyse(synthetic_trajectories(1.5), None, FAST)
    row = claim(a, "steps until mean attention on j* >= 0.9 (")
    assert row["verdict"] == "descriptive" and row["claim"].startswith("rate (descriptive)")
    assert row["measured"] == pytest.approx(1.5, abs=0.1)


def test_censored_level_makes_the_fit_inconclusive_not_silently_shorter():
    traj = synthetic_trajectories(3.0, budget=int(0.5 * 16**3 * 3))  # D = 32 cannot reach 0.5
    a = analyse(traj, None, settings(n_boot=400, loss_target=None, target_c=(0.5,)))
    cr = a.crossings
    assert cr[(cr["D"] == 32) & (cr["threshold"] == 0.5)]["censored"].all()
    fit = a.fits_table().set_index("label").loc["mean attention on j* >= 0.5"]
    assert fit["n_levels_censored"] == 1 and fit["n_levels"] == 3 and not fit["usable"]
    assert fit["slope"] == pytest.approx(3.0, abs=0.15)  # the uncensored levels still show the slope
    # the theorem's target 1 - exp(-0.5 D) at D = 32 needs 0.5 x 0.5 x 32^3 steps > the budget
    row = claim(a, "reaches 1 - exp(-0.5 D) within flow time kappa D^3")
    assert "D=32 censored: kappa is at least their bound" in row["why"]


def test_bootstrap_is_seeded_by_the_analysis_identity():
    traj = synthetic_trajectories(3.0, noise=0.3)
    one = analyse(traj, None, FAST).fits_table()
    two = analyse(traj.sample(frac=1.0, random_state=3), None, FAST).fits_table()  # row order irrelevant
    pd.testing.assert_frame_equal(one, two)
    other = analyse(traj, None, settings(n_boot=400, loss_target=None, study_seed=7)).fits_table()
    assert not np.allclose(one["low"], other["low"])


def test_too_few_levels_or_seeds_is_inconclusive():
    a = analyse(synthetic_trajectories(3.0, D_grid=(4, 8)), None, FAST)
    row = claim(a, "1 - min attention at flow time 1 D^3 falls with D")
    assert row["verdict"] == "inconclusive" and "level" in row["why"]
    a = analyse(synthetic_trajectories(3.0, seeds=1), None, FAST)
    row = claim(a, "reaches 1 - exp(-0.2 D) within flow time kappa D^3")
    assert row["verdict"] == "inconclusive" and "seed" in row["why"]


# -- sample complexity ---------------------------------------------------------------------


def test_joint_fit_separates_d_plus_D_from_d_times_D():
    """n* ~ d + D has a + b = 1 (degree 1), n* ~ d D has a = b = 1: the one-sided claim on a + b
    is consistent for the first and does not hold for a pretrained method that needs d D."""
    scales = {
        "pretrained_finetune": lambda d, D: d + D,
        "pretrained_frozen_W": lambda d, D: d * D,
        "logreg": lambda d, D: d * D,
        "group_lasso": lambda d, D: d,
    }
    s = settings(n_boot=400, loss_target=None, accuracy_targets=(0.8,), methods=tuple(scales), machine_spread=0.0)
    # the grid starts at n = 2: from n = 4, d D anchored at the grid's centre puts n* of (5, 4) below the
    # grid's first point (censored), and the simulated pipeline's power against d D falls to about 0.4
    grid = np.unique(np.round(np.geomspace(2, 8192, 27))).astype(int)
    a = analyse(
        synthetic_trajectories(3.0, D_grid=(4,), seeds=2),
        synthetic_transfer(configs=FACTORIAL, scales=scales, grid=grid),
        s,
    )
    fits = a.fits_table()
    joint = fits[(fits["analysis"] == "sample_complexity") & (fits["law"] == "n*")].set_index(["method", "coefficient"])
    assert joint.loc[("pretrained_finetune", "a + b"), "slope"] == pytest.approx(1.0, abs=0.1)
    assert joint.loc[("logreg", "log d"), "slope"] == pytest.approx(1.0, abs=0.1)
    assert joint.loc[("logreg", "log D"), "slope"] == pytest.approx(1.0, abs=0.1)
    assert joint.loc[("group_lasso", "log D"), "slope"] == pytest.approx(0.0, abs=0.1)
    assert joint.loc[("group_lasso", "log d"), "slope"] == pytest.approx(1.0, abs=0.1)
    assert claim(a, "pretrained_finetune: n* grows no faster than d + D, a + b <= 1 (accuracy 0.8")["verdict"] == (
        "consistent"
    )
    exceeds = claim(a, "pretrained_frozen_W: n* grows no faster than d + D, a + b <= 1 (accuracy 0.8")
    assert exceeds["verdict"] == "does not hold" and exceeds["high"] == math.inf and exceeds["low"] > 1.5
    consistent = claim(a, "pretrained_finetune: n* grows no faster than d + D, a + b <= 1 (accuracy 0.8")
    assert consistent["power"] >= 0.8 and consistent["alternative"].startswith("n* ~ d D")
    assert consistent["power"] == consistent["power_pipeline"]  # the simulation's power decides where it ran
    # a <= 1 alone cannot tell d + D from d D (both have a <= 1): no power, undecided
    alone = claim(a, "pretrained_frozen_W: exponent a of d in n* at most 1 (accuracy 0.8")
    assert alone["verdict"] == "undecided" and alone["power"] < 0.2 and "undecided (power" in alone["why"]
    assert claim(a, "logreg: n* grows like d D, a + b = 2 (accuracy 0.8")["verdict"] == "holds"
    # the shape worded from (a, b) against the regions d + D and d D give on this grid
    shape = "the shape of n* over the (d, D) grid is"
    assert claim(a, f"pretrained_finetune: {shape} d + D (accuracy 0.8")["verdict"] == "holds"
    assert claim(a, f"pretrained_frozen_W: {shape} d + D (accuracy 0.8")["verdict"] == "does not hold"
    assert "n* grows like d D" in claim(a, f"pretrained_frozen_W: {shape} d + D (accuracy 0.8")["why"]
    assert claim(a, f"logreg: {shape} d D (accuracy 0.8")["verdict"] == "holds"
    assert claim(a, "logreg: exponent b of D in n* equals 1 (accuracy 0.8")["verdict"] in ("holds", "undecided")
    # one n* form per verdict (scaling.analysis.n_star_form = n*): the bound's own form is fitted, not judged
    assert not a.claims["claim"].str.contains("n*/log^2 n*", regex=False).any()
    assert (fits["law"] == "n*/log^2 n*").any()
    # no claim for group lasso, one row per coefficient in the fits table
    assert not a.claims["claim"].str.startswith("group_lasso").any()
    gap = claim(a, "pretrained_finetune needs fewer samples than logreg for accuracy 0.8 (scale_d20_D16, transfer)")
    assert gap["verdict"] == "holds"
    assert gap["measured"] == pytest.approx(math.log(20 * 16 / 36), abs=0.25)


def synthetic_online(alpha=-0.6, beta=0.8, seeds=5, noise=0.05, seed=0, size=lambda d, D: d + D) -> pd.DataFrame:
    """Average online error = 0.3 size(d, D)^beta n^alpha times a per-seed factor shared by all n of a
    grid point (one pretrained checkpoint) and a little noise per (seed, n)."""
    rng = np.random.default_rng(seed)
    rows = []
    for d, D in FACTORIAL:
        shared = np.exp(noise * rng.standard_normal(seeds))
        for n in (8, 32, 128, 512, 2048):
            err = 0.003 * size(d, D) ** beta * n**alpha * shared * np.exp(0.2 * noise * rng.standard_normal(seeds))
            for s in range(seeds):
                rows.append(
                    {
                        "run": f"scale_d{d}_D{D}",
                        "role": "scaling",
                        "d": d,
                        "D": D,
                        "downstream": "transfer",
                        "seed": s,
                        "method": "pretrained_frozen_W",
                        "n": n,
                        "test_accuracy": 1 - float(err[s]) / 2,
                        "status": "ok",
                        "online_error": float(err[s]),
                    }
                )
    return pd.DataFrame(rows)


def test_online_error_rates_are_recovered():
    s = settings(n_boot=400, loss_target=None, accuracy_targets=(0.8,), methods=())
    traj = synthetic_trajectories(3.0, D_grid=(4,), seeds=2)
    a = analyse(traj, synthetic_online(), s)
    fits = a.fits_table()
    online = fits[fits["analysis"] == "online_error"].set_index("coefficient")
    assert online.loc["log n", "slope"] == pytest.approx(-0.6, abs=0.02)
    assert online.loc["log(d+D)", "slope"] == pytest.approx(0.8, abs=0.05)
    assert online.loc["log n", "low"] < -0.6 < online.loc["log n", "high"]
    assert not (a.claims["analysis"] == "online_error").any()  # a fitted exponent of d + D: no verdict


@pytest.mark.parametrize("size", ["d + D", "d D"])
def test_the_bound_form_with_d_plus_D_against_d_times_D_can_fail(size):
    s = settings(n_boot=400, loss_target=None, accuracy_targets=(0.8,), methods=())
    scale = (lambda d, D: d + D) if size == "d + D" else (lambda d, D: d * D)
    online = synthetic_online(alpha=-1.0, beta=1.0, size=scale)
    a = analyse(synthetic_trajectories(3.0, D_grid=(4,), seeds=2), online, s)
    row = claim(a, "the bound's form with d + D fits the average online error better than with d D")
    assert row["verdict"] == ("holds" if size == "d + D" else "does not hold")
    assert row["power"] > 0.8 and "d D" in row["alternative"]  # it would have seen d D
    # both sizes grow the error: the constant model predicts worse than d + D either way
    constant = claim(a, "the bound's form with d + D fits the average online error better than a constant")
    assert constant["measured"] > 0


def test_method_that_never_reaches_the_target_is_censored():
    tr = synthetic_transfer(logreg_cap=100)  # logreg hopeless at d*D = 160 and 320
    a = analyse(
        synthetic_trajectories(3.0, D_grid=(4,), seeds=2),
        tr,
        settings(n_boot=300, loss_target=None, accuracy_targets=(0.8,)),
    )
    row = claim(a, "logreg: n* grows like d D, a + b = 2 (accuracy 0.8")
    assert row["verdict"] == "inconclusive" and "censored" in row["why"]
    gap = claim(a, "fewer samples than logreg for accuracy 0.8 (scale_d40_D8, transfer)")
    assert gap["high"] == math.inf and gap["low"] > 0 and gap["verdict"] == "holds"
    assert "logreg never reaches it: measured is a lower bound" in gap["config"]


def test_duplicate_transfer_rows_are_refused():
    tr = synthetic_transfer(configs=((5, 4),), seeds=2)
    with pytest.raises(InputError, match="several rows"):
        doubled = pd.concat([tr, tr[tr["method"] == "logreg"].iloc[:1]])
        inputs.transfer_curves(doubled, "scale_d5_D4", "transfer", "logreg")


# -- verdict rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pred, low, high, expected",
    [
        (Prediction("equal", 3.0, 1.0), 2.6, 3.2, "holds"),
        (Prediction("equal", 3.0, 1.0), 1.4, 1.7, "does not hold"),
        (Prediction("equal", 3.0, 1.0), 3.1, 3.5, "does not hold"),
        (Prediction("equal", 3.0, 1.0), 0.5, 5.0, "inconclusive"),  # contains 3 but too wide to confirm
        (Prediction("greater", 0.0), 0.2, math.inf, "holds"),
        (Prediction("greater", 0.0), -0.5, -0.1, "does not hold"),
        (Prediction("greater", 0.0), -0.1, 0.3, "inconclusive"),
        (Prediction("less", 0.0), -0.4, -0.2, "holds"),
        (Prediction("less", 0.0), 0.1, 0.2, "does not hold"),
        (Prediction("less", 0.0), -math.inf, 0.2, "inconclusive"),
        (Prediction("equal", 3.0, 1.0), math.nan, math.nan, "inconclusive"),
    ],
)
def test_verdict_rule(pred, low, high, expected):
    assert verdict(pred, low, high)[0] == expected


def test_a_blocker_overrides_the_interval():
    assert verdict(Prediction("equal", 3.0, 1.0), 2.9, 3.1, blocker="1 level(s) censored") == (
        "inconclusive",
        "1 level(s) censored",
    )


def test_bad_prediction_kind_is_refused():
    with pytest.raises(ValueError, match="equal, within, greater, less or at_most"):
        Prediction("about", 3.0)


# -- qualitative claims, ablations ---------------------------------------------------------


def test_final_attention_claim_and_ablation_table():
    base = as_run(synthetic_trajectories(1.0, D_grid=(10,), seeds=3, c=2.0), "ablation_none", "ablation", "none")
    weak = as_run(base, "ablation_weak", "ablation", "weak")
    weak["attention_on_relevant"] = weak["attention_on_relevant"] * 0.5
    task = as_run(base, "base", "task")
    a = analyse(pd.concat([base, weak, task]), None, FAST)
    assert claim(a, "mean attention mass on j* near 1 after pretraining (base)")["verdict"] == "holds"
    assert not a.claims["claim"].str.contains("ablation_").any()  # ablations are tabulated, not claimed
    t = a.ablations.set_index(["ablation", "metric"])
    row = t.loc[("weak", "attention_on_relevant")]
    assert row["delta_high"] < 0 and row["n_seeds"] == 3
    assert row["delta"] == pytest.approx(-0.5 * t.loc[("none", "attention_on_relevant"), "mean"])
    assert t.loc[("none", "eval_loss"), "delta"] == 0


def test_ablation_table_reports_transfer_at_a_few_sizes():
    traj = synthetic_trajectories(1.0, D_grid=(10,), seeds=2)
    tr = synthetic_transfer(configs=((10, 10),), seeds=2)
    traj, tr = (as_run(frame, "ablation_none", "ablation", "none") for frame in (traj, tr))
    traj2, tr2 = (as_run(frame, "ablation_iid", "ablation", "iid") for frame in (traj, tr))
    a = analyse(
        pd.concat([traj, traj2]), pd.concat([tr, tr2]), settings(n_boot=200, loss_target=None, ablation_sizes=(8, 64))
    )
    acc = a.ablations[a.ablations["metric"] == "test_accuracy"]
    assert sorted(acc["n"].unique()) == [8, 64] and set(acc["ablation"]) == {"none", "iid"}
    assert (acc["method"] == "pretrained_finetune").all()


def test_missing_baseline_is_a_clear_error():
    traj = as_run(synthetic_trajectories(1.0, D_grid=(10,), seeds=2), "ablation_x", "ablation", "x")
    with pytest.raises(InputError, match="baseline run 'ablation_none'"):
        analyse(traj, None, FAST)


# -- the command ---------------------------------------------------------------------------


def test_cli_writes_tables_and_figures(tmp_path, capsys):
    from groupsparse import cli
    from groupsparse.io import files as io

    traj = synthetic_trajectories(3.0, D_grid=(4, 8, 16), seeds=2).drop(columns="run")
    paths = []
    for D, g in traj.groupby("D"):
        path = tmp_path / f"traj_{D}.parquet"
        io.write_parquet(g, path, io.provenance("abc"))
        paths.append(str(path))
    base = traj[traj["D"] == 4].assign(role="ablation", variant="none")
    io.write_parquet(base, tmp_path / "base.parquet", io.provenance("abc"))
    tr = tmp_path / "transfer.parquet"
    io.write_parquet(synthetic_transfer(seeds=2), tr, io.provenance("abc"))
    out = tmp_path / "out"
    spec = tmp_path / "analysis.json"
    config = schema_config(n_boot=200, accuracy_targets=[0.8])
    spec.write_text(json.dumps(Settings.spec(config)))
    argv = [
        "scaling",
        "--trajectories",
        *paths,
        f"ablation_none={tmp_path / 'base.parquet'}",
        "--transfer",
        str(tr),
        "--out-claims",
        str(out / "claims.parquet"),
        "--out-fits",
        str(out / "fits.parquet"),
        "--out-ablations",
        str(out / "abl.parquet"),
        "--out-points",
        str(out / "points.parquet"),
        "--figures",
        str(out / "fig"),
        "--spec",
        str(spec),
    ]
    assert cli.main(argv) == 0
    claims = io.read_parquet(out / "claims.parquet")
    assert list(claims.columns) == CLAIM_COLUMNS
    assert set(claims["verdict"]) <= set(VERDICTS)
    assert "verdict_rule" in io.read_provenance(out / "claims.parquet")
    assert set(io.read_parquet(out / "abl.parquet")["ablation"]) == {"none"}
    for name in (
        "convergence_time",
        "convergence_thresholds",
        "attention_concentration",
        "sample_complexity",
        "online_error",
        "ablations",
    ):
        for ext in ("png", "pdf"):
            assert (out / "fig" / f"{name}.{ext}").stat().st_size > 1000

    bad = tmp_path / "bad.parquet"
    io.write_parquet(traj.drop(columns="attention_on_relevant"), bad, io.provenance("abc"))
    argv[2 : 2 + len(paths) + 1] = [str(bad)]
    assert cli.main(argv) == cli.EXIT_INPUT
    assert "attention_on_relevant" in capsys.readouterr().err


def test_unknown_downstream_is_a_clear_error():
    tr = synthetic_transfer(configs=((5, 4),), seeds=2)
    with pytest.raises(InputError, match="no downstream 'negative_control'; it has transfer"):
        analyse(
            synthetic_trajectories(3.0, D_grid=(4,), seeds=2),
            tr,
            settings(n_boot=200, downstream=("negative_control",)),
        )


def test_a_threshold_met_before_the_first_measurement_is_censored():
    """D = 2 starts with mass 1/2 on j*: 'steps to 0.5' is only known to be <= 0, not a measurement."""
    traj = synthetic_trajectories(3.0, D_grid=(2, 4, 8, 16), seeds=2)
    cr = scaling_laws.crossing_times(traj, thresholds=(0.5,))
    d2 = cr[cr["D"] == 2]
    assert d2["censored"].all() and d2["reason"].str.startswith("already reached at the first recorded step").all()
    a = analyse(traj, None, settings(n_boot=200, loss_target=None, thresholds=(0.5,), target_c=(0.3,)))
    fit = a.fits_table().set_index("label").loc["mean attention on j* >= 0.5"]
    assert not fit["usable"] and "D=2" in fit["blocker"]


def test_transfer_target_met_at_the_smallest_n_is_censored():
    grid = np.array([64, 128, 256, 512])  # every method already at 0.8 for the small configs at n = 64
    tr = synthetic_transfer(grid=grid, seeds=3)
    a = analyse(
        synthetic_trajectories(3.0, D_grid=(4,), seeds=2),
        tr,
        settings(n_boot=200, loss_target=None, accuracy_targets=(0.8,)),
    )
    row = claim(a, "pretrained_finetune: n* grows no faster than d + D, a + b <= 1 (accuracy 0.8")
    assert row["verdict"] == "inconclusive" and "censored" in row["why"]
    gap = claim(a, "fewer samples than logreg for accuracy 0.8 (scale_d10_D8, transfer)")
    assert gap["high"] == math.inf and "pretrained reaches it at the first n" in gap["config"]


def test_readme_grid_section_lists_every_grid_point_and_the_joint_fit(tmp_path):
    from groupsparse.analysis import summary
    from groupsparse.io import files as io
    from groupsparse.io import report

    tr = synthetic_transfer(configs=FACTORIAL, seeds=3)
    a = analyse(synthetic_trajectories(3.0, D_grid=(4,), seeds=2), tr, settings(n_boot=200, accuracy_targets=(0.9,)))
    io.write_parquet(a.fits_table(), tmp_path / "scaling_fits.parquet", io.provenance("abc"))
    io.write_parquet(summary.sample_complexity(tr), tmp_path / "sample_complexity.parquet", io.provenance("abc"))
    text = report.grid_section(tmp_path)
    header = next(line for line in text.splitlines() if line.startswith("| method | d=5, D=4"))
    assert header.count("d=") == 9
    assert "| pretrained_finetune | n* |" in text and "| logreg | n* |" in text
    assert "| pretrained_finetune | n*/log^2 n* |" in text


def test_a_verdict_within_the_machine_spread_is_inconclusive():
    from groupsparse.analysis.claims import machine_robust
    from groupsparse.analysis.rows import claim_row
    from groupsparse.analysis.statements import About

    rows = [
        claim_row("final_attention", About(run="near"), Prediction("greater", 0.9), 0.95, 0.905, 0.99, "", "", 5),
        claim_row("final_attention", About(run="far"), Prediction("greater", 0.9), 0.97, 0.95, 0.99, "", "", 5),
    ]
    table = pd.DataFrame(rows, columns=CLAIM_COLUMNS)
    assert list(table["verdict"]) == ["holds", "holds"]
    judged = machine_robust(table, settings(machine_spread=0.01))  # 0.905 is within 1% of 0.9; 0.95 is not
    assert list(judged["verdict"]) == ["inconclusive", "holds"] and "cross-machine" in judged["why"].iloc[0]
    assert list(machine_robust(table, settings(machine_spread=0.0))["verdict"]) == ["holds", "holds"]


def test_the_machine_spread_is_not_applied_to_transfer_exponents():
    """The spread was measured on 1 - min attention: a transfer exponent's one-sided bound of 1.022
    against 1 stays 'does not hold' (the issue's case), a pretraining quantity's edge as close flips."""
    from groupsparse.analysis.claims import machine_robust
    from groupsparse.analysis.rows import claim_row
    from groupsparse.analysis.statements import About

    exponent = About(subject="pretrained_probe", target=0.9, downstream="transfer", form="n*")
    rows = [
        claim_row("n_star_sum_at_most", exponent, Prediction("at_most", 1.0), 1.36, 1.022, math.inf, "", "", 5),
        claim_row("final_attention", About(run="base"), Prediction("greater", 0.9), 0.95, 0.905, 0.99, "", "", 5),
    ]
    judged = machine_robust(pd.DataFrame(rows, columns=CLAIM_COLUMNS), settings(machine_spread=0.03))
    assert list(judged["verdict"]) == ["does not hold", "inconclusive"]
