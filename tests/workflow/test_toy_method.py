"""A method is one file: a copy of the package with one new module in groupsparse/transfer/methods/
(and nothing else changed) runs a tiny study with that method, through the real Snakefile: parse-time
checks, cost model, pretraining, transfer, aggregation. Its chosen setting lands in a typed p_* column."""

from __future__ import annotations

import os
import shutil
import subprocess

import pandas as pd
import pytest
import yaml

from conftest import REPO, tiny_config

# A nearest-class-mean classifier on vec(X): w = scale * (mean of class +1 - mean of class -1).
TOY_METHOD = '''"""A toy: nearest class mean on vec(X) (the test that adding a method is adding a file)."""

FAMILY = "baseline"
DESCRIPTION = "nearest class mean on vec(X)"
DEFAULTS = {"scale": 1.0}
GRID = {"scale": [0.5, 1.0, 2.0]}
LIBRARY = "torch"
COSTS_LIKE = "logreg"


def work(n, n_eval, seeds, d, D, m, hp):
    return seeds, seeds * n * D * d, seeds * n_eval * D * d


def fit(ctx, X, y, evals, hps, gens, start=None, online=None):
    import torch

    from ..fitting import FitOutput

    S = X.shape[0]
    Xf, yf = X.reshape(S, X.shape[1], -1).to(torch.float64), y.to(torch.float64)
    pos, neg = (yf > 0).to(torch.float64), (yf < 0).to(torch.float64)
    mu_pos = (Xf * pos[..., None]).sum(1) / pos.sum(1).clamp(min=1)[:, None]
    mu_neg = (Xf * neg[..., None]).sum(1) / neg.sum(1).clamp(min=1)[:, None]
    scale = torch.tensor([float(hp["scale"]) for hp in hps], dtype=torch.float64)[:, None]
    w, b = scale * (mu_pos - mu_neg), -(scale * (mu_pos - mu_neg) * (mu_pos + mu_neg) / 2).sum(-1)
    outs = [(E.reshape(S, E.shape[1], -1).to(torch.float64) @ w[..., None])[..., 0] + b[:, None] for E in evals]
    return FitOutput(outs, [None] * S, [{} for _ in range(S)])
'''


@pytest.mark.slow
def test_a_new_method_module_runs_through_a_tiny_study_with_no_other_file_changed(tmp_path):
    copy = tmp_path / "repo"
    for part in ("src", "workflow", "Snakefile"):
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(
            REPO / part,
            copy / part,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if part != "Snakefile" else {}),
        )
    added = copy / "src/groupsparse/transfer/methods/toy_mean.py"
    added.write_text(TOY_METHOD)
    cfg = tiny_config()
    cfg["study_name"] = "toy"
    cfg["pretrain"] |= {"seeds": 2, "seeds_per_job": 2, "steps": 20}
    cfg["transfer"] |= {
        "sizes": [8, 64],
        "test_size": 200,
        "methods": ["toy_mean", "logreg"],
        "method_groups": {"all": ["toy_mean", "logreg"]},
    }
    cfg["transfer"].pop("grids", None)
    cfg["transfer"].pop("hyperparameters", None)
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, PYTHONPATH=str(copy / "src"))  # the jobs run the copy's package too
    target = "results/toy/tables/transfer.parquet"
    res = subprocess.run(
        ["snakemake", "-s", str(copy / "Snakefile"), "--cores", "2", "-d", str(tmp_path), target, "--configfile"]
        + [str(tmp_path / "toy.yaml")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    table = pd.read_parquet(tmp_path / target)
    toy = table[table["method"] == "toy_mean"]
    assert len(toy) == 2 * 2 * 2  # downstream x seeds x sizes
    assert (toy["status"] == "ok").all()
    big = toy[(toy["n"] == 64) & (toy["downstream"] == "transfer")]
    assert (big["test_accuracy"] > 0.6).all(), big["test_accuracy"].tolist()  # it learns, not chance
    assert toy["p_scale"].dtype == "float64" and set(toy["p_scale"]) <= {0.5, 1.0, 2.0}
    assert table.loc[table["method"] == "logreg", "p_scale"].isna().all()
    # nothing but the one file differs between the copy and the repository
    changed = subprocess.run(
        ["diff", "-rq", "-x", "__pycache__", str(REPO / "src"), str(copy / "src")], capture_output=True, text=True
    ).stdout.splitlines()
    assert changed == [f"Only in {copy}/src/groupsparse/transfer/methods: toy_mean.py"], changed
