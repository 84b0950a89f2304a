"""configs/practitioners.yaml (ordinary training over D) plans what its comments promise: every variant
at its levels of D (the eta(D) ones from D = 16 on), gradient descent to flow time 4 D^3 at its own step
size, Adam for a fixed number of steps; and its 2-core slice, merged over it, plans exactly the runs whose
tables are committed."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from groupsparse.study import preflight

from conftest import REPO

CONFIG = REPO / "configs" / "practitioners.yaml"
SCHEMA = yaml.safe_load((REPO / "src/groupsparse/config/config.schema.yaml").read_text())
# the config's parts: the slices 2 cores afford and the cluster's overlay, each merged over it
PARTS = sorted((REPO / "configs/slices").glob("practitioners_*.yaml")) + sorted(
    (REPO / "configs/cluster").glob("practitioners_*.yaml")
)


@pytest.fixture(autouse=True)
def _away_from_results(tmp_path, monkeypatch):
    """load_study checks who owns results/<study> under the working directory: a checkout that ran these
    slices holds them (another config's copy of the same study), which is not what these tests are about."""
    monkeypatch.chdir(tmp_path)


def planned(tmp_path) -> dict[str, dict]:
    config = yaml.safe_load(CONFIG.read_text())
    runs = preflight.check_study(config, SCHEMA, config_files=[str(CONFIG)], results=str(tmp_path))
    return {name: json.loads(run.spec_json) for name, run in runs.items() if name.startswith("stab_")}


def test_every_variant_runs_at_its_D_to_its_length(tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    stability = config["scaling"]["stability"]
    specs = planned(tmp_path)
    levels = {v: variant.get("D_grid", config["scaling"]["D_grid"]) for v, variant in stability["variants"].items()}
    assert len(specs) == sum(map(len, levels.values()))
    assert all(levels[v] == [16, 24, 32] for v in levels if v.endswith("_etaD"))
    for vname, variant in stability["variants"].items():
        for D in levels[vname]:
            pre = specs[f"stab_{vname}_d10_D{D}"]["pretrain"]
            limit = variant["pretrain"].get("eta_D_limit")
            assert pre["eta"] == variant["pretrain"].get("eta", 0.5) and pre.get("eta_D_limit") == limit
            eta = min(pre["eta"], limit / D) if limit else pre["eta"]
            if "steps_per_D3" in variant:  # adam: a fixed number of steps, no flow time
                assert pre["optimizer"] == "adam" and pre["steps"] == math.ceil(variant["steps_per_D3"] * D**3)
            else:
                assert pre["steps"] == math.ceil(stability["flow_time_per_D3"] * D**3 / eta)
            assert pre["gradient"] == "autograd"


def test_the_eta_D_variants_run_only_where_the_step_sizes_differ(tmp_path):
    """eta(D) = min(0.5, 6 / D) is 0.5 up to D = 12: an eta(D) run there would repeat the eta = 0.5 one."""
    specs = planned(tmp_path)
    for D in (8, 12, 16, 24, 32):
        a = specs[f"stab_zero_eta05_d10_D{D}"]["pretrain"]
        assert (f"stab_zero_etaD_d10_D{D}" in specs) == (D > 12)
        if D > 12:
            assert specs[f"stab_zero_etaD_d10_D{D}"]["pretrain"]["steps"] > a["steps"]


def test_the_slice_merged_over_it_plans_the_committed_runs():
    """configs/slices/practitioners_small_D.yaml over configs/practitioners.yaml: the runs of the committed
    tables (docs/practitioners_small_D/tables/config.yaml, the config that made them), spec for spec."""
    from groupsparse.commands.estimate import load_study

    made = REPO / "docs/practitioners_small_D/tables/config.yaml"
    _, before = load_study(str(made))
    config, now = load_study([CONFIG, REPO / "configs/slices/practitioners_small_D.yaml"])
    assert config["study_name"] == "practitioners_small_D"
    assert sorted(now) == sorted(before)
    assert {k: now[k].spec for k in now} == {k: before[k].spec for k in before}


def test_every_slice_run_at_a_level_of_the_full_config_is_that_configs_run():
    """A slice's runs at the full config's D levels are the full config's runs, spec for spec (the seeds
    hash the run's identity), so the slices' tables are parts of the full sweep's."""
    from groupsparse.commands.estimate import load_study

    _, full = load_study([str(CONFIG)])
    levels = set(yaml.safe_load(CONFIG.read_text())["scaling"]["D_grid"])
    for slice_ in PARTS:
        _, part = load_study([str(CONFIG), str(slice_)])
        shared = [k for k in part if k != "base" and int(k.rsplit("_D", 1)[1]) in levels]
        assert shared, slice_.name
        assert all(part[k].spec == full[k].spec for k in shared), slice_.name


def test_the_slices_and_the_cluster_overlay_together_are_the_whole_sweep():
    """Every stability run of configs/practitioners.yaml is planned by one of its parts (the 2-core slices,
    the cluster's D = 32 overlay), so their tables together are the full sweep's table."""
    from groupsparse.commands.estimate import load_study

    _, full = load_study([str(CONFIG)])
    covered = set()
    for part in PARTS:
        covered |= {k for k in load_study([str(CONFIG), str(part)])[1] if k.startswith("stab_")}
    assert {k for k in full if k.startswith("stab_")} <= covered
