"""Claims as the theorem states them, on synthetic inputs with known answers: the theorem's
targets 1 - exp(-c D) on the minimum over queries, the one-sided "at most D^3" verdict, exponential
against power-law concentration at kappa D^3 steps, batch as a factor, stability; and the minimum
over queries recorded by the trainer against a direct computation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from schema_settings import settings

from groupsparse.analysis.bound import batch_claims
from groupsparse.analysis.claims import analyse, stability_claims
from groupsparse.analysis.scaling_laws import crossing_times, theorem_target
from groupsparse.analysis.stability import stability_by_D
from groupsparse.analysis.stats import Prediction, verdict
from groupsparse.config.specs import ConfigError
from groupsparse.study.runs import expand

from conftest import tiny_config
from conftest import tiny_spec as tiny


def min_attention_runs(rest, D_grid=(4, 6, 8, 12, 16), seeds=4, noise=0.02, d=10, budget=None, seed=0, **extra):
    """Trajectories whose 1 - min over queries of S[j*, j] is ``rest(t, D)`` times seed noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for D in D_grid:
        last = budget or int(4 * D**3)
        steps = np.unique(np.r_[0, np.round(np.geomspace(1, last, 400))]).astype(int)
        for s in range(seeds):
            scale = math.exp(noise * rng.standard_normal())
            r = np.clip(rest(steps / scale, D), 1e-300, 1)
            for st, rr in zip(steps, r):
                rows.append(
                    {
                        "run": f"scale_d{d}_D{D}",
                        "role": "scaling",
                        "variant": "",
                        "d": d,
                        "D": D,
                        "seed": s,
                        "step": int(st),
                        "eta": 1.0,  # flow time = steps: the synthetic laws are written in steps
                        "flow_time": float(st),
                        "eval_loss": 0.1,
                        "attention_on_relevant": 1 - rr / 2,
                        "attention_min_on_relevant": 1 - rr,
                        "cos_v1_vstar": 1.0,
                        "status": "ok",
                        **extra,
                    }
                )
    return pd.DataFrame(rows)


def power_time(a):
    """1 - min = exp(-t / D^(a - 1)): reaches 1 - exp(-c D) at t = c D^a, an exact exponent a for every c."""
    return lambda t, D: np.exp(-t / D ** (a - 1))


SETTINGS = settings(n_boot=400, loss_target=None, thresholds=(0.5,), target_c=(0.1, 0.2, 0.3), kappas=(0.5, 1, 2))


def kappa_claim(a, c, d=10):
    rows = a.claims[
        (a.claims["analysis"] == "bound_constant")
        & a.claims["claim"].str.contains(f"1 - exp(-{c:g} D) within flow time kappa D^3", regex=False)
        & (a.claims["d"] == d)
    ]
    assert len(rows) == 1
    return rows.iloc[0]


def test_theorem_target_is_the_d_dependent_level_on_the_minimum():
    traj = min_attention_runs(power_time(3.0), D_grid=(4, 8), seeds=1, noise=0)
    cr = crossing_times(traj, thresholds=(), target_c=(0.2,))
    assert set(cr["quantity"]) == {"attention_min_on_relevant"}
    for _, row in cr.iterrows():
        assert row["threshold"] == pytest.approx(theorem_target(0.2, row["D"]))
        assert row["step"] == pytest.approx(0.2 * row["D"] ** 3, rel=0.02)  # t = c D^a, a = 3


@pytest.mark.parametrize("exponent", [2.5, 3.0, 3.8])
def test_the_bound_constant_is_the_largest_ratio_to_D3(exponent):
    """T_c(D) = c D^a: kappa_c = max over D of c D^(a - 3), reached at D = 4 for a < 3, at D = 16 for a > 3."""
    a = analyse(min_attention_runs(power_time(exponent), noise=0.01), None, SETTINGS)
    for c in (0.1, 0.2, 0.3):
        row = kappa_claim(a, c)
        D_top = 4 if exponent < 3 else 16
        assert row["measured"] == pytest.approx(c * D_top ** (exponent - 3), rel=0.05)
        assert row["low"] < row["measured"] < row["high"] and row["verdict"] == "descriptive"
        assert f"at every measured D (4, 6, 8, 12, 16), kappa = {row['measured']:.3g}" in row["why"]
        assert row["D_grid"] == "4, 6, 8, 12, 16" and (exponent == 3 or row["D"] == D_top)
        assert ("may still grow" in row["why"]) == (exponent > 3)
        assert "(c chosen after seeing data)" in row["claim"]  # the schema's default: not pre-registered


