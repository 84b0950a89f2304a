"""Transfer comparison: tasks, methods, the hyperparameter rule, the table, the CLI's refusals."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from groupsparse.cli import EXIT_CONFIG, EXIT_INPUT, main
from groupsparse.config.specs import ConfigError, RunSpec
from groupsparse.io import files as io
from groupsparse.training.pretrain import Trainer, checkpoint_payload
from groupsparse.transfer import TransferSpec, check_transfer, method_names
from groupsparse.transfer.baselines import encoder_layer
from groupsparse.transfer.runner import COLUMNS, STATUSES, run_transfer
from groupsparse.transfer.tasks import draw, heldout_generator, make_downstream_tasks, pretrain_task, train_generator

RUN = {"study_seed": 3, "task_name": "tiny", "task": {"d": 4, "D": 4}, "pretrain": {"steps": 300, "batch": 256}}
SEEDS = [0, 1, 2]
# Smaller nets than the defaults keep this file fast; the fixed rule (one fit per cell) for the
# behavioural tests; the cross-validation tests below set selection: cv (the default).
SMALL = {
    "test_size": 2000,
    "selection": "fixed",
    "hyperparameters": {
        "mlp": {"width": 32, "min_steps": 100},
        "std_transformer": {"width": 16, "heads": 2, "ff_width": 32, "min_steps": 100},
    },
}

pytestmark = pytest.mark.xdist_group("transfer_tables")  # its module fixtures run once, on one worker


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny pretrained checkpoint (d = D = 4, 300 steps: attention mass on j* about 0.9)."""
    spec = RunSpec.from_dict(RUN)
    res = Trainer(spec, SEEDS).run()
    assert res.status == ["ok"] * len(SEEDS)
    path = tmp_path_factory.mktemp("ck") / "tiny.safetensors"
    io.save_checkpoint(path, *checkpoint_payload(spec, res, SEEDS))
    return path


def _run(checkpoint, methods, sizes, **transfer):
    return run_transfer(
        RunSpec.from_dict(RUN), TransferSpec.from_dict(SMALL | transfer), checkpoint, methods, sizes
    ).table


METHODS = method_names()


def _hp(row) -> dict:
    """A row's fitted settings (its p_* columns, empty ones left out) and how they were chosen."""
    hp = {k[2:]: v for k, v in row.items() if k.startswith("p_") and not (v is None or v is pd.NA or v != v)}
    edge = row.get("hp_edge") or ""
    at_edge = edge.split(",") if edge else []
    return hp | {"rule": row["selection"], "cv_accuracy": row["cv_accuracy"], "at_edge": at_edge}


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    keys = ["downstream", "seed", "method", "n"]
    df = df.drop(columns=list(io.TIMING_COLUMNS), errors="ignore")
    return df[sorted(df.columns)].sort_values(keys).reset_index(drop=True)  # p_* columns: in order of appearance


@pytest.fixture(scope="module")
def moderate(checkpoint):
    """Every method at a moderate n on both downstream tasks."""
    return _run(checkpoint, list(METHODS), [256])


# -- the table ---------------------------------------------------------------------------


def test_table_schema_and_one_row_per_cell(moderate):
    assert list(moderate.columns[: len(COLUMNS)]) == COLUMNS
    assert all(c.startswith("p_") for c in moderate.columns[len(COLUMNS) :])
    assert moderate["p_max_iter"].dtype == "Int64" and moderate["p_C"].dtype == "float64"
    assert moderate["p_solver"].dtype == "string"
    assert len(moderate) == 2 * len(SEEDS) * len(METHODS)
    assert not moderate.duplicated(["task_name", "downstream", "seed", "method", "n"]).any()
    assert set(moderate["status"]) <= set(STATUSES)
    assert (moderate[["d", "D"]] == 4).all().all()
    for _, row in moderate.iterrows():
        method, hp = row["method"], _hp(row)
        assert hp["rule"] == "fixed"
        if method == "group_lasso":  # the data-dependent penalty actually used is recorded
            assert hp["alpha"] > 0 and 0 <= hp["groups_selected"] <= 4
    assert ((moderate["test_accuracy"] >= 0) & (moderate["test_accuracy"] <= 1)).all()


