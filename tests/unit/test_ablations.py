"""Every model/task variant of the ablations pretrains through the Trainer on a tiny problem:
no error, finite metrics, a proper attention table, and (K > 1) attention that finds the
relevant set."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from groupsparse.config.specs import RunSpec
from groupsparse.training.pretrain import Trainer

VARIANTS = {
    "paper": {},
    "added_positions": {"model": {"positions": "add"}},
    "sqrt_scaling": {"model": {"score_scale": "sqrt"}},
    "separate_wk_wq": {"model": {"attention": "separate", "init": "random"}},
    "random_init": {"model": {"init": "random"}},
    "iid_batches": {"pretrain": {"sampling": "iid"}},
    "two_relevant": {"task": {"relevant_groups": 2}},
    "three_relevant": {"task": {"relevant_groups": 3}},
    "label_noise": {"task": {"label_noise": 0.1}},
    "correlated_features": {"task": {"features": "correlated"}},
    "student_t_features": {"task": {"features": "student_t"}},
    "two_layers": {"model": {"layers": 2}},
}
D = 5
SEEDS = [0, 1]


def tiny_spec(variant: dict, steps: int = 30, **pretrain) -> RunSpec:
    return RunSpec.from_dict(
        {
            "study_seed": 3,
            "task_name": "ablation_test",
            "dtype": "float64",
            "task": {"d": 4, "D": D} | variant.get("task", {}),
            "model": variant.get("model", {}),
            "pretrain": {"steps": steps, "batch": 128, "eval_size": 256, "record_every": 10, "attention_checkpoints": 2}
            | variant.get("pretrain", {})
            | pretrain,
        }
    )


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_pretrains_with_finite_metrics(name):
    spec = tiny_spec(VARIANTS[name])
    res = Trainer(spec, SEEDS).run()
    assert res.status == ["ok", "ok"]
    tr = res.trajectory
    assert sorted(tr["seed"].unique()) == SEEDS and tr["step"].max() == spec.pretrain.steps
    for col in (
        "train_loss",
        "eval_loss",
        "eval_accuracy",
        "attention_on_relevant",
        "cos_v1_vstar",
        "v1_norm",
        "W_ff_norm",
    ):
        assert np.isfinite(tr[col]).all(), col
    assert tr["attention_on_relevant"].between(0, 1).all()
    K = spec.task.relevant_groups
    initial = tr[tr["step"] == 0]["attention_on_relevant"]
    if spec.model.init == "zero":  # uniform attention at W = 0: K relevant keys of D
        assert np.allclose(initial, K / D)
    position_blocks = ("v2_norm", "W_fp_norm", "W_pf_norm", "W_pp_norm")
    if spec.model.positions == "concat":
        assert all(np.isfinite(tr[c]).all() for c in position_blocks)
    else:  # added positions: there are no position coordinates to report
        assert all(tr[c].isna().all() for c in position_blocks)
    for key, p in res.params.items():
        assert torch.isfinite(p).all(), key
    assert any(float(p.abs().max()) > 0 for p in res.params.values())
    at = res.attention
    sums = at.groupby(["seed", "step", "query"])["mass"].sum()
    assert np.allclose(sums, 1.0)  # each query's attention is a distribution over keys
    final = tr[tr["step"] == spec.pretrain.steps]
    assert (final["eval_loss"] < math.log(2) + 0.05).all()  # no blow-up from the logistic loss at f = 0


@pytest.mark.parametrize("name", ["two_relevant", "three_relevant"])
def test_attention_on_the_relevant_set_grows(name):
    spec = tiny_spec(VARIANTS[name], steps=150)
    tr = Trainer(spec, SEEDS).run().trajectory
    K = spec.task.relevant_groups
    for seed, g in tr.groupby("seed"):
        g = g.sort_values("step")
        start, end = g["attention_on_relevant"].iloc[0], g["attention_on_relevant"].iloc[-1]
        assert start == pytest.approx(K / D)
        assert end > start + 0.1, (seed, start, end)
        assert g["eval_accuracy"].iloc[-1] > 0.55


@pytest.mark.parametrize("name", ["sqrt_scaling", "random_init", "iid_batches"])
def test_closed_form_gradient_matches_autograd_on_paper_model_variants(name):
    """The paper-model variants train with the closed-form gradient: it must give autograd's steps."""
    runs = {}
    for gradient in ("closed_form", "autograd"):
        runs[gradient] = Trainer(tiny_spec(VARIANTS[name], steps=8, gradient=gradient), SEEDS).run()
    for key, p in runs["closed_form"].params.items():
        torch.testing.assert_close(p, runs["autograd"].params[key], rtol=1e-9, atol=1e-12)