def test_a_level_whose_target_lies_below_the_start_bounds_the_constant_from_above():
    """1 - min attention = 0.5 exp(-t / D^3): the target 1 - exp(-0.1 D) at D = 4 and 6 (0.33, 0.45) lies below
    the start (0.5), so tau_c(4) is only bounded from above; it cannot be the maximum, and the constant is read from the
    other levels (it was inconclusive, as if censored from below)."""
    rest = lambda t, D: 0.5 * np.exp(-t / D**3)  # noqa: E731
    a = analyse(min_attention_runs(rest, noise=0.01), None, SETTINGS.replace(target_c=(0.1,)))
    row = kappa_claim(a, 0.1)
    assert row["verdict"] == "descriptive" and "below the start at D = [4, 6]" in row["config"]
    # the largest ratio: at D = 16, log(0.5 / exp(-1.6)) = 0.907
    assert row["measured"] == pytest.approx(math.log(0.5 / math.exp(-1.6)), rel=0.05)


def test_no_slope_verdict_on_a_sufficient_time():
    a = analyse(min_attention_runs(power_time(3.8)), None, SETTINGS)
    rates = a.claims[a.claims["analysis"] == "convergence_time"]
    assert len(rates) and set(rates["verdict"]) == {"descriptive"}
    assert not a.claims["why"].str.contains("exceeds").any()


def test_the_one_sided_rule():
    bound = Prediction("at_most", 3.0)
    assert verdict(bound, 2.9, math.inf)[0] == "consistent"
    assert verdict(bound, 3.1, math.inf)[0] == "does not hold"
    assert verdict(bound, 3.1, math.inf, blocker="1 level(s) censored")[0] == "inconclusive"


def test_a_target_not_reached_leaves_the_constant_a_lower_bound():
    """c = 0.3 at D = 16 needs 0.3 x 16^3 = 1229 steps; a budget of 1000 censors that level."""
    a = analyse(min_attention_runs(power_time(3.0), budget=1000), None, SETTINGS)
    cr = a.crossings
    assert cr[(cr["D"] == 16) & (cr["c"] == 0.3)]["censored"].all()
    row = kappa_claim(a, 0.3)
    assert "D=16 censored" in row["why"]
    assert "kappa = " in kappa_claim(a, 0.1)["why"]  # 0.1 x 16^3 = 410 steps: within the budget


def law_rows(a, kappa):
    law = a.claims[a.claims["claim"].str.contains(f"at flow time {kappa:g} D^3: curvature in D", regex=False)]
    falls = a.claims[a.claims["claim"].str.contains(f"at flow time {kappa:g} D^3 falls with D", regex=False)]
    assert len(law) == 1 and len(falls) == 1
    return law.iloc[0], falls.iloc[0]


def test_exact_exponential_decay_at_kappa_d3_is_classified_exponential():
    """1 - min = exp(-t / D^2): at t = kappa D^3 it is exp(-kappa D), exactly exponential in D."""
    a = analyse(min_attention_runs(power_time(3.0), D_grid=(3, 4, 5, 6)), None, SETTINGS)
    for kappa in (0.5, 1, 2):
        law, falls = law_rows(a, kappa)
        assert law["verdict"] == "descriptive" and "decision: exponential" in law["config"]
        assert falls["measured"] == pytest.approx(-kappa, rel=0.1)
        # a directional claim: its interval below 0 is a rejection, its power against the slowest decay the
        # config names (exp(-0.1 D)) is stated beside it and does not decide it
        assert falls["verdict"] == "holds" and np.isfinite(falls["power"])
        assert "exp(-c D)" in falls["alternative"]