def test_every_method_beats_chance_on_the_transfer_task(moderate):
    acc = moderate[moderate.downstream == "transfer"].groupby("method")["test_accuracy"].mean()
    assert set(acc.index) == set(METHODS)
    # 3 seeds x 2000 test samples: chance gives 0.5 +- 0.007 (1 sd)
    assert (acc > 0.6).all(), acc.to_dict()


def test_finetuned_pretrained_model_beats_the_same_model_from_scratch(checkpoint):
    table = _run(checkpoint, ["pretrained_finetune", "scratch_transformer"], [512], downstream=["transfer"])
    acc = table.groupby("method")["test_accuracy"].mean()
    assert acc["pretrained_finetune"] > acc["scratch_transformer"] + 0.05, acc.to_dict()


def test_a_fresh_read_out_on_the_pretrained_attention_learns_fast(checkpoint):
    """v_start: zero drops the pretrained v (which points along the old v*); attention stays."""
    table = _run(
        checkpoint,
        ["pretrained_frozen_W"],
        [64],
        downstream=["transfer"],
        hyperparameters={"pretrained_frozen_W": {"v_start": "zero"}},
    )
    assert table["test_accuracy"].mean() > 0.8
    assert table["p_v_start"].iloc[0] == "zero"


def test_frozen_attention_is_useless_when_j_star_moves(moderate):
    """Negative control: attention pinned on the old j* sees only noise; the linear model does not care."""
    acc = moderate.groupby(["downstream", "method"])["test_accuracy"].mean()
    assert acc["transfer", "pretrained_frozen_W"] > 0.8
    assert acc["negative_control", "pretrained_frozen_W"] < 0.6
    assert acc["negative_control", "logreg"] > 0.8
    moved = moderate[moderate.downstream == "negative_control"]
    assert (moved["j_star"] != moved["pretrain_j_star"]).all()
    same = moderate[moderate.downstream == "transfer"]
    assert (same["j_star"] == same["pretrain_j_star"]).all()


def test_logreg_row_matches_a_direct_scikit_learn_fit(moderate):
    from sklearn.linear_model import LogisticRegression

    spec, tspec = RunSpec.from_dict(RUN), TransferSpec.from_dict(SMALL)
    seed, n = SEEDS[1], 256
    task = make_downstream_tasks(spec, seed, tspec)["transfer"]
    X, y = draw(task, n, train_generator(spec, seed, "transfer", n), "train")
    Xt, yt = draw(task, tspec.test_size, heldout_generator(spec, seed, "transfer"), "test")
    model = LogisticRegression(C=1.0, max_iter=1000).fit(X.reshape(n, -1).numpy(), y.numpy())
    f = model.decision_function(Xt.reshape(len(yt), -1).numpy())
    row = moderate[(moderate.downstream == "transfer") & (moderate.method == "logreg") & (moderate.seed == seed)]
    assert row["test_accuracy"].item() == pytest.approx(
        float(np.mean(np.where(f > 0, 1.0, -1.0) == yt.numpy())), abs=1e-12
    )
    assert row["test_loss"].item() == pytest.approx(float(np.mean(np.logaddexp(0, -yt.numpy() * f))), rel=1e-9)


# -- identity of the data: reruns and split grids ----------------------------------------


def test_same_seeds_identical_tables_and_a_split_grid_changes_nothing(checkpoint):
    whole = _run(checkpoint, list(METHODS), [16, 32], downstream=["transfer"])
    again = _run(checkpoint, list(METHODS), [16, 32], downstream=["transfer"])
    pd.testing.assert_frame_equal(_comparable(whole), _comparable(again))
    parts = [
        _run(checkpoint, list(METHODS[:4]), [32], downstream=["transfer"]),
        _run(checkpoint, list(METHODS[4:]), [32], downstream=["transfer"]),
        _run(checkpoint, list(reversed(METHODS)), [16], downstream=["transfer"]),
    ]
    pd.testing.assert_frame_equal(_comparable(whole), _comparable(pd.concat(parts)))
    assert (whole["status"] == "ok").all()


