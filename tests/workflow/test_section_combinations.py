"""Every combination of a study's sections runs end to end.

The sections that change the DAG's shape are switched on and off: transfer, ablations, the scaling
grid (off, plain, with its batch check, with its stability runs, with both) and an image task
beside the synthetic one: 2 x 2 x 5 x 2 = 40 studies. Each is tiny (a few steps, two transfer
sizes), its config passes the study's JSON schema, and each finished study must hold the tables
its sections promise. A study takes 30-150 s on 2 cores (mostly job start-up), so by default the
test runs 7 of them: every pair of the six switches (transfer, ablations, images, scaling, its batch
check, its stability runs) meets in both settings, so a bug that needs two sections to meet shows up,
and every level of the scaling section runs once (the smallest such set, found by exhaustive search
and checked below). GROUPSPARSE_ALL_COMBINATIONS=1 runs all 40.
"""

from __future__ import annotations

import itertools
import os

import pytest
import yaml

from conftest import REPO, run_snakemake

SCALING = ("off", "grid", "batch_check", "stability", "batch_check+stability")

TINY_PRETRAIN = {"seeds": 2, "seeds_per_job": 2, "steps": 6, "batch": 32, "eval_size": 64, "record_every": 3}
TINY_TRANSFER = {
    "enabled": True,
    "sizes": [8, 16],
    "methods": ["pretrained_probe", "logreg"],
    "method_groups": {"linear": ["pretrained_probe", "logreg"]},
    "test_size": 64,
    "cv_folds": 2,
}


def study_config(transfer: bool, ablations: bool, scaling: str, images: bool) -> dict:
    """A tiny study with these sections on; every other key takes the schema's default."""
    name = f"combo_t{int(transfer)}_a{int(ablations)}_{scaling.replace('+', '_')}_i{int(images)}"
    cfg: dict = {
        "study_name": name,
        "study_seed": 3,
        "pretrain": dict(TINY_PRETRAIN, attention_checkpoints=2),
        "tasks": {"base": {"task": {"d": 3, "D": 4}}},
        "transfer": dict(TINY_TRANSFER) if transfer else {"enabled": False},
        "jobs": {"pretrain_threads": 1, "transfer_threads": 1},
    }
    if images:
        cfg["tasks"]["digits"] = {
            "task": {"kind": "images", "dataset": "digits", "D": 4, "d": 4, "reduce": "pool", "images_per_class": 40},
            "pretrain": {"sampling": "iid"},
        }
    if scaling == "off":
        cfg["scaling"] = {"enabled": False}
    else:
        cfg["scaling"] = {
            "enabled": True,
            "task": {"d": 3},
            "d_grid": [3],  # one d: the DAG has the same shape with two (the joint fit is a unit test)
            "D_grid": [3, 4, 5, 7],
            "steps_per_D3": 0.05,
            "pretrain": dict(TINY_PRETRAIN),
            "transfer_D_grid": [3, 5],
            "transfer": dict(TINY_TRANSFER, downstream=["transfer"]) if transfer else {"enabled": False},
            "analysis": {
                "fit_D_max": 5,
                "predict_D": [7],
                "kappas": [0.05],
                "target_c": [0.1],
                "n_boot": 100,
                "methods": ["pretrained_probe", "logreg"],
            },
        }
        if "batch_check" in scaling:
            cfg["scaling"]["batch_check"] = {"d": 3, "D": [7], "batches": [16]}
        if "stability" in scaling:
            cfg["scaling"]["stability"] = {
                "d": 3,
                "seeds": 2,
                "steps_per_D3": 0.05,
                "variants": {
                    "autograd_float64": {"pretrain": {"gradient": "autograd"}, "dtype": "float64", "D_grid": [7]}
                },
            }
    if ablations:
        cfg["ablations"] = {
            "enabled": True,
            "base_task": "base",
            "pretrain": dict(TINY_PRETRAIN),
            "transfer": (
                dict(TINY_TRANSFER, methods=["logreg"], method_groups={"ablation": ["logreg"]})
                if transfer
                else {"enabled": False}
            ),
            "variants": {"added_positions": {"model": {"positions": "add"}}},
            "analysis": {"sizes": [8, 16]} if transfer else {},
        }
    else:
        cfg["ablations"] = {"enabled": False}
    return cfg