def test_an_exact_power_law_is_classified_power():
    """1 - min = 0.5 (t / D^3)^(-1/2) D^(-1): at kappa D^3 it is a power of D (exponent -1)."""
    rest = lambda t, D: np.minimum(1.0, 0.5 * np.maximum(t / D**3, 1e-9) ** -0.5 / D)
    a = analyse(min_attention_runs(rest), None, SETTINGS)
    for kappa in (0.5, 1, 2):
        law, falls = law_rows(a, kappa)
        assert law["verdict"] == "descriptive" and "decision: power law" in law["config"]
        assert falls["verdict"] == "holds"  # it falls with D, but as a power
    fits = a.fits_table()
    power = fits[(fits["analysis"] == "attention_concentration") & (fits["law"] == "power")]
    assert np.allclose(power["slope"], -1.0, atol=0.02)


def test_concentration_beyond_a_run_is_censored():
    a = analyse(min_attention_runs(power_time(3.0), budget=2000), None, SETTINGS)
    _, falls = law_rows(a, 2)  # 2 x 16^3 > 2000
    assert falls["verdict"] == "inconclusive" and "censored" in falls["why"]


def batch_runs(shift):
    """Batches 128, 256, 512 of the same seeds (paired); steps scale by exp(shift / batch): log steps
    are linear in 1/batch with the limit c D^3 at 1/batch = 0."""
    frames = []
    for b in (128, 256, 512):
        runs = min_attention_runs(lambda t, D, b=b: power_time(3.0)(t / math.exp(shift / b), D), D_grid=(16,), seed=1)
        variant = "" if b == 512 else f"batch{b}"
        frames.append(runs.assign(batch=b, variant=variant, run=f"scale_d10_D16{'_' + variant if variant else ''}"))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("shift, verdict", [(64.0, "differs"), (1.0, "agrees")])
def test_the_batch_check_says_whether_the_grids_batch_suffices(shift, verdict):
    """Steps scale by exp(shift / batch): against batch 512, batch 128's log flow time differs by
    shift (1/128 - 1/512), 0.375 (beyond the 0.05 tolerance) or 0.006 (within it)."""
    traj = batch_runs(shift)
    s = SETTINGS.replace(target_c=(0.1,), kappas=(0.5,))
    rows = batch_claims(traj, crossing_times(traj, thresholds=(), target_c=(0.1,)), s)
    flow = [r for r in rows if "flow time until" in r["claim"]]
    assert len(flow) == 2  # batches 128 and 256 against the grid's 512
    at128 = next(r for r in flow if "at batch 128, eta 1 minus at batch 512" in r["claim"])
    assert at128["measured"] == pytest.approx(shift * (1 / 128 - 1 / 512), abs=0.01)
    assert at128["verdict"] == verdict


def test_the_by_D_table_puts_every_run_group_side_by_side():
    from groupsparse.analysis.bound import BY_D_COLUMNS, by_D

    traj = batch_runs(64.0)
    s = SETTINGS.replace(target_c=(0.1,), kappas=(0.5,))
    table = by_D(traj, crossing_times(traj, thresholds=(), target_c=(0.1,)), s)
    assert list(table.columns) == BY_D_COLUMNS
    flow = table[table["quantity"].str.startswith("flow time until")].set_index("group")
    assert set(flow.index) == {"", "check:batch128", "check:batch256"}
    # steps scale by exp(64 / batch): the table's geometric means keep that order, each inside its interval
    assert flow.loc["check:batch128", "value"] > flow.loc["check:batch256", "value"] > flow.loc["", "value"]
    assert ((table["low"] <= table["value"]) & (table["value"] <= table["high"])).all()