def test_control_methods_limit_the_negative_control_and_change_no_other_row(checkpoint):
    methods = ["pretrained_frozen_W", "logreg", "mlp"]
    every = _run(checkpoint, methods, [32])
    limited = _run(checkpoint, methods, [32], control_methods=["pretrained_frozen_W", "logreg"])
    control = limited[limited["downstream"] == "negative_control"]
    assert set(control["method"]) == {"pretrained_frozen_W", "logreg"}
    kept = every[(every["downstream"] == "transfer") | (every["method"] != "mlp")]
    pd.testing.assert_frame_equal(_comparable(kept), _comparable(limited))
    with pytest.raises(ConfigError, match="control_methods"):
        check_transfer({"control_methods": ["ridge"]})


def test_downstream_tasks_share_the_pattern_and_change_the_direction():
    spec = RunSpec.from_dict(RUN)
    for seed in SEEDS:
        base = pretrain_task(spec, seed)
        tasks = make_downstream_tasks(spec, seed, TransferSpec.from_dict({"angle_deg": 60.0}))
        assert tasks["transfer"].j_star == base.j_star
        assert float(tasks["transfer"].v_star @ base.v_star) == pytest.approx(0.5, abs=1e-12)
        assert tasks["negative_control"].j_star not in base.relevant.tolist()
        assert torch.equal(tasks["negative_control"].directions, tasks["transfer"].directions)
        fresh = make_downstream_tasks(spec, seed, TransferSpec.from_dict({"sigma_x": 2.0}))["transfer"]
        assert fresh.spec.sigma_x == 2.0
        assert abs(float(fresh.v_star.norm()) - 1) < 1e-12
        again = make_downstream_tasks(spec, seed, TransferSpec.from_dict({"sigma_x": 2.0}))["transfer"]
        assert torch.equal(fresh.directions, again.directions)


# -- the hyperparameter rule, divergence, the std transformer -----------------------------


def test_cross_validation_picks_from_the_grid(checkpoint):
    grid = {"logreg": {"C": [0.01, 100.0]}, "pretrained_frozen_W": {"eta": [0.01, 0.3]}}
    table = _run(
        checkpoint,
        ["logreg", "pretrained_frozen_W"],
        [3, 48],
        selection="cv",
        cv_folds=2,
        grids=grid,
        downstream=["transfer"],
    )
    for _, row in table.iterrows():
        hp = _hp(row)
        if row["n"] == 3:  # fewer than 2 samples per fold: the fixed defaults
            assert hp["rule"].startswith("fixed")
        else:
            assert hp["rule"] == "cv (2 folds)" and 0 <= hp["cv_accuracy"] <= 1
            name, values = next(iter(grid[row["method"]].items()))
            assert hp[name] in values


def test_a_seed_whose_pretraining_diverged_is_skipped_not_fatal(checkpoint, tmp_path):
    tensors, meta = io.load_checkpoint(checkpoint)
    meta["status"] = ["ok", "diverged", "ok"]
    broken = tmp_path / "diverged.safetensors"
    io.save_checkpoint(broken, tensors, meta)
    table = _run(broken, ["pretrained_finetune", "logreg"], [16], downstream=["transfer"])
    skipped = table[table.status == "skipped_pretrain_diverged"]
    assert set(zip(skipped.seed, skipped.method)) == {(1, "pretrained_finetune")}
    assert skipped[["test_accuracy", "test_loss", "train_accuracy"]].isna().all().all()
    assert (table[table.status != "skipped_pretrain_diverged"]["status"] == "ok").all()
    full = _run(checkpoint, ["pretrained_finetune"], [16], downstream=["transfer"])
    kept = table[(table.method == "pretrained_finetune") & (table.seed != 1)]
    # the other seeds' numbers do not depend on which seeds share their batch
    assert np.allclose(kept["test_accuracy"].to_numpy(), full[full.seed != 1]["test_accuracy"].to_numpy())


def test_fine_tuning_gradient_closed_form_equals_autograd():
    from groupsparse.model.transformer import embed
    from groupsparse.transfer.paper_model import _sgd_grads

    spec = RunSpec.from_dict(RUN)
    gen = torch.Generator().manual_seed(4)
    params = {
        "layer0.W": torch.randn(2, 8, 8, generator=gen, dtype=torch.float64),
        "v": torch.randn(2, 8, generator=gen, dtype=torch.float64),
    }
    Z = embed(torch.randn(2, 1, 4, 4, generator=gen, dtype=torch.float64), spec.model)
    y = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    closed = _sgd_grads(params, Z, y, spec.model, True, 1.0, ("layer0.W", "v"))
    auto = _sgd_grads(params, Z, y, spec.model, False, 1.0, ("layer0.W", "v"))
    for k in closed:
        torch.testing.assert_close(closed[k], auto[k], rtol=1e-10, atol=1e-12)