def expected_tables(transfer: bool, ablations: bool, scaling: str) -> list[str]:
    from groupsparse.io import tables as names

    expected = ["pretrain_trajectories", "pretrain_attention", "pretrain_summary"]
    if transfer:
        expected += list(names.TRANSFER_TABLES)
    if ablations or scaling != "off":
        expected += list(names.SCALING_TABLES)
    return [f"{t}.parquet" for t in expected]


FACTORS = ((False, True), (False, True), SCALING, (False, True))
COMBINATIONS = list(itertools.product(*FACTORS))
# (transfer, ablations, scaling, images): 7 studies, the fewest that hold every pair of switches and
# every scaling level (an exhaustive search over the 40; the cheapest such set by sections switched on)
DEFAULT_SET = [
    (False, False, "off", True),
    (False, False, "grid", False),
    (False, False, "batch_check", False),
    (False, False, "stability", False),
    (False, True, "off", False),  # ablations without a scaling grid: rule predict has no trajectories
    (True, False, "off", False),
    (True, True, "batch_check+stability", True),
]


def switches(combo: tuple) -> tuple[bool, ...]:
    """The six on/off switches a combination sets: transfer, ablations, images, scaling, batch check, stability."""
    transfer, ablations, scaling, images = combo
    return (transfer, ablations, images, scaling != "off", "batch_check" in scaling, "stability" in scaling)


def pairs_of(combo: tuple) -> set:
    s = switches(combo)
    return {(i, s[i], j, s[j]) for i, j in itertools.combinations(range(len(s)), 2)}


RUN = COMBINATIONS if os.environ.get("GROUPSPARSE_ALL_COMBINATIONS") == "1" else DEFAULT_SET


def test_the_default_set_holds_every_pair_of_switches_and_every_scaling_level():
    assert set().union(*map(pairs_of, DEFAULT_SET)) == set().union(*map(pairs_of, COMBINATIONS))
    assert {scaling for _, _, scaling, _ in DEFAULT_SET} == set(SCALING)
    assert set(DEFAULT_SET) <= set(COMBINATIONS)
    # without one study, some pair or level is missed: the set is minimal
    for k in range(len(DEFAULT_SET)):
        rest = DEFAULT_SET[:k] + DEFAULT_SET[k + 1 :]
        assert set().union(*map(pairs_of, rest)) != set().union(*map(pairs_of, COMBINATIONS)) or {
            scaling for _, _, scaling, _ in rest
        } != set(SCALING)


def test_every_generated_config_passes_the_schema():
    """The generated studies are valid configs: the factorial tests the DAG, not the refusals."""
    from groupsparse.config.schema import check_study

    for combo in COMBINATIONS:
        check_study(study_config(*combo))


@pytest.mark.slow
@pytest.mark.parametrize(
    "transfer, ablations, scaling, images",
    RUN,
    ids=[f"t{int(t)}-a{int(a)}-{s}-i{int(i)}" for t, a, s, i in RUN],
)
def test_section_combination_runs(tmp_path, transfer, ablations, scaling, images):
    import pandas as pd

    cfg = study_config(transfer, ablations, scaling, images)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = run_snakemake("--cores", "2", "-d", str(tmp_path), "--configfile", str(path), cwd=REPO)
    out = res.stdout[-4000:] + res.stderr[-4000:]
    assert res.returncode == 0, out
    tables = tmp_path / "results" / cfg["study_name"] / "tables"
    for name in expected_tables(transfer, ablations, scaling):
        assert (tables / name).is_file(), f"{name} missing after a finished study\n{out}"
        pd.read_parquet(tables / name)  # readable
    if scaling != "off":
        traj = pd.read_parquet(tables / "pretrain_trajectories.parquet")
        variants = set(traj.loc[traj["role"] == "scaling", "variant"].fillna(""))
        assert ("batch16" in variants) == ("batch_check" in scaling)
        assert ("autograd_float64" in variants) == ("stability" in scaling)