def test_the_population_and_batch_figure_draws_every_run_of_a_D(tmp_path):
    from groupsparse.figures import theorem as theorem_figures

    traj = batch_runs(64.0)
    s = SETTINGS.replace(target_c=(0.1,), kappas=(0.5,))
    fig = theorem_figures.population_and_batch_figure(traj, s)
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]
    assert len(axes) == 1 and len(axes[0].get_lines()) == 3 + 1  # three batches and the kappa line
    paths = theorem_figures.write(traj, None, s, tmp_path)
    assert {p.name for p in paths} >= {"population_and_batch.png", "out_of_sample.png"}
    single = theorem_figures.population_and_batch_figure(traj[traj["batch"] == 512], s)  # one run: says so
    assert "no D with more than one run" in " ".join(t.get_text() for ax in single.axes for t in ax.texts)
    # no population run: the title does not promise one; two d at one D: each curve says its d
    assert not fig._suptitle.get_text().startswith("Population")
    # a flow study's runs: the title names the flow, not gradient descent
    flowing = theorem_figures.population_and_batch_figure(traj.assign(algorithm="flow"), s)
    assert flowing._suptitle.get_text().startswith("Population gradient flow")
    other = traj.assign(d=traj["d"] + 1, run=traj["run"] + "_other_d")
    two = theorem_figures.population_and_batch_figure(pd.concat([traj, other], ignore_index=True), s)
    labels = [line.get_label() for ax in two.axes for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert len(labels) == 6 and len(set(labels)) == 6 and all(lab.startswith("d = ") for lab in labels), labels
    # an Adam run has no flow time: left out of the flow-time axis, and the title says so
    adam = traj[traj["batch"] == 512].assign(run="adam_run", optimizer="adam", variant="adam")
    with_adam = theorem_figures.population_and_batch_figure(pd.concat([traj.assign(optimizer="gd"), adam]), s)
    axes = [ax for ax in with_adam.axes if ax.get_visible() and ax.has_data()]
    assert len(axes[0].get_lines()) == 3 + 1 and "Not drawn: Adam" in with_adam._suptitle.get_text()


def stability_runs(rate_early, rate_late, seeds=3):
    rows = []
    for s in range(seeds):
        for step in range(0, 1501, 25):
            early = min(step, 500)
            log_ratio = -14 + rate_early * early / 1000 + rate_late * max(step - 500, 0) / 1000 + 0.01 * s
            rows.append(
                {
                    "run": "ablation_symmetry_breaking",
                    "role": "ablation",
                    "variant": "symmetry_breaking",
                    "d": 10,
                    "D": 10,
                    "seed": s,
                    "step": step,
                    "status": "ok",
                    "v1_norm": 2.0,
                    "v2_norm": 2.0 * math.exp(log_ratio),
                    "W_ff_norm": 1.0,
                    "W_pp_norm": 0.0,
                    "W_fp_norm": math.exp(log_ratio),
                    "W_pf_norm": 0.0,
                }
            )
    return pd.DataFrame(rows)


def test_a_growing_perturbation_is_unstable_and_a_decaying_one_stable():
    rows = {
        (r["claim"].split(",")[0], r["claim"].split(", ")[1].split(" ")[0]): r
        for r in stability_claims(stability_runs(20.0, -0.5))
    }
    early = [r for k, r in rows.items() if k[1] == "early"]
    late = [r for k, r in rows.items() if k[1] == "late"]
    assert len(early) == 2 and len(late) == 2
    assert all(r["verdict"] == "does not hold" and r["measured"] == pytest.approx(20.0, rel=0.01) for r in early)
    assert all(r["verdict"] == "holds" and r["measured"] == pytest.approx(-0.5, rel=0.05) for r in late)


def test_a_run_that_never_leaves_the_subspace_has_no_stability_row():
    runs = stability_runs(20.0, -0.5).assign(v2_norm=0.0, W_fp_norm=0.0)
    assert stability_claims(runs) == []


def test_steps_per_d3_and_the_batch_check_expand_to_runs():
    cfg = tiny_config()
    cfg["scaling"] = {
        "enabled": True,
        "task": {"d": 4},
        "d_grid": [4],
        "D_grid": [4, 16],
        "steps_per_D3": 1.5,
        "pretrain": {"steps": 100},
        "batch_check": {"d": 4, "D": 16, "batches": [32]},
    }
    runs = expand(cfg)
    assert runs["scale_d4_D4"].spec["pretrain"]["steps"] == 100  # 1.5 x 64 = 96 < 100
    assert runs["scale_d4_D16"].spec["pretrain"]["steps"] == math.ceil(1.5 * 16**3)
    check = runs["scale_d4_D16_batch32"]
    assert check.spec["pretrain"]["batch"] == 32 and check.spec["variant"] == "batch32" and check.role == "scaling"
    assert check.spec["task_name"] == "scale_d4_D16"  # the grid run's tasks: a paired comparison
    assert check.spec["pretrain"]["steps"] == runs["scale_d4_D16"].spec["pretrain"]["steps"]
    assert not check.methods


def test_a_step_size_check_runs_the_grid_at_a_scaled_eta_for_the_same_flow_time():
    import yaml

    from conftest import REPO

    config = yaml.safe_load((REPO / "configs" / "population_gd.yaml").read_text())
    runs = expand(config)
    grid, half = runs["scale_d10_D16"].spec["pretrain"], runs["scale_d10_D16_batch128_eta0p5"].spec["pretrain"]
    assert runs["scale_d10_D16_batch128_eta0p5"].spec["variant"] == "batch128_eta0p5"
    assert half["eta"] == pytest.approx(0.5 * min(0.5, 6 / 16)) and half.get("eta_D_limit") is None
    assert half["steps"] * half["eta"] == pytest.approx(grid["steps"] * min(0.5, 6 / 16), rel=1e-3)


def test_transfer_d_grid_limits_transfer_to_its_levels():
    cfg = tiny_config()
    cfg["scaling"] = {
        "enabled": True,
        "task": {"d": 4},
        "d_grid": [4],
        "D_grid": [4, 6, 8],
        "transfer": {"enabled": True, "sizes": [8, 16], "methods": ["logreg"]},
        "transfer_D_grid": [4, 8],
    }
    runs = expand(cfg)
    assert runs["scale_d4_D4"].methods == ["logreg"] and runs["scale_d4_D8"].methods == ["logreg"]
    assert not runs["scale_d4_D6"].methods
    cfg["scaling"]["transfer_D_grid"] = [5]
    with pytest.raises(ConfigError, match="transfer_D_grid"):
        expand(cfg)


def test_min_over_queries_is_recorded_against_a_direct_computation():
    from groupsparse.model.transformer import embed, forward
    from groupsparse.training.pretrain import Trainer

    spec = tiny(pretrain={"steps": 30, "eta": 0.5, "batch": 64, "eval_size": 256, "record_every": 30}, D=5)
    trainer = Trainer(spec, [0, 1])
    res = trainer.run()
    last = res.trajectory[res.trajectory.step == 30].set_index("seed")
    # the evaluation set is i.i.d.: its second half is not the mirror of the first
    X = trainer.recorder.Z_eval[..., : spec.task.d]
    assert not torch.allclose(X[:, 128:], -X[:, :128])
    _, attn = forward(res.params, trainer.recorder.Z_eval, spec.model)  # (S, N, key, query)
    mean = attn.mean(1)
    for i, seed in enumerate([0, 1]):
        j = int(res.tasks[i].j_star)
        per_query = mean[i, j, :]
        assert last.loc[seed, "attention_min_on_relevant"] == pytest.approx(float(per_query.min()), abs=1e-6)
        assert last.loc[seed, "attention_on_relevant"] == pytest.approx(float(per_query.mean()), abs=1e-6)
        assert last.loc[seed, "attention_min_on_relevant"] <= last.loc[seed, "attention_on_relevant"]
    assert embed  # the embedding the trainer used is model.embed


def test_min_over_queries_is_reproducible_per_seed():
    from groupsparse.training.pretrain import Trainer

    spec = tiny(pretrain={"steps": 10, "record_every": 5})
    a = Trainer(spec, [0, 1]).run().trajectory
    b = Trainer(spec, [1]).run().trajectory
    col = "attention_min_on_relevant"
    assert a[a.seed == 1][col].tolist() == b[col].tolist()


def test_stability_rows_per_D_say_whether_training_reaches_the_solution():
    """A stability variant that follows the grid run (D = 4) and one that loses attention (D = 16):
    per run the theorem's level is tested on the minimum over queries, and |v2| / |v1|, the cross
    blocks, the loss and the paired difference from the grid run are reported with t intervals."""
    extra = {"v1_norm": 2.0, "v2_norm": 0.0, "W_ff_norm": 1.0, "W_fp_norm": 0.0, "W_pf_norm": 0.0, "W_pp_norm": 1.0}
    grid = min_attention_runs(power_time(3.0), D_grid=(4, 16), seeds=3, budget=128, **extra)  # 1 - min >= 3e-4
    good = grid[grid["D"] == 4].assign(run="stab_autograd_d10_D4", variant="autograd")
    bad = grid[grid["D"] == 16].assign(run="stab_autograd_d10_D16", variant="autograd")
    bad = bad.assign(attention_min_on_relevant=0.05, v2_norm=3.0, W_fp_norm=2.0)
    rows = stability_by_D(pd.concat([grid, good, bad], ignore_index=True), SETTINGS)
    by = {(r["D"], r["claim"].split(": ", 1)[-1]): r for r in rows}
    reach4 = next(r for r in rows if r["D"] == 4 and "reaches the theorem's level" in r["claim"])
    reach16 = next(r for r in rows if r["D"] == 16 and "reaches the theorem's level" in r["claim"])
    assert reach4["verdict"] == "holds" and reach16["verdict"] == "does not hold"
    assert reach4["measured"] == pytest.approx(1 - math.exp(-128 / 16), abs=1e-4)  # the minimum at the last step
    v2 = [r for r in rows if "|v2| / |v1|" in r["claim"]]
    assert {r["D"]: r["measured"] for r in v2} == {4: 0.0, 16: 1.5}
    paired = next(r for r in rows if r["D"] == 4 and "minus the grid run" in r["claim"])
    assert paired["measured"] == pytest.approx(0.0, abs=1e-12)  # the same seeds and steps as the grid run
    assert len(by) == len(rows) == 2 * 6
    # a variant at a quarter of the step size that follows the grid run in flow time: 4x the steps, the same
    # curve against eta x steps, so the paired difference at equal flow time is 0 (it was compared at the
    # same step, beyond the grid run's last flow time: NaN); Adam (no flow time) is paired at the same step
    slow = good.assign(run="stab_eta025_d10_D4", variant="eta025", step=good["step"] * 4, eta=0.25)
    # its step count rounded up, as a run at another step size has it: it ends 0.2 past the grid's flow time
    end = slow["step"] == slow["step"].max()
    slow.loc[end, "flow_time"] = slow.loc[end, "flow_time"] + 0.2
    adam = good.assign(run="stab_adam_d10_D4", variant="adam", optimizer="adam", eta=0.001)
    adam = adam.assign(flow_time=adam["step"] * 0.001)
    rows = stability_by_D(pd.concat([grid.assign(optimizer="gd"), slow.assign(optimizer="gd"), adam]), SETTINGS)
    pair = {r["run"]: r for r in rows if "minus the grid run" in r["claim"]}
    assert pair["stab_eta025_d10_D4"]["measured"] == pytest.approx(0.0, abs=1e-9)
    assert "same flow time" in pair["stab_eta025_d10_D4"]["claim"] and "same step" in pair["stab_adam_d10_D4"]["claim"]
    assert pair["stab_adam_d10_D4"]["measured"] == pytest.approx(0.0, abs=1e-9)  # the grid's curve step for step
    # the power's alternative, the grid run's value where the variant stopped, is read at the same flow time
    # too (at the same step the slow variant's last step lies beyond the grid run: no alternative, no power)
    level = {r["run"]: r for r in rows if "reaches the theorem's level" in r["claim"]}
    slow_level, grid_end = level["stab_eta025_d10_D4"], reach4["measured"]  # the grid run at its last step
    assert "at this flow time" in slow_level["alternative"]
    assert "at this step" in level["stab_adam_d10_D4"]["alternative"]
    assert float(slow_level["alternative"].split("value ")[-1].rstrip(")")) == pytest.approx(grid_end, abs=1e-3)
    assert slow_level["verdict"] == "holds" and math.isfinite(slow_level["power"])
