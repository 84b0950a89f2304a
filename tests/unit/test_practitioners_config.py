"""configs/practitioners.yaml (ordinary training over D) plans what its comments promise: every variant
at every D, gradient descent to flow time 4 D^3 at its own step size, Adam for a fixed number of steps."""

from __future__ import annotations

import json
import math

import yaml

from groupsparse.study import preflight

from conftest import REPO

CONFIG = REPO / "configs" / "practitioners.yaml"
SCHEMA = yaml.safe_load((REPO / "src/groupsparse/config/config.schema.yaml").read_text())


def planned(tmp_path) -> dict[str, dict]:
    config = yaml.safe_load(CONFIG.read_text())
    runs = preflight.check_study(config, SCHEMA, config_files=[str(CONFIG)], results=str(tmp_path))
    return {name: json.loads(run.spec_json) for name, run in runs.items() if name.startswith("stab_")}


def test_every_variant_runs_at_every_D_to_its_length(tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    stability = config["scaling"]["stability"]
    specs = planned(tmp_path)
    Ds = config["scaling"]["D_grid"]
    assert len(specs) == len(stability["variants"]) * len(Ds)
    for vname, variant in stability["variants"].items():
        for D in Ds:
            pre = specs[f"stab_{vname}_d10_D{D}"]["pretrain"]
            limit = variant["pretrain"].get("eta_D_limit")
            assert pre["eta"] == variant["pretrain"].get("eta", 0.5) and pre.get("eta_D_limit") == limit
            eta = min(pre["eta"], limit / D) if limit else pre["eta"]
            if "steps_per_D3" in variant:  # adam: a fixed number of steps, no flow time
                assert pre["optimizer"] == "adam" and pre["steps"] == math.ceil(variant["steps_per_D3"] * D**3)
            else:
                assert pre["steps"] == math.ceil(stability["flow_time_per_D3"] * D**3 / eta)
            assert pre["gradient"] == "autograd"


def test_the_step_sizes_differ_only_past_D_12(tmp_path):
    specs = planned(tmp_path)
    for D in (8, 12, 16, 24, 32):
        a, b = specs[f"stab_zero_eta05_d10_D{D}"]["pretrain"], specs[f"stab_zero_etaD_d10_D{D}"]["pretrain"]
        assert (a["steps"] == b["steps"]) == (D <= 12)