def test_a_model_variant_fine_tunes_through_autograd(tmp_path):
    run = {
        "study_seed": 5,
        "task_name": "variant",
        "task": {"d": 3, "D": 3},
        "model": {"layers": 2, "positions": "add"},
        "pretrain": {"steps": 40, "batch": 128},
    }
    spec = RunSpec.from_dict(run)
    res = Trainer(spec, [0, 1]).run()
    path = tmp_path / "variant.safetensors"
    io.save_checkpoint(path, *checkpoint_payload(spec, res, [0, 1]))
    table = run_transfer(
        spec,
        TransferSpec.from_dict({"test_size": 500, "downstream": ["transfer"]}),
        path,
        ["pretrained_finetune", "pretrained_frozen_W", "scratch_transformer"],
        [32],
    ).table
    assert (table["status"] == "ok").all() and table["test_accuracy"].notna().all()


def test_std_transformer_layer_is_torch_encoder_layer():
    h, heads, ff, T = 8, 2, 16, 5
    layer = (
        torch.nn.TransformerEncoderLayer(
            h, heads, ff, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        .double()
        .eval()
    )
    x = torch.randn(3, T, h, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sa = layer.self_attn
    p = {
        "l.in.W": sa.in_proj_weight.T[None],
        "l.in.b": sa.in_proj_bias[None],
        "l.out.W": sa.out_proj.weight.T[None],
        "l.out.b": sa.out_proj.bias[None],
        "l.ff1.W": layer.linear1.weight.T[None],
        "l.ff1.b": layer.linear1.bias[None],
        "l.ff2.W": layer.linear2.weight.T[None],
        "l.ff2.b": layer.linear2.bias[None],
        "l.ln1.w": layer.norm1.weight[None],
        "l.ln1.b": layer.norm1.bias[None],
        "l.ln2.w": layer.norm2.weight[None],
        "l.ln2.b": layer.norm2.bias[None],
    }
    with torch.no_grad():
        for t in p.values():
            t.add_(0.1 * torch.randn(t.shape, generator=torch.Generator().manual_seed(2), dtype=t.dtype))
        torch.testing.assert_close(encoder_layer(p, "l", x[None], heads)[0], layer(x), rtol=1e-10, atol=1e-10)


def test_the_method_registry_is_read_without_importing_torch():
    """The Snakefile reads the registry at parse time: listing the method modules, their grids and
    their costs imports no torch (each fit imports it when called)."""
    code = (
        "import sys; import groupsparse.transfer as t; from groupsparse import costs; "
        "from groupsparse.transfer.methods import registry; ms = registry(); "
        "[m.work(8, 8, 1, 3, 4, 7) for m in ms.values()]; t.TransferSpec.from_dict({}); "
        "print(len(ms), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == [str(len(METHODS)), "False"], out.stderr


def test_the_fine_tuning_variants_are_the_named_points_of_one_method_grid():
    """pretrained_sgd's two settings (what is trained, where v starts) form a 2 x 2 grid; each point
    is a method of its own name with those settings as its defaults, fitted by the same module."""
    from groupsparse.transfer.methods import method, pretrained_sgd

    grid = {(t, v) for t in pretrained_sgd.CHOICES["train"] for v in pretrained_sgd.CHOICES["v_start"]}
    points = {name: (e["settings"]["train"], e["settings"]["v_start"]) for name, e in pretrained_sgd.VARIANTS.items()}
    assert set(points.values()) == grid and len(points) == len(grid)
    assert "pretrained_sgd" not in METHODS
    for name, (train, v_start) in points.items():
        info = method(name)
        assert info.module is pretrained_sgd and info.online
        assert (info.defaults["train"], info.defaults["v_start"]) == (train, v_start)


def test_the_registry_lists_each_method_module_once_with_its_declarations():
    from groupsparse.transfer.methods import method, names_where

    assert len(METHODS) == len(set(METHODS)) == 10
    assert names_where(family="pretrained") == tuple(m for m in METHODS if m.startswith("pretrained"))
    assert names_where(theory=True) == ("pretrained_finetune", "pretrained_frozen_W")
    assert names_where(library="skglm") == ("group_lasso",)
    for name in METHODS:
        info = method(name)
        assert info.costs_like in METHODS and method(info.costs_like).costs_like == info.costs_like
        assert set(info.grid) <= set(info.defaults), name  # CV tunes declared settings only


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"max_n": 1}, "transfer.max_n"),
        ({"foo": 1}, "transfer.foo"),
        ({"downstream": ["other"]}, "transfer.downstream"),
        ({"selection": "grid"}, "transfer.selection"),
        ({"hyperparameters": {"mlp": {"lr": 0}}}, "transfer.hyperparameters.mlp.lr"),
        ({"hyperparameters": {"logreg": {"alpha": 1.0}}}, "transfer.hyperparameters.logreg.alpha"),
        ({"grids": {"nope": {"lr": [1.0]}}}, "transfer.grids.nope"),
        ({"angle_deg": 270}, "transfer.angle_deg"),
    ],
)
def test_bad_settings_name_their_key(raw, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_transfer(raw)


def _cli(checkpoint, out, run=RUN, methods="logreg", sizes="8,16", transfer=SMALL):
    spec = json.dumps({"run": run, "transfer": transfer})
    return main(
        [
            "transfer",
            "--spec",
            spec,
            "--checkpoint",
            str(checkpoint),
            "--methods",
            methods,
            "--sizes",
            sizes,
            "--out",
            str(out),
            "--threads",
            "1",
        ]
    )


def test_cli_writes_the_table_with_provenance(checkpoint, tmp_path):
    out = tmp_path / "t.parquet"
    assert _cli(checkpoint, out, transfer=SMALL | {"downstream": ["transfer"]}) == 0
    table = io.read_parquet(out)
    # the command adds the run's role and variant
    assert len(table) == 2 * len(SEEDS) and list(table.columns) == [
        COLUMNS[0],
        "role",
        "variant",
        *COLUMNS[1:],
        "p_C",
        "p_max_iter",
    ]
    prov = io.read_provenance(out)
    assert prov["run_science_hash"] == RunSpec.from_dict(RUN).science_hash() and prov["sizes"] == [8, 16]


@pytest.mark.parametrize(
    "change, code, message",
    [
        ({"methods": "logreg,ridge"}, EXIT_CONFIG, "unknown method 'ridge'"),
        ({"sizes": "8,128", "transfer": SMALL | {"max_n": 64}}, EXIT_CONFIG, "n = 128 exceeds transfer.max_n = 64"),
        ({"run": RUN | {"task": {"d": 5, "D": 4}}}, EXIT_INPUT, "task.d = 4, but the run spec has task.d = 5"),
        ({"run": RUN | {"study_seed": 4}}, EXIT_INPUT, "j\\* = |science_hash"),
        ({"run": RUN | {"pretrain": {"steps": 301, "batch": 256}}}, EXIT_INPUT, "science_hash"),
    ],
)
def test_cli_refuses_and_writes_nothing(checkpoint, tmp_path, capsys, change, code, message):
    out = tmp_path / "t.parquet"
    assert _cli(checkpoint, out, **change) == code
    assert pytest.importorskip("re").search(message, capsys.readouterr().err)
    assert not out.exists() and not list(tmp_path.iterdir())


# -- the tuning rule ----------------------------------------------------------------


def test_cv_defaults_and_the_schema_agree():
    """The schema is the home of the transfer defaults; the dataclass repeats them."""
    from pathlib import Path

    import yaml

    schema = yaml.safe_load((Path(__file__).parents[2] / "src/groupsparse/config/config.schema.yaml").read_text())
    props = schema["$defs"]["transfer"]["properties"]
    spec = TransferSpec()
    for key, prop in props.items():
        if "default" in prop and hasattr(spec, key):  # not the job-planning keys (enabled, sizes)
            value = getattr(spec, key)
            assert (list(value) if isinstance(value, tuple) else value) == prop["default"], key
    assert spec.selection == "cv"


def test_grids_are_wide_logarithmic_and_sgd_steps_are_scale_free():
    from groupsparse.transfer.methods import method

    for name_ in METHODS:
        info = method(name_)
        for name, values in info.grid.items():
            assert values == sorted(values) and len(values) >= 3, (name_, name)
            decades = np.log10(values[-1] / values[0])
            assert decades >= (4 if info.online else 2), (name_, name, decades)
        if info.online:
            assert list(info.grid) == ["eta_rel"]


def test_folds_are_stratified_equal_sized_and_hashed():
    from groupsparse.config.seeding import torch_generator
    from groupsparse.transfer.runner import cv_folds

    y = torch.tensor([1.0] * 13 + [-1.0] * 7)
    fold = cv_folds(y, 3, torch_generator("t", 1))
    assert torch.equal(fold, cv_folds(y, 3, torch_generator("t", 1)))
    assert not torch.equal(fold, cv_folds(y, 3, torch_generator("t", 2)))
    assert [(fold == k).sum().item() for k in range(3)] == [6, 6, 6] and (fold == -1).sum().item() == 2
    for k in range(3):
        neg = ((fold == k) & (y < 0)).sum().item()
        assert neg in (2, 3)  # 7 negatives over 3 folds: 2 or 3 each
    spec = TransferSpec()
    assert spec.folds(3) == (1, 1) and spec.folds(5) == (2, 2) and spec.folds(8) == (3, 3)
    assert spec.folds(127) == (3, 3) and spec.folds(128) == (2, 1)


def _fake_logreg(peak_exponent):
    """A 'method' whose validation accuracy falls with |log10 C - peak_exponent|: f = x0 + a x1 with
    a = |log10 C - peak|, labels y = sign(x0) (the data below), so accuracy = P(sign(x0 + a x1) = sign(x0))."""
    from groupsparse.transfer.fitting import FitOutput

    def fit(ctx, X, y, evals, hps, gens, start=None, online=None):
        a = torch.tensor([abs(np.log10(hp["C"]) - peak_exponent) for hp in hps], dtype=torch.float64)[:, None]
        return FitOutput([E[:, :, 0, 0] + a * E[:, :, 1, 1] for E in evals], [None] * len(hps), [{}] * len(hps))

    return fit


@pytest.mark.parametrize("peak, best, edge", [(0.0, 1.0, []), (4.0, 1e4, ["C"]), (-6.0, 1e-4, ["C"])])
def test_cross_validation_finds_the_known_optimum_and_flags_an_edge(monkeypatch, peak, best, edge):

    from groupsparse.transfer import runner
    from groupsparse.transfer.fitting import Context
    from groupsparse.transfer.methods import logreg

    monkeypatch.setattr(logreg, "fit", _fake_logreg(peak))
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(2, 120, 3, 3, generator=gen, dtype=torch.float64)
    y = torch.sign(X[:, :, 0, 0])
    spec = TransferSpec.from_dict({})  # the default rule: cv, 3 folds at n = 120
    ctx = Context(RunSpec.from_dict(RUN), torch.device("cpu"), torch.float64)
    chosen, notes = runner._select(ctx, spec, "logreg", X, y, [("a", 0), ("a", 1)], None)
    for hp, note in zip(chosen, notes):
        assert hp["C"] == best and note["at_edge"] == edge and note["rule"] == "cv (3 folds)"
        if peak == 0.0:
            assert note["cv_accuracy"] == 1.0  # a = 0: f = x0 classifies every sample


def test_cv_rows_record_choice_rule_and_edge_and_rerun_identically(checkpoint):
    methods = ["pretrained_frozen_W_v0", "pretrained_probe", "logreg"]
    table = _run(checkpoint, methods, [3, 24, 200], selection="cv", downstream=["transfer"])
    again = _run(checkpoint, methods, [3, 24, 200], selection="cv", downstream=["transfer"])
    pd.testing.assert_frame_equal(_comparable(table), _comparable(again), check_exact=True)
    from groupsparse.transfer.methods import method

    assert (table["status"] == "ok").all()
    for _, row in table.iterrows():
        hp = _hp(row)
        assert row["selection"] == hp["rule"]
        if row["n"] == 3:
            assert hp["rule"].startswith("fixed") and not row["hp_at_edge"]
            continue
        assert hp["rule"] == ("cv (3 folds)" if row["n"] == 24 else "holdout (1/2 of n)")
        ((name, grid),) = method(row["method"]).grid.items()
        assert hp[name] in grid
        assert row["hp_at_edge"] == (hp[name] in (grid[0], grid[-1])) == bool(hp["at_edge"])
        if name == "eta_rel":  # the step actually used: eta_rel / mean |u|^2 over the n samples
            assert hp["eta"] == pytest.approx(hp["eta_rel"] / hp["u_sq_mean"], rel=1e-5)


# -- the probe of the pretrained representation ----------------------------------------------


def _u(params, X, spec):
    """u(X) = Z S 1 for the paper model, written out: Z^T (row sums of the attention)."""
    from groupsparse.model.transformer import embed, forward

    Z = embed(X[None], spec.model)
    _, attn = forward(params, Z, spec.model)
    return (Z * attn.sum(-1)[..., None]).sum(-2)[0]


def test_probe_equals_scikit_learn_on_the_pretrained_features(checkpoint):
    from sklearn.linear_model import LogisticRegression

    from groupsparse.model.transformer import embed, forward

    spec, seed, n = RunSpec.from_dict(RUN), SEEDS[2], 64
    table = _run(checkpoint, ["pretrained_probe"], [n], selection="cv", downstream=["transfer"])
    row = table[table.seed == seed].iloc[0]
    C = row["p_C"]
    tensors, _ = io.load_checkpoint(checkpoint)
    params = {
        k[len("param.") :]: t[SEEDS.index(seed)][None].to(torch.float64)
        for k, t in tensors.items()
        if k.startswith("param.")
    }
    tspec = TransferSpec.from_dict(SMALL)
    task = make_downstream_tasks(spec, seed, tspec)["transfer"]
    X, y = draw(task, n, train_generator(spec, seed, "transfer", n), "train")
    Xt, yt = draw(task, tspec.test_size, heldout_generator(spec, seed, "transfer"), "test")
    U, Ut = _u(params, X, spec), _u(params, Xt, spec)
    # f = v . u(X): u is the representation the read-out v sees
    f = forward(params, embed(Xt[None], spec.model), spec.model)[0][0]
    torch.testing.assert_close(f, Ut @ params["v"][0], rtol=1e-9, atol=1e-9)
    model = LogisticRegression(C=C, max_iter=1000).fit(U.numpy(), y.numpy())
    g = model.decision_function(Ut.numpy())
    assert row["test_accuracy"] == pytest.approx(float(np.mean(np.where(g > 0, 1.0, -1.0) == yt.numpy())), abs=1e-12)
    assert row["test_loss"] == pytest.approx(float(np.mean(np.logaddexp(0, -yt.numpy() * g))), rel=1e-6)


# -- the theorem's quantity: the average online error ----------------------------------------


def test_average_online_error_interpolates_linearly_and_is_exact_on_every_iterate():
    from groupsparse.transfer.paper_model import average_online_error, online_iterates

    assert online_iterates(10, 64) == list(range(10))
    ts = online_iterates(5000, 40)
    assert ts[0] == 0 and ts[-1] == 4999 and len(ts) <= 40 and ts == sorted(set(ts))
    e = np.array([0.9 - 0.8 * t / 4999 for t in ts])[:, None]  # linear in t: the rule is exact
    assert average_online_error(ts, e, 5000)[0] == pytest.approx(0.5, abs=1e-12)
    every = np.array([[0.5], [0.25], [0.0], [1.0]])
    assert average_online_error([0, 1, 2, 3], every, 4)[0] == pytest.approx(0.4375)


def _direct_online_error(spec, params, X, y, Xo, yo, eta, trainable):
    """One pass of online SGD written as a plain loop with autograd; the test error (y f <= 0 on the
    fixed batch) of every iterate t = 0 .. n-1 (parameters after t updates), averaged, and the
    final parameters."""
    from groupsparse.model.transformer import embed, forward

    p = {k: t.clone() for k, t in params.items()}
    Zo = embed(Xo[None], spec.model)
    errors = []
    for t in range(X.shape[0]):
        with torch.no_grad():
            errors.append(float(((yo * forward(p, Zo, spec.model)[0][0]) <= 0).double().mean()))
        leaves = {k: v.detach().requires_grad_(k in trainable) for k, v in p.items()}
        f = forward(leaves, embed(X[t : t + 1][None], spec.model), spec.model)[0][0, 0]
        loss = torch.nn.functional.softplus(-y[t] * f)
        grads = torch.autograd.grad(loss, [leaves[k] for k in trainable])
        for k, g in zip(trainable, grads):
            p[k] = p[k] - eta * g
    return float(np.mean(errors)), p


@pytest.mark.parametrize(
    "method, trainable, points",
    [
        ("pretrained_finetune_v0", ("layer0.W", "v"), 64),  # every iterate scored: exact
        ("pretrained_frozen_W", ("v",), 64),
        ("pretrained_frozen_W_v0", ("v",), 12),  # 12 log-spaced iterates of 40, interpolated
    ],
)
def test_online_error_equals_a_direct_loop(checkpoint, method, trainable, points):
    spec, seed, n = RunSpec.from_dict(RUN), SEEDS[0], 40
    transfer = {
        "selection": "cv",
        "dtype": "float64",
        "online_eval_size": 500,
        "online_points": points,
        "downstream": ["transfer"],
    }
    row = _run(checkpoint, [method], [n], **transfer)
    row = row[row.seed == seed].iloc[0]
    hp = _hp(row)
    tensors, _ = io.load_checkpoint(checkpoint)
    params = {
        k[len("param.") :]: t[SEEDS.index(seed)][None].to(torch.float64)
        for k, t in tensors.items()
        if k.startswith("param.")
    }
    if hp["v_start"] == "zero":
        params["v"] = torch.zeros_like(params["v"])
    tspec = TransferSpec.from_dict(SMALL)
    task = make_downstream_tasks(spec, seed, tspec)["transfer"]
    X, y = draw(task, n, train_generator(spec, seed, "transfer", n), "train")
    Xt, yt = draw(task, tspec.test_size, heldout_generator(spec, seed, "transfer"), "test")
    direct, final = _direct_online_error(spec, params, X, y, Xt[:500], yt[:500], hp["eta"], trainable)
    assert 0 <= row["online_error"] <= 1
    # the recorded read-out alignment is that of the loop's start and end (v1: v's first d coordinates)
    d, new = spec.task.d, task.directions[0]
    cos = lambda v, u: float(v[:d] @ u) / float(v[:d].norm())  # noqa: E731
    if hp["v_start"] == "zero":
        assert math.isnan(row["cos_v1_new_start"])
    else:
        assert row["cos_v1_new_start"] == pytest.approx(cos(params["v"][0], new), abs=1e-9)
    assert row["cos_v1_new"] == pytest.approx(cos(final["v"][0], new), abs=1e-6)
    if points >= n:
        assert row["online_error"] == pytest.approx(direct, abs=1e-9)
    else:
        assert row["online_error"] == pytest.approx(direct, abs=0.03)


def test_both_fine_tuning_starts_are_separate_methods(checkpoint):
    table = _run(
        checkpoint,
        ["pretrained_finetune", "pretrained_finetune_v0", "pretrained_frozen_W", "pretrained_frozen_W_v0", "logreg"],
        [32],
        downstream=["transfer"],
    )
    starts = {m: v for m, v in zip(table["method"], table["p_v_start"]) if m.startswith("pretrained")}
    assert starts == {
        "pretrained_finetune": "pretrained",
        "pretrained_finetune_v0": "zero",
        "pretrained_frozen_W": "pretrained",
        "pretrained_frozen_W_v0": "zero",
    }
    trained = {m: v for m, v in zip(table["method"], table["p_train"]) if m.startswith("pretrained")}
    assert trained == {"pretrained_finetune": "W_and_v", "pretrained_finetune_v0": "W_and_v"} | {
        "pretrained_frozen_W": "v",
        "pretrained_frozen_W_v0": "v",
    }
    # the read-out's alignment is recorded for the paper's model only, from the checkpoint's v or none
    paper = table[table.method.str.startswith("pretrained_f")]
    assert paper["cos_v1_new"].between(-1, 1).all() and table.loc[table.method == "logreg", "cos_v1_new"].isna().all()
    assert paper.loc[paper.p_v_start == "zero", "cos_v1_new_start"].isna().all()
    assert paper.loc[paper.p_v_start == "pretrained", "cos_v1_new_start"].between(-1, 1).all()
    online = table.groupby("method")["online_error"]
    assert online.apply(lambda s: s.notna().all()).drop("logreg").all() and online.get_group("logreg").isna().all()
